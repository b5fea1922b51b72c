package storetest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// The conformance tests of model calls' daily budgets (store/ai.go) and of
// knowledge vectors and hybrid search (store/hybrid.go).

var aiDefaults = store.AIBudget{OrgDailyTokens: 1000, ModuleDailyTokens: 100}

func usageOf(t *testing.T, s *store.Store, org, module string) store.AIUsage {
	t.Helper()
	rows, err := s.AIUsage(context.Background(), store.AIUsageFilter{Org: org})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rows {
		if u.Module == module {
			return u
		}
	}
	return store.AIUsage{}
}

// Reserve, settle, refuse, override, as the contract says.
func (su suite) testAIBudget(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	sc := store.Scope{Org: "acme", Module: "notes"}
	now := time.Now()
	r, err := s.AIReserve(ctx, sc, now, 60, aiDefaults)
	if err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, s, "acme", "notes"); u.Reserved != 60 || u.Used != 0 || u.Day != now.UTC().Format(time.DateOnly) {
		t.Errorf("after a hold of 60: %+v", u)
	}
	// 60 held: 41 more would pass the module's 100.
	_, err = s.AIReserve(ctx, sc, now, 41, aiDefaults)
	var be *store.AIBudgetError
	if !errors.As(err, &be) || be.Scope != "module" || be.Limit != 100 || be.InUse != 60 || be.Need != 41 || be.Rule() != "ai budget module" ||
		!strings.Contains(be.Error(), "module notes of organization acme's daily ai budget of 100 tokens: 60 used, this call may need 41") {
		t.Fatalf("over the module's budget: %v (%+v)", err, be)
	}
	if u := usageOf(t, s, "acme", ""); u.Reserved != 60 {
		t.Errorf("a refused hold changed the organization's row: %+v", u)
	}
	if err := s.AISettle(ctx, r, 25); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"", "notes"} {
		if u := usageOf(t, s, "acme", m); u.Reserved != 0 || u.Used != 25 || u.Calls != 1 {
			t.Errorf("module %q after settling 25: %+v", m, u)
		}
	}
	// 25 used: 75 fits exactly.
	r2, err := s.AIReserve(ctx, sc, now, 75, aiDefaults)
	if err != nil {
		t.Fatalf("a hold that fits exactly: %v", err)
	}
	// A call may cost more than it held: the provider's count is charged.
	if err := s.AISettle(ctx, r2, 90); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, s, "acme", "notes"); u.Used != 115 {
		t.Errorf("after settling 90 against a hold of 75: %+v", u)
	}
	if _, err := s.AIReserve(ctx, sc, now, 0, aiDefaults); !errors.As(err, &be) {
		t.Errorf("a module over its budget took a hold of 0: %v", err)
	}
	// Another module draws on the organization's budget, not this one's.
	other := store.Scope{Org: "acme", Module: "other"}
	if _, err := s.AIReserve(ctx, other, now, 100, aiDefaults); err != nil {
		t.Fatal(err)
	}
	// Tomorrow is another day; another organization is another budget.
	if _, err := s.AIReserve(ctx, sc, now.Add(24*time.Hour), 100, aiDefaults); err != nil {
		t.Errorf("the next day: %v", err)
	}
	if _, err := s.AIReserve(ctx, store.Scope{Org: "globex", Module: "notes"}, now, 100, aiDefaults); err != nil {
		t.Errorf("another organization: %v", err)
	}
	// The organization's limit: 115 used + 100 held of 1000; 786 is one too many.
	if _, err := s.AIReserve(ctx, store.Scope{Org: "acme", Module: "third"}, now, 786, store.AIBudget{OrgDailyTokens: 1000, ModuleDailyTokens: 5000}); !errors.As(err, &be) ||
		be.Scope != "org" || be.InUse != 215 || !strings.HasPrefix(be.Error(), "organization acme's daily ai budget of 1000 tokens: 215 used, this call may need 786") {
		t.Errorf("over the organization's budget: %v", err)
	}
	if u := usageOf(t, s, "acme", "third"); u.Reserved != 0 {
		t.Errorf("the module's row of a hold the organization refused: %+v", u)
	}

	// An override replaces the defaults; a 0 field keeps its default.
	if err := s.AIBudgetPut(ctx, "acme", store.AIBudget{ModuleDailyTokens: 1000}); err != nil {
		t.Fatal(err)
	}
	if b, found, err := s.AIBudgetGet(ctx, "acme"); err != nil || !found || b != (store.AIBudget{ModuleDailyTokens: 1000}) {
		t.Errorf("AIBudgetGet = %+v, %v, %v", b, found, err)
	}
	if _, err := s.AIReserve(ctx, sc, now, 500, aiDefaults); err != nil {
		t.Errorf("under the raised module budget: %v", err)
	}
	if _, err := s.AIReserve(ctx, sc, now, 300, aiDefaults); !errors.As(err, &be) || be.Scope != "org" || be.Limit != 1000 || be.InUse != 715 {
		t.Errorf("the organization's default still holds: %v", err)
	}
	if _, found, _ := s.AIBudgetGet(ctx, "globex"); found {
		t.Error("another organization has acme's override")
	}
	if deleted, err := s.AIBudgetDelete(ctx, "acme"); err != nil || !deleted {
		t.Errorf("AIBudgetDelete = %v, %v", deleted, err)
	}
	if deleted, err := s.AIBudgetDelete(ctx, "acme"); err != nil || deleted {
		t.Errorf("AIBudgetDelete again = %v, %v", deleted, err)
	}

	// Usage is listed per organization, newest day first; a refused hold
	// left no row (module third).
	rows, err := s.AIUsage(ctx, store.AIUsageFilter{Org: "acme", Until: now.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 || rows[0].Day != now.Add(24*time.Hour).UTC().Format(time.DateOnly) || rows[0].Module != "" {
		t.Errorf("acme's rows: %+v", rows)
	}
	for _, u := range rows {
		if u.Org != "acme" {
			t.Errorf("acme's usage lists %+v", u)
		}
	}
	if all, err := s.AIUsage(ctx, store.AIUsageFilter{}); err != nil || len(all) != 5 {
		t.Errorf("every organization's rows of today: %+v, %v", all, err)
	}

	for _, bad := range []struct {
		sc     store.Scope
		tokens int64
	}{{store.Scope{Org: "", Module: "m"}, 1}, {store.Scope{Org: "o", Module: ""}, 1}, {sc, -1}, {sc, math.MaxInt64}} {
		if _, err := s.AIReserve(ctx, bad.sc, now, bad.tokens, aiDefaults); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("AIReserve(%+v, %d) = %v, want invalid_argument", bad.sc, bad.tokens, err)
		}
	}
	if err := s.AIBudgetPut(ctx, "", store.AIBudget{}); codeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("an override of no organization: %v", err)
	}
	if err := s.AIBudgetPut(ctx, "acme", store.AIBudget{OrgDailyTokens: -5}); codeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("a negative override: %v", err)
	}
}

// raceBudget has many goroutines (over stores, round robin) take holds of
// need tokens against a budget of limit: the organization's, with the
// callers spread over four modules, or one module's. Exactly limit/need
// may pass, whatever the interleaving.
func raceBudget(t *testing.T, stores []*store.Store) {
	for _, scope := range []string{"org", "module"} {
		t.Run(scope, func(t *testing.T) {
			ctx := context.Background()
			const limit, need, callers = 100, 7, 48
			org := "race-" + scope
			budget := store.AIBudget{OrgDailyTokens: limit, ModuleDailyTokens: 1 << 20}
			if scope == "module" {
				budget = store.AIBudget{OrgDailyTokens: 1 << 20, ModuleDailyTokens: limit}
			}
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				ok      []store.AIReservation
				unknown []error
			)
			start := make(chan struct{})
			for i := range callers {
				s := stores[i%len(stores)]
				sc := store.Scope{Org: org, Module: "racer"}
				if scope == "org" {
					sc.Module = fmt.Sprint("racer", i%4)
				}
				wg.Go(func() {
					<-start
					r, err := s.AIReserve(ctx, sc, time.Now(), need, budget)
					mu.Lock()
					defer mu.Unlock()
					var be *store.AIBudgetError
					switch {
					case err == nil:
						ok = append(ok, r)
					case !errors.As(err, &be) || be.Scope != scope:
						unknown = append(unknown, err)
					}
				})
			}
			close(start)
			wg.Wait()
			for _, err := range unknown {
				t.Error(err)
			}
			if len(ok) != limit/need {
				t.Fatalf("%d holds of %d passed a budget of %d, want %d", len(ok), need, limit, limit/need)
			}
			for _, r := range ok {
				if err := stores[0].AISettle(ctx, r, need); err != nil {
					t.Fatal(err)
				}
			}
			if u := usageOf(t, stores[len(stores)-1], org, ""); u.Used != limit/need*need || u.Reserved != 0 || u.Calls != limit/need {
				t.Errorf("the organization's day after the race: %+v", u)
			}
		})
	}
}

// Concurrent holds on one handle never both take the last tokens.
func (su suite) testAIBudgetRace(t *testing.T) { raceBudget(t, []*store.Store{su.open(t)}) }

// Nor do holds from several processes or replicas on one database.
func testSharedAIBudget(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	stores := open(t, 3)
	warm(t, stores)
	raceBudget(t, stores)
}

// concepts is the embedding of these tests: each word (its concept, when
// it has one) adds one to the dimension its hash picks, so two texts
// sharing concepts but no word are near, and texts sharing none are
// orthogonal (barring a collision, which the words below avoid).
var concepts = map[string]string{
	"automobile": "car", "car": "car", "vehicle": "car",
	"maintenance": "repair", "repair": "repair", "servicing": "repair",
	"physician": "doctor", "doctor": "doctor",
}

func embedWords(model string, dims int) store.Embedder {
	return func(_ context.Context, text string) (store.Vector, error) {
		v := make([]float32, dims)
		for _, w := range strings.Fields(strings.ToLower(text)) {
			if c, ok := concepts[w]; ok {
				w = c
			}
			h := fnv.New32a()
			h.Write([]byte(w))
			v[int(h.Sum32())%dims]++
		}
		return store.Vector{Model: model, Values: v}, nil
	}
}

func vadd(t *testing.T, s *store.Store, sc store.Scope, id, text string, meta map[string]any, embed store.Embedder) {
	t.Helper()
	if _, err := s.KnowledgeAdd(context.Background(), sc, store.KnowledgeDoc{Collection: "docs", ID: id, Text: text, Meta: meta, Owner: "ann", Embed: embed},
		store.KnowledgeQuota{}); err != nil {
		t.Fatalf("KnowledgeAdd(%s): %v", id, err)
	}
}

// Hybrid search: a document close in meaning but sharing no word with the
// query is found by its vector; one matching both ways ranks first; the
// filter, the model and the scope hold for vector hits as for words; a
// replaced document's vector is its new text's, a deleted one's is gone.
func (su suite) testKnowledgeHybrid(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	sc := store.Scope{Org: "acme", Module: "kb"}
	embed := embedWords("embed-a", 256)
	vadd(t, s, sc, "fleet", "automobile maintenance schedule", map[string]any{"lang": "en"}, embed)
	vadd(t, s, sc, "both", "car repair checklist", map[string]any{"lang": "en"}, embed)
	vadd(t, s, sc, "words", "garden fence repair", map[string]any{"lang": "en"}, embed)
	vadd(t, s, sc, "clinic", "physician opening hours", map[string]any{"lang": "de"}, embed)
	vadd(t, s, sc, "plain", "car park rules", nil, nil) // no vector: found by words alone
	// Another organization and another module hold the same text with the
	// same vector: never a hit here.
	vadd(t, s, store.Scope{Org: "globex", Module: "kb"}, "leak", "automobile maintenance schedule", nil, embed)
	vadd(t, s, store.Scope{Org: "acme", Module: "other"}, "leak2", "automobile maintenance schedule", nil, embed)

	search := func(q store.KnowledgeQuery) []store.KnowledgeHit {
		t.Helper()
		q.Collection = "docs"
		if q.Embed == nil {
			q.Embed = embed
		}
		return ksearch(t, s, sc, q)
	}
	// Lexically, "vehicle servicing" matches nothing.
	if hits := ksearch(t, s, sc, store.KnowledgeQuery{Collection: "docs", Query: "vehicle servicing"}); len(hits) != 0 {
		t.Fatalf("full text found %v", hitIDs(hits))
	}
	hits := search(store.KnowledgeQuery{Query: "vehicle servicing"})
	if ids := hitIDs(hits); len(ids) != 3 || ids[0] != "both" || ids[1] != "fleet" || ids[2] != "words" {
		t.Fatalf("hybrid search for vehicle servicing = %v, want both and fleet (both concepts, no word shared; equal, so by id), then words (one concept)", ids)
	}
	if hits[0].Score <= 0 || !strings.Contains(hits[0].Snippet, " ") {
		t.Errorf("a vector hit's score and snippet: %+v", hits[0])
	}
	// "car repair": both matches by words and vector, first; fleet by
	// vector; words and plain by words.
	hits = search(store.KnowledgeQuery{Query: "car repair"})
	ids := hitIDs(hits)
	if len(ids) == 0 || ids[0] != "both" || !contains(ids, "fleet") || contains(ids, "clinic") || contains(ids, "leak") || contains(ids, "leak2") {
		t.Fatalf("hybrid search for car repair = %v", ids)
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Errorf("hits out of order: %+v", hits)
		}
	}
	want := 1.0/(store.RRFK+1) + 1.0/(store.RRFK+1)
	if math.Abs(hits[0].Score-want) > 1e-9 {
		t.Errorf("the first hit's fused score %v, want %v (first on both lists)", hits[0].Score, want)
	}
	// The filter holds for vector hits.
	if ids := hitIDs(search(store.KnowledgeQuery{Query: "doctor", Filter: map[string]any{"lang": "en"}})); len(ids) != 0 {
		t.Errorf("doctor in lang en = %v", ids)
	}
	if ids := hitIDs(search(store.KnowledgeQuery{Query: "doctor", Filter: map[string]any{"lang": "de"}})); len(ids) != 1 || ids[0] != "clinic" {
		t.Errorf("doctor in lang de = %v", ids)
	}
	// Vectors of another model are not compared.
	if ids := hitIDs(search(store.KnowledgeQuery{Query: "vehicle servicing", Embed: embedWords("embed-b", 256)})); len(ids) != 0 {
		t.Errorf("with another model's query vector = %v", ids)
	}
	// A limit of 1, and the similarity floor.
	if ids := hitIDs(search(store.KnowledgeQuery{Query: "vehicle servicing", Limit: 1})); len(ids) != 1 {
		t.Errorf("limit 1 = %v", ids)
	}
	if ids := hitIDs(search(store.KnowledgeQuery{Query: "vehicle servicing", MinSimilarity: 0.99})); len(ids) != 0 {
		t.Errorf("with a floor of 0.99 = %v", ids)
	}
	// Replaced without a vector: the old text's vector is gone.
	vadd(t, s, sc, "fleet", "garden party", nil, nil)
	if ids := hitIDs(search(store.KnowledgeQuery{Query: "vehicle servicing"})); len(ids) != 2 || ids[0] != "both" || ids[1] != "words" {
		t.Errorf("after fleet's text changed = %v", ids)
	}
	if _, err := s.KnowledgeDelete(ctx, sc, store.KnowledgeKey{Collection: "docs", ID: "both"}); err != nil {
		t.Fatal(err)
	}
	if ids := hitIDs(search(store.KnowledgeQuery{Query: "vehicle servicing"})); len(ids) != 1 || ids[0] != "words" {
		t.Errorf("after both was deleted = %v", ids)
	}

	// An embedder's error fails the add or the search unchanged, and the
	// add writes nothing; a vector that cannot be compared is refused.
	boom := &abi.Error{Code: abi.CodeDenied, Message: "budget"}
	failing := func(context.Context, string) (store.Vector, error) { return store.Vector{}, boom }
	if _, err := s.KnowledgeAdd(ctx, sc, store.KnowledgeDoc{Collection: "docs", ID: "x", Text: "t", Embed: failing}, store.KnowledgeQuota{}); err != boom {
		t.Errorf("an add whose embedder failed: %v", err)
	}
	if _, err := s.KnowledgeSearch(ctx, sc, store.KnowledgeQuery{Collection: "docs", Query: "t", Embed: failing}); err != boom {
		t.Errorf("a search whose embedder failed: %v", err)
	}
	called := false
	counting := func(ctx context.Context, text string) (store.Vector, error) { called = true; return embed(ctx, text) }
	if _, err := s.KnowledgeAdd(ctx, sc, store.KnowledgeDoc{Collection: "BAD", ID: "x", Text: "t", Embed: counting}, store.KnowledgeQuota{}); err == nil || called {
		t.Errorf("an invalid document was embedded (called %v, err %v): the model call would be wasted", called, err)
	}
	for _, v := range []store.Vector{
		{Model: "m", Values: []float32{0, 0, 0}},
		{Model: "m", Values: []float32{1, float32(math.NaN())}},
		{Model: "m", Values: []float32{float32(math.Inf(1))}},
		{Model: "m", Values: make([]float32, store.MaxVectorDims+1)},
		{Model: "m"},
	} {
		if len(v.Values) > 3 {
			v.Values[0] = 1
		}
		bad := func(context.Context, string) (store.Vector, error) { return v, nil }
		if _, err := s.KnowledgeAdd(ctx, sc, store.KnowledgeDoc{Collection: "docs", ID: "x", Text: "t", Embed: bad}, store.KnowledgeQuota{}); codeOf(err) != abi.CodeUnavailable {
			t.Errorf("a vector of %d values (%v…): %v, want unavailable", len(v.Values), v.Values[:min(len(v.Values), 2)], err)
		}
	}
	if _, found, _ := kget(ctx, s, sc, "x"); found {
		t.Error("a refused add wrote its document")
	}
}

// kget finds a document by searching its one word.
func kget(ctx context.Context, s *store.Store, sc store.Scope, id string) (store.KnowledgeHit, bool, error) {
	hits, err := s.KnowledgeSearch(ctx, sc, store.KnowledgeQuery{Collection: "docs", Query: "t"})
	for _, h := range hits {
		if h.ID == id {
			return h, true, err
		}
	}
	return store.KnowledgeHit{}, false, err
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// A vector's bytes count against the byte quota.
func (su suite) testKnowledgeVectorQuota(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	sc := store.Scope{Org: "acme", Module: "kb"}
	doc := store.KnowledgeDoc{Collection: "docs", ID: "a", Text: "tiny", Embed: embedWords("m", 1024)}
	_, err := s.KnowledgeAdd(ctx, sc, doc, store.KnowledgeQuota{Bytes: 1000})
	if codeOf(err) != abi.CodeTooLarge {
		t.Fatalf("a 4 KiB vector under a quota of 1000 bytes: %v", err)
	}
	if _, err := s.KnowledgeAdd(ctx, sc, doc, store.KnowledgeQuota{Bytes: 5000}); err != nil {
		t.Fatal(err)
	}
	if u, err := s.KnowledgeUsage(ctx, sc); err != nil || u.Bytes != int64(len("a")+len("tiny")+len("{}")+4*1024) {
		t.Errorf("usage %+v, %v", u, err)
	}
}
