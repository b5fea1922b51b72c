package store_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	"github.com/moat-sandbox/moat/host/store"
)

// BenchmarkKnowledgeHybrid measures one hybrid search on SQLite over a
// collection of 5000 documents with 768-dimension vectors: the full-text
// candidates, the brute-force scan of every vector (half of
// store.KnowledgeVectorScan, the most one search compares), the fusion and
// the snippets. Its ns/op over 5000 is the cost of a document in the scan.
func BenchmarkKnowledgeHybrid(b *testing.B) {
	const docs, dims = 5000, 768
	ctx := context.Background()
	s, err := store.Open(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// A vector per text, random but the same for the same text.
	embed := func(_ context.Context, text string) (store.Vector, error) {
		h := fnv.New64a()
		h.Write([]byte(text))
		r := rand.New(rand.NewPCG(h.Sum64(), 7))
		v := make([]float32, dims)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return store.Vector{Model: "bench", Values: v}, nil
	}
	sc := store.Scope{Org: "acme", Module: "kb"}
	for i := range docs {
		text := fmt.Sprintf("note %d about the harbour, the ships and word%d", i, i%97)
		if _, err := s.KnowledgeAdd(ctx, sc, store.KnowledgeDoc{Collection: "docs", ID: fmt.Sprint("d", i), Text: text, Embed: embed},
			store.KnowledgeQuota{}); err != nil {
			b.Fatal(err)
		}
	}
	q := store.KnowledgeQuery{Collection: "docs", Query: "word13 ships", Embed: embed}
	b.ReportAllocs()
	for b.Loop() {
		hits, err := s.KnowledgeSearch(ctx, sc, q)
		if err != nil || len(hits) != 10 {
			b.Fatalf("%d hits, %v", len(hits), err)
		}
	}
}
