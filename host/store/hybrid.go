package store

import (
	"container/heap"
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// Hybrid knowledge search: full text and nearest vectors, fused.
//
// Vectors are compared by brute force: the backend streams the
// collection's vectors of the query's model (meta filter applied), the
// front keeps the nearest by cosine similarity (a dot product: every
// stored vector, and the query's, is unit length). No vector index
// exists on either backend without an extension, and a scan is exact.
// Its cost is bounded by KnowledgeVectorScan: a search compares at most
// that many documents, the collection's most recently updated; older
// ones are still found by their words. At 768 dimensions a full scan
// reads 31 MB of vectors, which is the bound on one search's work
// (BenchmarkKnowledgeHybrid: about 10 µs a document on SQLite, most of it
// SQLite reading pages).
//
// The lexical candidates (the backend's ranking, every term required)
// and the nearest ones (HybridCandidates of each) are fused by
// reciprocal rank fusion: a document's score is the sum, over the lists
// holding it, of 1/(RRFK + its rank there), ranks from 1. RRF needs no
// calibration between BM25 (or ts_rank) and cosine scores, which live on
// scales that do not compare, and a document high on either list ranks
// high; a document on both ranks highest.

// Hybrid search bounds.
const (
	// KnowledgeVectorScan is the most vectors one search compares.
	KnowledgeVectorScan = 10_000
	// HybridCandidates is how many documents each list contributes to
	// the fusion.
	HybridCandidates = abi.MaxKnowledgeSearchLimit
	// RRFK is reciprocal rank fusion's constant (60, as in Cormack,
	// Clarke and Büttcher's paper, and as most engines use).
	RRFK = 60
	// MaxVectorDims bounds a stored vector's length.
	MaxVectorDims = 8192
)

// encodeVector checks v (1..MaxVectorDims finite values, not all zero, a
// model named) and returns it at unit length as little-endian float32s.
func encodeVector(op string, v Vector) ([]byte, error) {
	if v.Model == "" || len(v.Model) > 256 {
		return nil, abi.Errorf(abi.CodeInternal, "%s: the embedding names no model", op)
	}
	if len(v.Values) == 0 || len(v.Values) > MaxVectorDims {
		return nil, abi.Errorf(abi.CodeUnavailable, "%s: model %s gave a vector of %d values; a vector has 1 to %d", op, v.Model, len(v.Values), MaxVectorDims)
	}
	var norm float64
	for _, x := range v.Values {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, abi.Errorf(abi.CodeUnavailable, "%s: model %s gave a vector holding NaN or an infinity", op, v.Model)
		}
		norm += f * f
	}
	if norm == 0 || math.IsInf(norm, 0) {
		return nil, abi.Errorf(abi.CodeUnavailable, "%s: model %s gave a vector of length 0 or one too long to measure; it has no direction to compare", op, v.Model)
	}
	norm = math.Sqrt(norm)
	b := make([]byte, 4*len(v.Values))
	for i, x := range v.Values {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(float64(x)/norm)))
	}
	return b, nil
}

// dot is the dot product of the unit vectors a (decoded) and b (encoded),
// or false when their lengths differ (a vector of another length, made
// before the model changed).
func dot(a []float32, b []byte) (float64, bool) {
	if len(b) != 4*len(a) {
		return 0, false
	}
	var s float64
	for i, x := range a {
		s += float64(x) * float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return s, true
}

func decodeVector(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// near is a document and its similarity to the query.
type near struct {
	id  string
	sim float64
}

// nearHeap is a min-heap of the nearest found so far: its root is the
// least near, the one a nearer document replaces.
type nearHeap []near

func (h nearHeap) Len() int { return len(h) }
func (h nearHeap) Less(i, j int) bool {
	if h[i].sim != h[j].sim {
		return h[i].sim < h[j].sim
	}
	return h[i].id > h[j].id
}
func (h nearHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *nearHeap) Push(x any)   { *h = append(*h, x.(near)) }
func (h *nearHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// hybridSearch returns q's hits ranked by the fusion of the backend's
// lexical candidates and the documents nearest to qv (model's, encoded),
// at most q.Limit, each scored by its fused score.
func (s *Store) hybridSearch(ctx context.Context, q driver.KnowledgeQuery, model string, qv []byte, minSim float64) ([]driver.KnowledgeCandidate, error) {
	kb, err := s.knowledgeBackend()
	if err != nil {
		return nil, err
	}
	want := q.Limit
	q.Limit = max(want, HybridCandidates)
	lexical, err := kb.KnowledgeSearch(ctx, q)
	if err != nil {
		return nil, err
	}
	query := decodeVector(qv)
	var nearest nearHeap
	err = kb.KnowledgeVectors(ctx, driver.KnowledgeVectorQuery{
		Org: q.Org, Module: q.Module, Collection: q.Collection, Model: model, Filter: q.Filter, Limit: KnowledgeVectorScan,
	}, func(id string, vec []byte) error {
		sim, ok := dot(query, vec)
		if !ok || sim <= minSim {
			return nil
		}
		n := near{id: id, sim: sim} // id is the backend's string, kept: strings are immutable
		if len(nearest) < HybridCandidates {
			heap.Push(&nearest, n)
		} else if (nearHeap{nearest[0], n}).Less(0, 1) { // the least near found is less near than this one
			nearest[0] = n
			heap.Fix(&nearest, 0)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Nearest first.
	slices.SortFunc(nearest, func(a, b near) int {
		if a.sim != b.sim {
			if a.sim > b.sim {
				return -1
			}
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
	fused := map[string]float64{}
	for i, c := range lexical {
		fused[c.ID] += 1.0 / float64(RRFK+i+1)
	}
	for i, n := range nearest {
		fused[n.id] += 1.0 / float64(RRFK+i+1)
	}
	ids := make([]string, 0, len(fused))
	for id := range fused {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if fused[a] != fused[b] {
			if fused[a] > fused[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	if len(ids) > want {
		ids = ids[:want]
	}
	byID := make(map[string]driver.KnowledgeCandidate, len(lexical))
	for _, c := range lexical {
		byID[c.ID] = c
	}
	var missing []string
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		docs, err := kb.KnowledgeDocs(ctx, q.Org, q.Module, q.Collection, missing)
		if err != nil {
			return nil, err
		}
		for _, c := range docs {
			byID[c.ID] = c
		}
	}
	out := make([]driver.KnowledgeCandidate, 0, len(ids))
	for _, id := range ids {
		c, ok := byID[id]
		if !ok {
			continue // deleted between the scan and the read
		}
		c.Score = fused[id]
		out = append(out, c)
	}
	return out, nil
}
