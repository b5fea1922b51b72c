package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// Knowledge: documents of text with metadata in named collections, per
// organization and module, searched by ranked full text. The rules a
// guest sees (limits, words and terms, metadata, filters) are abi's; this
// file holds them at the root, so the ops, the Go API and every backend
// share one check.
//
// # Ranking
//
// A search is lexical unless the caller gives it an embedder: the
// backend finds the documents holding every query term and scores them
// (BM25 over the collection's own statistics on SQLite, ts_rank on
// PostgreSQL). With an embedder (an operator's embedding model, see
// host/ai), documents are stored with their vectors, and a search ranks
// hybrid (hybrid.go): the backend's lexical candidates and the nearest
// documents by cosine similarity are fused into one order by reciprocal
// rank fusion, between the backend calls and the snippets, and a hit's
// score is the fused one.
//
// # Scope
//
// A collection is org-scoped (every user of the organization finds its
// documents) or user-scoped (scope: user in the manifest: only the user
// who added a document finds, replaces or deletes it). The store applies
// the scope, not the op: a user-scoped collection is stored as one
// collection per user (partition), so every statement of every backend,
// which confines itself to the organization, module and collection it is
// given, confines itself to the user too: searches, hybrid candidates and
// vectors, replacements and deletes. That also keeps each user's ranking
// statistics apart (a score says nothing of another user's documents,
// as it says nothing of another organization's), and gives each user
// their own ids (another user's document of the same id is neither
// replaced nor revealed by an add).

// KnowledgeDoc is a document to store: its collection and id, its text,
// its meta (scalars only; see abi) and the user who adds it.
type KnowledgeDoc struct {
	Collection, ID, Text string
	Meta                 map[string]any
	Owner                string
	// UserScoped says the collection is user-scoped: the document goes
	// to Owner's part of it, which only Owner's calls reach.
	UserScoped bool
	// Embed, when set, gives the document's vector. It is called once
	// the document is valid and before it is written (it is a model
	// call, which costs tokens: an invalid document costs none); its
	// error fails the add unchanged. The vector's bytes count against
	// the byte quota.
	Embed Embedder
}

// Embedder returns the vector of text: a model call (host/ai).
type Embedder func(ctx context.Context, text string) (Vector, error)

// Vector is an embedding and the name of the model that made it: a
// search compares only vectors of the same model.
type Vector struct {
	Model  string
	Values []float32
}

// KnowledgeQuota bounds what an organization's module stores in
// knowledge, over all its collections: documents, and bytes (each
// document's id, text and canonical meta). 0 in a field means no limit.
type KnowledgeQuota struct {
	Documents, Bytes int64
}

// KnowledgeUsage is what an organization's module stores in knowledge,
// measured as KnowledgeQuota measures it.
type KnowledgeUsage struct {
	Documents, Bytes int64
}

// KnowledgeQuery is one search: see abi.KnowledgeSearchRequest.
type KnowledgeQuery struct {
	Collection, Query string
	Limit             int // 0: abi.DefaultKnowledgeSearchLimit
	Filter            map[string]any
	// Embed, when set, ranks the search hybrid (hybrid.go): it is called
	// with the query once the query is valid. MinSimilarity leaves out
	// nearest documents whose cosine similarity to the query is not
	// above it.
	Embed         Embedder
	MinSimilarity float64
	// UserScoped says the collection is user-scoped: the search reaches
	// only User's documents (User must be set).
	UserScoped bool
	User       string
}

// KnowledgeKey names one document for KnowledgeDelete: its collection
// and id, and, as KnowledgeQuery's, the caller and the collection's scope.
type KnowledgeKey struct {
	Collection, ID string
	UserScoped     bool
	User           string
}

// partition is the collection the backends store and search for
// collection name: the name itself when it is org-scoped, else the name, a
// slash and the user. A collection name holds no slash (validateCollection),
// so no user's partition is another collection's name or another user's
// partition. An empty user is refused: a user-scoped call without a user
// would otherwise share one partition with every other such call.
func partition(op, name string, userScoped bool, user string) (string, error) {
	if !userScoped {
		return name, nil
	}
	if user == "" {
		return "", abi.Errorf(abi.CodeInvalidArgument, "%s: collection %s is user-scoped (scope: user) and the caller has no user; call it as a user", op, name)
	}
	if err := validateText(op, "user", user, abi.MaxKnowledgeIDLen, "use a shorter user id"); err != nil {
		return "", err
	}
	return name + "/" + user, nil
}

// KnowledgeHit is one document a search found; see abi.KnowledgeHit.
type KnowledgeHit struct {
	ID      string
	Score   float64
	Snippet string
	Meta    map[string]any // never nil
}

// KnowledgeAdd stores doc in sc, replacing the document of the same id in
// its collection, and reports whether it replaced one. The add is refused
// with an *abi.Error of abi.CodeTooLarge when it would take sc past quota
// (driver.OverKnowledgeQuota: a replacement adds no document, and one that
// does not grow the bytes is always allowed); the check and the write are
// one transaction, so concurrent adds cannot overshoot, from one process
// or several.
func (s *Store) KnowledgeAdd(ctx context.Context, sc Scope, doc KnowledgeDoc, quota KnowledgeQuota) (replaced bool, err error) {
	kb, err := s.knowledgeBackend()
	if err != nil {
		return false, err
	}
	const op = abi.OpKnowledgeAdd
	if err := sc.validate(); err != nil {
		return false, err
	}
	if err := validateCollection(op, doc.Collection); err != nil {
		return false, err
	}
	if err := validateDocID(op, doc.ID); err != nil {
		return false, err
	}
	if err := validateText(op, "text", doc.Text, abi.MaxKnowledgeTextBytes, "split the document into parts"); err != nil {
		return false, err
	}
	if err := validateText(op, "owner", doc.Owner, abi.MaxKnowledgeIDLen, "name the user who adds the document"); err != nil {
		return false, err
	}
	meta, err := canonicalMeta(op, "meta", doc.Meta, abi.MaxKnowledgeMetaKeys)
	if err != nil {
		return false, err
	}
	part, err := partition(op, doc.Collection, doc.UserScoped, doc.Owner)
	if err != nil {
		return false, err
	}
	d := driver.KnowledgeDoc{
		Org: sc.Org, Module: sc.Module, Collection: part, ID: doc.ID, Owner: doc.Owner,
		Text: doc.Text, Meta: meta, Terms: docTerms(doc.Text),
		Bytes: int64(len(doc.ID) + len(doc.Text) + len(meta)),
	}
	if doc.Embed != nil {
		v, err := doc.Embed(ctx, doc.Text)
		if err != nil {
			return false, err
		}
		if d.Vector, err = encodeVector(op, v); err != nil {
			return false, err
		}
		d.VectorModel = v.Model
		d.Bytes += int64(len(d.Vector))
	}
	d.At = time.Now().UnixNano()
	q := driver.KnowledgeUsage{Docs: max(quota.Documents, 0), Bytes: max(quota.Bytes, 0)}
	replaced, inUse, adds, err := kb.KnowledgeAdd(ctx, d, q)
	if errors.Is(err, driver.ErrOverQuota) {
		if q.Docs > 0 && driver.OverQuota(q.Docs, inUse.Docs, adds.Docs) {
			return false, abi.Errorf(abi.CodeTooLarge,
				"%s: the quota of %d knowledge documents for module %s in org %s is used up (%d stored); delete documents first",
				op, q.Docs, sc.Module, sc.Org, inUse.Docs)
		}
		return false, abi.Errorf(abi.CodeTooLarge,
			"%s: the disk quota of %d bytes for knowledge of module %s in org %s would be exceeded (in use %d, this add adds %d); delete documents first, or ask for a larger limits.disk",
			op, q.Bytes, sc.Module, sc.Org, inUse.Bytes, adds.Bytes)
	}
	if err != nil {
		return false, sc.wrap(op, err)
	}
	return replaced, nil
}

// KnowledgeDelete removes the document k names in sc and reports whether
// it existed (in a user-scoped collection: whether k.User had one of that
// id).
func (s *Store) KnowledgeDelete(ctx context.Context, sc Scope, k KnowledgeKey) (deleted bool, err error) {
	kb, err := s.knowledgeBackend()
	if err != nil {
		return false, err
	}
	const op = abi.OpKnowledgeDelete
	if err := sc.validate(); err != nil {
		return false, err
	}
	if err := validateCollection(op, k.Collection); err != nil {
		return false, err
	}
	if err := validateDocID(op, k.ID); err != nil {
		return false, err
	}
	part, err := partition(op, k.Collection, k.UserScoped, k.User)
	if err != nil {
		return false, err
	}
	deleted, err = kb.KnowledgeDelete(ctx, sc.Org, sc.Module, part, k.ID)
	if err != nil {
		return false, sc.wrap(op, err)
	}
	return deleted, nil
}

// KnowledgeSearch searches q.Collection in sc: the documents holding every
// term of q.Query whose meta matches q.Filter, best first, at most q.Limit
// of them. The query is plain text (see abi): nothing in it is syntax on
// any backend.
func (s *Store) KnowledgeSearch(ctx context.Context, sc Scope, q KnowledgeQuery) ([]KnowledgeHit, error) {
	kb, err := s.knowledgeBackend()
	if err != nil {
		return nil, err
	}
	const op = abi.OpKnowledgeSearch
	if err := sc.validate(); err != nil {
		return nil, err
	}
	if err := validateCollection(op, q.Collection); err != nil {
		return nil, err
	}
	switch {
	case q.Limit < 0 || q.Limit > abi.MaxKnowledgeSearchLimit:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "%s: limit %d is outside 0..%d; ask for at most %d hits (0 for %d)",
			op, q.Limit, abi.MaxKnowledgeSearchLimit, abi.MaxKnowledgeSearchLimit, abi.DefaultKnowledgeSearchLimit)
	case q.Limit == 0:
		q.Limit = abi.DefaultKnowledgeSearchLimit
	}
	if err := validateText(op, "query", q.Query, abi.MaxKnowledgeQueryBytes, "search for fewer words"); err != nil {
		return nil, err
	}
	terms := queryTerms(q.Query)
	switch {
	case len(terms) == 0:
		return nil, abi.Errorf(abi.CodeInvalidArgument,
			"%s: the query has no words to search for; a word is a run of letters and digits of at most %d bytes", op, abi.MaxKnowledgeTermBytes)
	case len(terms) > abi.MaxKnowledgeQueryTerms:
		return nil, abi.Errorf(abi.CodeTooLarge, "%s: the query has %d distinct words, over the limit of %d; search for fewer words",
			op, len(terms), abi.MaxKnowledgeQueryTerms)
	}
	filter, err := canonicalMeta(op, "filter", q.Filter, abi.MaxKnowledgeFilterKeys)
	if err != nil {
		return nil, err
	}
	part, err := partition(op, q.Collection, q.UserScoped, q.User)
	if err != nil {
		return nil, err
	}
	encoded := make([]string, len(terms))
	for i, t := range terms {
		encoded[i] = encodeTerm(t)
	}
	dq := driver.KnowledgeQuery{
		Org: sc.Org, Module: sc.Module, Collection: part,
		Terms: encoded, Filter: filter, Limit: q.Limit,
	}
	var cands []driver.KnowledgeCandidate
	if q.Embed != nil {
		v, err := q.Embed(ctx, q.Query) // its error, a model call's, goes back unchanged
		if err != nil {
			return nil, err
		}
		qv, err := encodeVector(op, v)
		if err != nil {
			return nil, err
		}
		cands, err = s.hybridSearch(ctx, dq, v.Model, qv, q.MinSimilarity)
		if err != nil {
			return nil, sc.wrap(op, err)
		}
	} else if cands, err = kb.KnowledgeSearch(ctx, dq); err != nil {
		return nil, sc.wrap(op, err)
	}
	hits := make([]KnowledgeHit, len(cands))
	for i, c := range cands {
		meta := map[string]any{}
		if err := json.Unmarshal([]byte(c.Meta), &meta); err != nil {
			return nil, sc.wrap(op, fmt.Errorf("document %q: stored meta is not a JSON object: %w", c.ID, err))
		}
		hits[i] = KnowledgeHit{ID: c.ID, Score: c.Score, Snippet: snippet(c.Text, terms), Meta: meta}
	}
	return hits, nil
}

// KnowledgeUsage returns what sc stores in knowledge, the measure
// KnowledgeAdd's quota applies to.
func (s *Store) KnowledgeUsage(ctx context.Context, sc Scope) (KnowledgeUsage, error) {
	kb, err := s.knowledgeBackend()
	if err != nil {
		return KnowledgeUsage{}, err
	}
	if err := sc.validate(); err != nil {
		return KnowledgeUsage{}, err
	}
	u, err := kb.KnowledgeUsage(ctx, sc.Org, sc.Module)
	if err != nil {
		return KnowledgeUsage{}, sc.wrap("knowledge.usage", err)
	}
	return KnowledgeUsage{Documents: u.Docs, Bytes: u.Bytes}, nil
}

// validateCollection checks a collection name: the names a grant lists
// (policy's collection names), so that every stored collection is one an
// operator can name.
func validateCollection(op, name string) error {
	ok := name != "" && len(name) <= abi.MaxKnowledgeCollectionLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_'
	}
	if !ok {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: collection %s is not a collection name; use 1-%d characters a-z 0-9 _, like docs",
			op, quoteShort(name), abi.MaxKnowledgeCollectionLen)
	}
	return nil
}

func validateDocID(op, id string) error {
	if id == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: id is empty; give the document an id of 1 to %d bytes", op, abi.MaxKnowledgeIDLen)
	}
	return validateText(op, "id", id, abi.MaxKnowledgeIDLen, "use a shorter id")
}

// validateText checks a string field: at most limit bytes, UTF-8, no NUL
// (PostgreSQL's text cannot hold one, and no reader expects one).
func validateText(op, field, s string, limit int, fix string) error {
	switch {
	case len(s) > limit:
		return abi.Errorf(abi.CodeTooLarge, "%s: %s is %d bytes, over the limit of %d; %s", op, field, len(s), limit, fix)
	case !utf8.ValidString(s):
		return abi.Errorf(abi.CodeInvalidArgument, "%s: %s is not valid UTF-8; send text as UTF-8", op, field)
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: %s contains a NUL byte at offset %d; remove it", op, field, i)
	}
	return nil
}

// canonicalMeta checks a document's meta or a search's filter (field
// names which) and returns it as canonical JSON: keys sorted, numbers as
// float64, no spaces; "{}" when it is empty.
func canonicalMeta(op, field string, m map[string]any, maxKeys int) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	if len(m) > maxKeys {
		return "", abi.Errorf(abi.CodeTooLarge, "%s: %s has %d keys, over the limit of %d; keep fewer", op, field, len(m), maxKeys)
	}
	out := make(map[string]any, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !metaKey(k) {
			return "", abi.Errorf(abi.CodeInvalidArgument,
				"%s: %s key %s is not a key; use 1-%d characters A-Z a-z 0-9 _ . : - starting with a letter, a digit or _",
				op, field, quoteShort(k), abi.MaxKnowledgeMetaKeyLen)
		}
		v, err := metaValue(m[k])
		if err != nil {
			return "", abi.Errorf(abi.CodeInvalidArgument, "%s: %s.%s %v", op, field, k, err)
		}
		out[k] = v
	}
	b, err := json.Marshal(out)
	if err != nil { // metaValue admits only what JSON encodes
		return "", abi.Errorf(abi.CodeInvalidArgument, "%s: %s: %v", op, field, err)
	}
	if len(b) > abi.MaxKnowledgeMetaBytes {
		return "", abi.Errorf(abi.CodeTooLarge, "%s: %s is %d bytes as JSON, over the limit of %d; keep large values in the text",
			op, field, len(b), abi.MaxKnowledgeMetaBytes)
	}
	return string(b), nil
}

// metaKey reports whether k is a meta key: 1 to abi.MaxKnowledgeMetaKeyLen
// characters A-Z a-z 0-9 _ . : -, the first a letter, a digit or _.
func metaKey(k string) bool {
	if k == "" || len(k) > abi.MaxKnowledgeMetaKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' ||
			i > 0 && (c == '.' || c == ':' || c == '-')) {
			return false
		}
	}
	return true
}

// metaValue returns v as meta holds it: a string (UTF-8, no NUL), a bool
// or a finite float64 (from any Go number, as a guest's JSON decodes).
func metaValue(v any) (any, error) {
	var f float64
	switch x := v.(type) {
	case string:
		if !utf8.ValidString(x) {
			return nil, errors.New("is not valid UTF-8; send text as UTF-8")
		}
		if i := strings.IndexByte(x, 0); i >= 0 {
			return nil, fmt.Errorf("contains a NUL byte at offset %d; remove it", i)
		}
		return x, nil
	case bool:
		return x, nil
	case float64:
		f = x
	case float32:
		f = float64(x)
	case int:
		f = float64(x)
	case int8:
		f = float64(x)
	case int16:
		f = float64(x)
	case int32:
		f = float64(x)
	case int64:
		f = float64(x)
	case uint:
		f = float64(x)
	case uint8:
		f = float64(x)
	case uint16:
		f = float64(x)
	case uint32:
		f = float64(x)
	case uint64:
		f = float64(x)
	case json.Number:
		var err error
		if f, err = x.Float64(); err != nil {
			return nil, fmt.Errorf("is not a number JSON can hold: %v", err)
		}
	case nil:
		return nil, errors.New("is null; meta values are strings, numbers or booleans: leave the key out instead")
	case map[string]any, []any:
		return nil, errors.New("is an object or a list; meta values are strings, numbers or booleans: flatten it into keys like a.b")
	default:
		return nil, fmt.Errorf("is a %T; meta values are strings, numbers or booleans", v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, errors.New("is not a finite number; JSON cannot hold NaN or infinities")
	}
	return f, nil
}

// quoteShort quotes s for a message, cut to 64 bytes: a guest's hostile
// name must not come back to it, or into the log, at full length.
func quoteShort(s string) string {
	if len(s) <= 64 {
		return fmt.Sprintf("%q", s)
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}
