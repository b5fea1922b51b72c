package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// The knowledge family's conformance tests: what a search finds and in
// which order, what it quotes, what a filter keeps, which organization
// and module see what, the quotas, and hostile input, identical on every
// backend.

func kadd(t *testing.T, s *store.Store, sc store.Scope, coll, id, text string, meta map[string]any) bool {
	t.Helper()
	replaced, err := s.KnowledgeAdd(context.Background(), sc, store.KnowledgeDoc{Collection: coll, ID: id, Text: text, Meta: meta, Owner: "ann"}, store.KnowledgeQuota{})
	if err != nil {
		t.Fatalf("KnowledgeAdd(%v, %s, %s): %v", sc, coll, id, err)
	}
	return replaced
}

func ksearch(t *testing.T, s *store.Store, sc store.Scope, q store.KnowledgeQuery) []store.KnowledgeHit {
	t.Helper()
	hits, err := s.KnowledgeSearch(context.Background(), sc, q)
	if err != nil {
		t.Fatalf("KnowledgeSearch(%v, %+v): %v", sc, q, err)
	}
	return hits
}

func hitIDs(hits []store.KnowledgeHit) []string {
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	return ids
}

// codeOf is the abi code of err, or "" when it carries none.
func codeOf(err error) abi.Code {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// Add, replace, delete and search, as the contract says.
func (su suite) testKnowledgeContract(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	if hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "anything"}); len(hits) != 0 {
		t.Fatalf("search of a collection never written = %v, want no hits", hitIDs(hits))
	}
	if kadd(t, s, scA, "docs", "intro", "Moat runs untrusted plugins inside WebAssembly.", map[string]any{"lang": "en"}) {
		t.Fatal("first add reported a replacement")
	}
	kadd(t, s, scA, "docs", "kernel", "Landlock and seccomp confine the host process.", nil)
	hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "plugins WebAssembly"})
	if len(hits) != 1 || hits[0].ID != "intro" {
		t.Fatalf("search = %v, want [intro]", hitIDs(hits))
	}
	h := hits[0]
	if h.Score <= 0 || math.IsNaN(h.Score) || math.IsInf(h.Score, 0) {
		t.Errorf("score = %v, want a positive finite number", h.Score)
	}
	if h.Snippet != "Moat runs untrusted plugins inside WebAssembly." {
		t.Errorf("snippet of a short text = %q, want the whole text", h.Snippet)
	}
	if len(h.Meta) != 1 || h.Meta["lang"] != "en" {
		t.Errorf("meta = %v, want {lang: en}", h.Meta)
	}
	if hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "seccomp"}); len(hits) != 1 || hits[0].Meta == nil || len(hits[0].Meta) != 0 {
		t.Errorf("a document without meta: hits %+v, want one with empty, non-nil meta", hits)
	}
	// Every term must occur.
	if hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "plugins seccomp"}); len(hits) != 0 {
		t.Errorf("plugins seccomp = %v, want no hit: no document holds both", hitIDs(hits))
	}

	// Replace: the old text is gone from the index, the new one is in.
	if !kadd(t, s, scA, "docs", "intro", "Moat keeps every organization's data apart.", nil) {
		t.Error("second add of intro did not report a replacement")
	}
	if hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "WebAssembly"}); len(hits) != 0 {
		t.Errorf("after the replacement, the old text still matches: %v", hitIDs(hits))
	}
	hits = ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "organization"})
	if len(hits) != 1 || hits[0].ID != "intro" || len(hits[0].Meta) != 0 {
		t.Errorf("after the replacement: %+v, want intro with the new (empty) meta", hits)
	}
	if u, err := s.KnowledgeUsage(ctx, scA); err != nil || u.Documents != 2 {
		t.Errorf("usage = %+v, %v; want 2 documents", u, err)
	}

	// Delete.
	for i, want := range []bool{true, false} {
		deleted, err := s.KnowledgeDelete(ctx, scA, store.KnowledgeKey{Collection: "docs", ID: "intro"})
		if err != nil || deleted != want {
			t.Errorf("delete %d = %v, %v; want %v", i+1, deleted, err, want)
		}
	}
	if hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "organization"}); len(hits) != 0 {
		t.Errorf("a deleted document still matches: %v", hitIDs(hits))
	}
	if deleted, err := s.KnowledgeDelete(ctx, scA, store.KnowledgeKey{Collection: "kernel", ID: "kernel"}); err != nil || deleted {
		t.Errorf("delete from a collection that does not hold the id = %v, %v", deleted, err)
	}
	// A collection emptied and written again works as a new one.
	if _, err := s.KnowledgeDelete(ctx, scA, store.KnowledgeKey{Collection: "docs", ID: "kernel"}); err != nil {
		t.Fatal(err)
	}
	kadd(t, s, scA, "docs", "again", "Seccomp again.", nil)
	if hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "seccomp"}); !slices.Equal(hitIDs(hits), []string{"again"}) {
		t.Errorf("after emptying and refilling: %v, want [again]", hitIDs(hits))
	}
	if u, err := s.KnowledgeUsage(ctx, scA); err != nil || u.Documents != 1 || u.Bytes != int64(len("again")+len("Seccomp again.")+len("{}")) {
		t.Errorf("usage = %+v, %v; want 1 document of %d bytes", u, err, len("again")+len("Seccomp again.")+2)
	}

	// Words: case, diacritics, compatibility forms and scripts without
	// spaces; no stemming.
	kadd(t, s, scA, "words", "cv", "Her Résumé lists ＡＢＣ and the ﬁnal exam.", nil)
	kadd(t, s, scA, "words", "ja", "東京で会議があります", nil)
	kadd(t, s, scA, "words", "run", "They were running late.", nil)
	for _, tt := range []struct{ query, want string }{
		{"resume", "cv"}, {"RÉSUMÉ", "cv"}, {"abc", "cv"}, {"final", "cv"},
		{"東京", "ja"}, {"会議", "ja"}, {"running", "run"}, {"run", ""},
	} {
		got := strings.Join(hitIDs(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "words", Query: tt.query})), ",")
		if got != tt.want {
			t.Errorf("search %q = [%s], want [%s]", tt.query, got, tt.want)
		}
	}
	// Limit and its default.
	for i := range 15 {
		kadd(t, s, scA, "many", fmt.Sprintf("d%02d", i), "common words here", nil)
	}
	if n := len(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "many", Query: "common"})); n != abi.DefaultKnowledgeSearchLimit {
		t.Errorf("default limit: %d hits, want %d", n, abi.DefaultKnowledgeSearchLimit)
	}
	hits = ksearch(t, s, scA, store.KnowledgeQuery{Collection: "many", Query: "common", Limit: 3})
	if !slices.Equal(hitIDs(hits), []string{"d00", "d01", "d02"}) {
		t.Errorf("equal scores: %v, want the first three ids in byte order", hitIDs(hits))
	}
}

// Ranking: more occurrences of a rare term rank first; a shorter document
// with the same occurrences ranks above a longer one.
func (su suite) testKnowledgeRanking(t *testing.T) {
	s := su.open(t)
	filler := func(n int) string { return strings.Repeat("river stone cloud ", n) }
	kadd(t, s, scA, "zoo", "few", "zebra "+filler(3)+"meadow meadow", nil)
	kadd(t, s, scA, "zoo", "many", "zebra zebra zebra "+filler(3), nil)
	kadd(t, s, scA, "zoo", "middle", "zebra zebra "+filler(3)+"meadow", nil)
	for i := range 20 {
		kadd(t, s, scA, "zoo", fmt.Sprintf("plain%02d", i), filler(4)+"meadow", nil)
	}
	hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "zoo", Query: "zebra"})
	if got := hitIDs(hits); !slices.Equal(got, []string{"many", "middle", "few"}) {
		t.Fatalf("zebra: %v, want [many middle few]: more matches of a rare term first", got)
	}
	if !(hits[0].Score > hits[1].Score && hits[1].Score > hits[2].Score) {
		t.Errorf("scores %v, %v, %v do not fall", hits[0].Score, hits[1].Score, hits[2].Score)
	}
	kadd(t, s, scA, "zoo", "short", "okapi "+filler(1), nil)
	kadd(t, s, scA, "zoo", "long", "okapi "+filler(12), nil)
	if got := hitIDs(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "zoo", Query: "okapi"})); !slices.Equal(got, []string{"short", "long"}) {
		t.Errorf("okapi: %v, want the shorter document first", got)
	}
	// A query of two terms finds only documents holding both, the one
	// holding more of them first.
	kadd(t, s, scA, "zoo", "both-many", "zebra zebra okapi okapi "+filler(2), nil)
	kadd(t, s, scA, "zoo", "both-once", "zebra okapi "+filler(2)+"meadow meadow", nil)
	if got := hitIDs(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "zoo", Query: "okapi zebra"})); !slices.Equal(got, []string{"both-many", "both-once"}) {
		t.Errorf("okapi zebra: %v, want [both-many both-once]", got)
	}
}

// Snippets quote the text around the terms found, as written.
func (su suite) testKnowledgeSnippet(t *testing.T) {
	s := su.open(t)
	var b strings.Builder
	for i := range 60 {
		fmt.Fprintf(&b, "filler%d words\n\t here. ", i)
	}
	before := b.String()
	text := before + "The Quarterly Résumé of the otter survey is due. " + strings.Repeat("more text after the match ", 40)
	kadd(t, s, scA, "notes", "long", text, nil)
	for _, q := range []string{"resume", "otter survey", "survey QUARTERLY"} {
		hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "notes", Query: q})
		if len(hits) != 1 {
			t.Fatalf("%q: %d hits", q, len(hits))
		}
		sn := hits[0].Snippet
		if !strings.Contains(sn, "Résumé of the otter survey") {
			t.Errorf("%q: snippet %q does not quote the match as written", q, sn)
		}
		if !strings.HasPrefix(sn, "…") || !strings.HasSuffix(sn, "…") {
			t.Errorf("%q: snippet %q is not marked as cut at both ends", q, sn)
		}
		body := strings.TrimSuffix(strings.TrimPrefix(sn, "…"), "…")
		if len(body) > abi.MaxKnowledgeSnippetBytes || !utf8.ValidString(sn) || strings.ContainsAny(body, "\n\t") || strings.Contains(body, "  ") {
			t.Errorf("%q: snippet %q (%d bytes) is over %d bytes, not UTF-8, or keeps runs of white space", q, sn, len(body), abi.MaxKnowledgeSnippetBytes)
		}
	}
	// The best cluster wins over the first lone match.
	text = "otter " + strings.Repeat("unrelated words go here ", 30) + "the otter survey of the river otter"
	kadd(t, s, scA, "notes", "cluster", text, nil)
	hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "notes", Query: "otter survey", Limit: 5})
	for _, h := range hits {
		if h.ID == "cluster" && !strings.Contains(h.Snippet, "the otter survey of the river otter") {
			t.Errorf("cluster snippet %q, want the part holding both terms", h.Snippet)
		}
	}
	// A match after a huge unindexed word is still quoted.
	huge := strings.Repeat("x", 40<<10)
	kadd(t, s, scA, "notes", "huge", huge+" beaver dam", nil)
	hits = ksearch(t, s, scA, store.KnowledgeQuery{Collection: "notes", Query: "beaver"})
	if len(hits) != 1 || !strings.Contains(hits[0].Snippet, "beaver dam") || len(hits[0].Snippet) > abi.MaxKnowledgeSnippetBytes+2*len("…") {
		t.Errorf("after a 40 KiB word: %+v", hits)
	}
}

// Filters are equalities on meta, by JSON type.
func (su suite) testKnowledgeFilter(t *testing.T) {
	s := su.open(t)
	const text = "the lighthouse keeper's log"
	kadd(t, s, scA, "logs", "en-2024", text, map[string]any{"lang": "en", "year": 2024, "draft": false, "score": 0.5})
	kadd(t, s, scA, "logs", "fr-2023", text, map[string]any{"lang": "fr", "year": 2023.0, "draft": true})
	kadd(t, s, scA, "logs", "en-str", text, map[string]any{"lang": "en", "year": "2024", "draft": "false", "x.y:z-w": "ok"})
	kadd(t, s, scA, "logs", "bare", text, nil)
	tests := []struct {
		filter map[string]any
		want   string
	}{
		{nil, "bare,en-2024,en-str,fr-2023"},
		{map[string]any{"lang": "en"}, "en-2024,en-str"},
		{map[string]any{"year": 2024}, "en-2024"},
		{map[string]any{"year": 2024.0}, "en-2024"},
		{map[string]any{"year": int64(2023)}, "fr-2023"},
		{map[string]any{"year": "2024"}, "en-str"},
		{map[string]any{"draft": false}, "en-2024"},
		{map[string]any{"draft": true}, "fr-2023"},
		{map[string]any{"draft": 0}, ""},
		{map[string]any{"draft": "false"}, "en-str"},
		{map[string]any{"score": 0.5}, "en-2024"},
		{map[string]any{"lang": "en", "year": 2024}, "en-2024"},
		{map[string]any{"lang": "en", "year": 2023}, ""},
		{map[string]any{"missing": "x"}, ""},
		{map[string]any{"x.y:z-w": "ok"}, "en-str"},
		{map[string]any{"lang": "EN"}, ""},
		{map[string]any{"lang": "en' OR '1'='1"}, ""},
	}
	for _, tt := range tests {
		hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "logs", Query: "lighthouse", Filter: tt.filter})
		got := hitIDs(hits)
		slices.Sort(got)
		if strings.Join(got, ",") != tt.want {
			t.Errorf("filter %v = %v, want [%s]", tt.filter, got, tt.want)
		}
	}
	hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "logs", Query: "keeper", Filter: map[string]any{"year": 2024}})
	if len(hits) != 1 {
		t.Fatalf("hits %v", hitIDs(hits))
	}
	want := map[string]any{"lang": "en", "year": 2024.0, "draft": false, "score": 0.5}
	if fmt.Sprint(hits[0].Meta) != fmt.Sprint(want) {
		t.Errorf("meta came back as %v, want %v", hits[0].Meta, want)
	}
}

// One organization's (or module's, or collection's) documents are never
// another's: not in hits, not in deletes, and not in scores.
func (su suite) testKnowledgeScoping(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	scB := store.Scope{Org: "org-b", Module: "mod"}
	scA2 := store.Scope{Org: "org-a", Module: "other"}
	for _, sc := range []store.Scope{scA, scB, scA2} {
		kadd(t, s, sc, "docs", "same-id", "secret plans of "+sc.Org+" "+sc.Module, nil)
	}
	kadd(t, s, scA, "docs", "mine", "harbour secret tide", nil)
	for _, tt := range []struct {
		sc   store.Scope
		q    string
		want string
	}{
		{scA, "secret", "mine,same-id"}, {scB, "secret", "same-id"}, {scA2, "secret", "same-id"},
		{scB, "harbour", ""}, {scA2, "harbour", ""}, {scA, "org b", ""}, {scB, "org a mod", ""},
	} {
		got := hitIDs(ksearch(t, s, tt.sc, store.KnowledgeQuery{Collection: "docs", Query: tt.q}))
		slices.Sort(got)
		if strings.Join(got, ",") != tt.want {
			t.Errorf("%v searching %q: %v, want [%s]", tt.sc, tt.q, got, tt.want)
		}
	}
	if hits := ksearch(t, s, scB, store.KnowledgeQuery{Collection: "docs", Query: "secret"}); len(hits) != 1 || !strings.Contains(hits[0].Snippet, "org-b mod") {
		t.Errorf("org-b sees %+v, want its own text", hits)
	}
	if deleted, err := s.KnowledgeDelete(ctx, scB, store.KnowledgeKey{Collection: "docs", ID: "mine"}); err != nil || deleted {
		t.Errorf("org-b deleting org-a's id = %v, %v", deleted, err)
	}
	if deleted, err := s.KnowledgeDelete(ctx, scB, store.KnowledgeKey{Collection: "docs", ID: "same-id"}); err != nil || !deleted {
		t.Fatalf("org-b deleting its own = %v, %v", deleted, err)
	}
	for _, sc := range []store.Scope{scA, scA2} {
		if hits := ksearch(t, s, sc, store.KnowledgeQuery{Collection: "docs", Query: "plans"}); len(hits) != 1 {
			t.Errorf("%v lost its document to org-b's delete: %v", sc, hitIDs(hits))
		}
	}
	for sc, want := range map[store.Scope]int64{scA: 2, scB: 0, scA2: 1} {
		if u, err := s.KnowledgeUsage(ctx, sc); err != nil || u.Documents != want {
			t.Errorf("usage of %v = %+v, %v; want %d documents", sc, u, err, want)
		}
	}

	// Scores use nothing of another organization, module or collection:
	// adding documents elsewhere, full of the term, moves no score here.
	score := func() []float64 {
		var out []float64
		for _, h := range ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "secret"}) {
			out = append(out, h.Score)
		}
		return out
	}
	was := score()
	for i := range 30 {
		id := fmt.Sprint("flood", i)
		kadd(t, s, scB, "docs", id, "secret secret secret", nil)
		kadd(t, s, scA2, "docs", id, "secret", nil)
		kadd(t, s, scA, "other", id, strings.Repeat("secret ", i+1)+strings.Repeat("padding ", 50), nil)
	}
	if now := score(); !slices.Equal(now, was) {
		t.Errorf("org-a's scores moved from %v to %v when other scopes added documents: a score leaks their statistics", was, now)
	}
}

// Quotas: documents and bytes, per organization and module, at once
// under concurrent adds.
func (su suite) testKnowledgeQuota(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	add := func(sc store.Scope, id, text string, q store.KnowledgeQuota) error {
		_, err := s.KnowledgeAdd(ctx, sc, store.KnowledgeDoc{Collection: "q", ID: id, Text: text}, q)
		return err
	}
	docs := store.KnowledgeQuota{Documents: 3}
	for i := range 3 {
		if err := add(scA, fmt.Sprint(i), "text", docs); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	err := add(scA, "3", "text", docs)
	if codeOf(err) != abi.CodeTooLarge || !strings.Contains(err.Error(), "quota of 3 knowledge documents") {
		t.Fatalf("fourth add = %v, want too_large naming the document quota", err)
	}
	if err := add(scA, "1", "a longer text than before", docs); err != nil {
		t.Errorf("a replacement at the document quota: %v", err)
	}
	if err := add(store.Scope{Org: "org-a", Module: "other"}, "3", "text", docs); err != nil {
		t.Errorf("another module's quota is its own: %v", err)
	}
	if err := add(store.Scope{Org: "org-b", Module: "mod"}, "3", "text", docs); err != nil {
		t.Errorf("another organization's quota is its own: %v", err)
	}
	if _, err := s.KnowledgeDelete(ctx, scA, store.KnowledgeKey{Collection: "q", ID: "0"}); err != nil {
		t.Fatal(err)
	}
	if err := add(scA, "3", "text", docs); err != nil {
		t.Errorf("an add after a delete freed a slot: %v", err)
	}

	// Bytes: id + text + meta ("{}").
	sc := store.Scope{Org: "org-c", Module: "mod"}
	bytes := store.KnowledgeQuota{Bytes: 100}
	if err := add(sc, "a", strings.Repeat("w ", 40), bytes); err != nil { // 1 + 80 + 2
		t.Fatal(err)
	}
	err = add(sc, "b", "tiny text", bytes) // 1 + 9 + 2 = 12: 95 > 100? no, 83+12 = 95
	if err != nil {
		t.Fatalf("an add within the byte quota: %v", err)
	}
	err = add(sc, "c", "more text", bytes) // 95 + 12 = 107
	if codeOf(err) != abi.CodeTooLarge || !strings.Contains(err.Error(), "disk quota of 100 bytes") || !strings.Contains(err.Error(), "in use 95, this add adds 12") {
		t.Fatalf("add past the byte quota = %v", err)
	}
	// Over a lowered quota, a replacement that shrinks is allowed, one
	// that grows is not.
	lowered := store.KnowledgeQuota{Bytes: 20}
	if err := add(sc, "a", "w w", lowered); err != nil {
		t.Errorf("a shrinking replacement over a lowered quota: %v", err)
	}
	if err := add(sc, "b", "tiny text grows", lowered); err == nil {
		t.Errorf("a growing replacement past the quota was allowed")
	}
	if u, err := s.KnowledgeUsage(ctx, sc); err != nil || u != (store.KnowledgeUsage{Documents: 2, Bytes: 1 + 3 + 2 + 12}) {
		t.Errorf("usage = %+v, %v", u, err)
	}

	// Concurrent adds: exactly the quota's worth succeed.
	sc = store.Scope{Org: "org-d", Module: "mod"}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok      int
		unknown []error
	)
	start := make(chan struct{})
	for i := range 24 {
		wg.Go(func() {
			<-start
			err := add(sc, fmt.Sprint("c", i), "concurrent text", store.KnowledgeQuota{Documents: 10})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case codeOf(err) != abi.CodeTooLarge:
				unknown = append(unknown, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range unknown {
		t.Error(err)
	}
	if u, err := s.KnowledgeUsage(ctx, sc); ok != 10 || err != nil || u.Documents != 10 {
		t.Errorf("%d concurrent adds succeeded, usage %+v (%v); want exactly 10", ok, u, err)
	}
}

// Writers on several handles race past one document quota: exactly what
// fits succeeds.
func testSharedKnowledgeQuota(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ctx := context.Background()
	stores := open(t, 3)
	warm(t, stores)
	sc := store.Scope{Org: "acme", Module: "kb"}
	const quota, writers = 12, 36
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok      int
		unknown []error
	)
	start := make(chan struct{})
	for i := range writers {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			_, err := s.KnowledgeAdd(ctx, sc, store.KnowledgeDoc{Collection: "docs", ID: fmt.Sprint("w", i), Text: "racing writers"},
				store.KnowledgeQuota{Documents: quota, Bytes: 1 << 20})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case codeOf(err) != abi.CodeTooLarge:
				unknown = append(unknown, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range unknown {
		t.Error(err)
	}
	if ok != quota {
		t.Errorf("%d adds succeeded across handles, want %d", ok, quota)
	}
	for i, s := range stores {
		if u, err := s.KnowledgeUsage(ctx, sc); err != nil || u.Documents != quota {
			t.Errorf("handle %d: usage %+v, %v; want %d documents", i, u, err, quota)
		}
		if hits := ksearch(t, s, sc, store.KnowledgeQuery{Collection: "docs", Query: "racing", Limit: abi.MaxKnowledgeSearchLimit}); len(hits) != quota {
			t.Errorf("handle %d finds %d documents, want %d", i, len(hits), quota)
		}
	}
}

// Hostile input: query syntax of FTS5 and tsquery is never syntax, names
// built to break SQL or JSON paths are refused or inert, and every size
// is bounded before it costs anything.
func (su suite) testKnowledgeHostile(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	kadd(t, s, scA, "docs", "plain", "zebra lion near title or not and", nil)
	kadd(t, s, scA, "docs", "zebras", "zebras lions", nil)
	kadd(t, s, scA, "docs", "syntax", `"quoted" NEAR(a b) title:x col* ^start (paren AND OR NOT) 'single' & | ! :* \ zebra`, nil)
	kadd(t, s, scA, "docs", "'); DROP TABLE knowledge_docs; --", "sql injection zebra", map[string]any{"k": "'); DROP TABLE kv; --"})

	// Each hostile query finds what its words find, nothing more.
	for _, tt := range []struct{ query, same string }{
		{`"zebra"`, "zebra"},
		{`"zebra`, "zebra"},
		{`zebra"`, "zebra"},
		{`NEAR(zebra lion)`, "near zebra lion"},
		{`NEAR(zebra`, "near zebra"},
		{`title:zebra`, "title zebra"},
		{`plain:zebra`, "plain zebra"},
		{`zebra*`, "zebra"},
		{`zebr*`, "zebr"},
		{`^zebra`, "zebra"},
		{`zebra OR lion`, "zebra or lion"},
		{`zebra AND lion`, "zebra and lion"},
		{`NOT lion`, "not lion"},
		{`lion NOT zebra`, "lion not zebra"},
		{`(zebra`, "zebra"},
		{`zebra)`, "zebra"},
		{`((((zebra`, "zebra"},
		{`zebra & lion`, "zebra lion"},
		{`zebra | lion`, "zebra lion"},
		{`!zebra`, "zebra"},
		{`zebra:*`, "zebra"},
		{`'zebra'`, "zebra"},
		{`zebra <-> lion`, "zebra lion"},
		{`-zebra`, "zebra"},
		{`+zebra`, "zebra"},
		{`{title}: zebra`, "title zebra"},
		{`zebra\`, "zebra"},
		{`' OR 1=1 --`, "or 1 1"},
		{`'); DROP TABLE knowledge_docs; --`, "drop table knowledge docs"},
	} {
		got := hitIDs(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: tt.query, Limit: abi.MaxKnowledgeSearchLimit}))
		want := hitIDs(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: tt.same, Limit: abi.MaxKnowledgeSearchLimit}))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("query %q found %v, but its words %q find %v: part of it was read as syntax", tt.query, got, tt.same, want)
		}
	}
	if got := hitIDs(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "zebr*"})); len(got) != 0 {
		t.Errorf("zebr* found %v: * was read as a prefix query", got)
	}
	if got := hitIDs(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "NOT zebra"})); !slices.Equal(got, []string{"plain", "syntax"}) {
		t.Errorf("NOT zebra found %v, want [plain syntax], the documents holding the words not and zebra", got)
	}
	hits := ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "sql injection"})
	if len(hits) != 1 || hits[0].ID != "'); DROP TABLE knowledge_docs; --" || hits[0].Meta["k"] != "'); DROP TABLE kv; --" {
		t.Errorf("the injection document came back as %+v", hits)
	}

	longWord := strings.Repeat("w", abi.MaxKnowledgeTermBytes+1)
	for _, tt := range []struct {
		name  string
		query string
		code  abi.Code
	}{
		{"nothing but syntax", `"" () * : ^ - + | & ! \ '`, abi.CodeInvalidArgument},
		{"empty", "", abi.CodeInvalidArgument},
		{"only an over-long word", longWord, abi.CodeInvalidArgument},
		{"NUL", "zebra\x00lion", abi.CodeInvalidArgument},
		{"invalid UTF-8", "zebra \xff\xfe lion", abi.CodeInvalidArgument},
		{"100 KiB query", strings.Repeat("zebra ", 100<<10/6), abi.CodeTooLarge},
		{"a million-character word", strings.Repeat("z", 1_000_000), abi.CodeTooLarge},
		{"too many words", words(abi.MaxKnowledgeQueryTerms + 1), abi.CodeTooLarge},
	} {
		_, err := s.KnowledgeSearch(ctx, scA, store.KnowledgeQuery{Collection: "docs", Query: tt.query})
		if codeOf(err) != tt.code {
			t.Errorf("%s: err = %v, want %s", tt.name, err, tt.code)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Errorf("%s: the error repeats the input: %d bytes", tt.name, len(err.Error()))
		}
	}
	// The words a query may hold: MaxKnowledgeQueryTerms distinct ones,
	// repeated as often as the length allows.
	q := words(abi.MaxKnowledgeQueryTerms)
	q += strings.Repeat(" w0", (abi.MaxKnowledgeQueryBytes-len(q))/3)
	if _, err := s.KnowledgeSearch(ctx, scA, store.KnowledgeQuery{Collection: "docs", Query: q}); err != nil {
		t.Errorf("a query of %d bytes and %d distinct words: %v", len(q), abi.MaxKnowledgeQueryTerms, err)
	}

	// Hostile documents and names.
	add := func(coll, id, text string, meta map[string]any) error {
		_, err := s.KnowledgeAdd(ctx, scA, store.KnowledgeDoc{Collection: coll, ID: id, Text: text, Meta: meta}, store.KnowledgeQuota{})
		return err
	}
	nested := map[string]any{"a": map[string]any{"b": map[string]any{"c": 1}}}
	deep := map[string]any{}
	cur := deep
	for range 10000 {
		next := map[string]any{}
		cur["a"] = next
		cur = next
	}
	manyKeys := map[string]any{}
	for i := range abi.MaxKnowledgeMetaKeys + 1 {
		manyKeys[fmt.Sprint("k", i)] = i
	}
	for _, tt := range []struct {
		name             string
		coll, id, text   string
		meta             map[string]any
		code             abi.Code
		errorMentionsFix string
	}{
		{"collection with a quote", `docs"`, "x", "t", nil, abi.CodeInvalidArgument, "a-z 0-9 _"},
		{"collection in capitals", "Docs", "x", "t", nil, abi.CodeInvalidArgument, "a-z 0-9 _"},
		{"collection path", "../docs", "x", "t", nil, abi.CodeInvalidArgument, "a-z 0-9 _"},
		{"collection too long", strings.Repeat("c", 65), "x", "t", nil, abi.CodeInvalidArgument, "a-z 0-9 _"},
		{"empty collection", "", "x", "t", nil, abi.CodeInvalidArgument, "a-z 0-9 _"},
		{"empty id", "docs", "", "t", nil, abi.CodeInvalidArgument, "id of 1 to"},
		{"id too long", "docs", strings.Repeat("i", abi.MaxKnowledgeIDLen+1), "t", nil, abi.CodeTooLarge, "shorter id"},
		{"id with NUL", "docs", "a\x00b", "t", nil, abi.CodeInvalidArgument, "NUL"},
		{"id not UTF-8", "docs", "a\xffb", "t", nil, abi.CodeInvalidArgument, "UTF-8"},
		{"text with NUL", "docs", "x", "zebra\x00", nil, abi.CodeInvalidArgument, "NUL"},
		{"text not UTF-8", "docs", "x", "zebra \xc3\x28", nil, abi.CodeInvalidArgument, "UTF-8"},
		{"text too large", "docs", "x", strings.Repeat("t", abi.MaxKnowledgeTextBytes+1), nil, abi.CodeTooLarge, "split the document"},
		{"a million-character word", "docs", "x", strings.Repeat("z", 1_000_000), nil, abi.CodeTooLarge, "split the document"},
		{"nested meta", "docs", "x", "t", nested, abi.CodeInvalidArgument, "flatten"},
		{"10000-deep meta", "docs", "x", "t", deep, abi.CodeInvalidArgument, "flatten"},
		{"list in meta", "docs", "x", "t", map[string]any{"l": []any{1, 2}}, abi.CodeInvalidArgument, "flatten"},
		{"null in meta", "docs", "x", "t", map[string]any{"n": nil}, abi.CodeInvalidArgument, "leave the key out"},
		{"NaN in meta", "docs", "x", "t", map[string]any{"n": math.NaN()}, abi.CodeInvalidArgument, "finite"},
		{"meta key with a quote", "docs", "x", "t", map[string]any{`a"b`: 1}, abi.CodeInvalidArgument, "A-Z a-z 0-9"},
		{"meta key as a JSON path", "docs", "x", "t", map[string]any{"$.a": 1}, abi.CodeInvalidArgument, "A-Z a-z 0-9"},
		{"meta key with a space", "docs", "x", "t", map[string]any{"a b": 1}, abi.CodeInvalidArgument, "A-Z a-z 0-9"},
		{"meta key too long", "docs", "x", "t", map[string]any{strings.Repeat("k", 65): 1}, abi.CodeInvalidArgument, "A-Z a-z 0-9"},
		{"meta value with NUL", "docs", "x", "t", map[string]any{"k": "a\x00"}, abi.CodeInvalidArgument, "NUL"},
		{"meta value not UTF-8", "docs", "x", "t", map[string]any{"k": "\xff"}, abi.CodeInvalidArgument, "UTF-8"},
		{"too many meta keys", "docs", "x", "t", manyKeys, abi.CodeTooLarge, "keep fewer"},
		{"meta too large", "docs", "x", "t", map[string]any{"k": strings.Repeat("v", abi.MaxKnowledgeMetaBytes)}, abi.CodeTooLarge, "in the text"},
	} {
		err := add(tt.coll, tt.id, tt.text, tt.meta)
		if codeOf(err) != tt.code || !strings.Contains(err.Error(), tt.errorMentionsFix) {
			t.Errorf("%s: err = %v, want %s saying %q", tt.name, err, tt.code, tt.errorMentionsFix)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Errorf("%s: the error repeats the input: %d bytes", tt.name, len(err.Error()))
		}
	}
	for _, filter := range []map[string]any{{`a"b`: 1}, {"$.k": "x"}, {"k": []any{}}, {"k": map[string]any{}}} {
		if _, err := s.KnowledgeSearch(ctx, scA, store.KnowledgeQuery{Collection: "docs", Query: "zebra", Filter: filter}); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("filter %v: err = %v, want invalid_argument", filter, err)
		}
	}
	for _, limit := range []int{-1, abi.MaxKnowledgeSearchLimit + 1, math.MaxInt} {
		if _, err := s.KnowledgeSearch(ctx, scA, store.KnowledgeQuery{Collection: "docs", Query: "zebra", Limit: limit}); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("limit %d: err = %v, want invalid_argument", limit, err)
		}
	}

	// Documents at the limits: a huge word is stored (not indexed),
	// and 128 KiB of distinct words fit every backend's index.
	if err := add("docs", "hugeword", strings.Repeat("h", 100<<10)+" findme", nil); err != nil {
		t.Errorf("a 100 KiB word: %v", err)
	}
	if got := hitIDs(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "findme"})); !slices.Equal(got, []string{"hugeword"}) {
		t.Errorf("findme = %v", got)
	}
	// Han characters are words of one character each, 3 bytes with no
	// separator, and hex-encoded as terms: the largest index per byte of
	// text there is (every one of 20992 distinct, then repeats).
	var w strings.Builder
	for r := rune(0x4E00); w.Len()+3 <= abi.MaxKnowledgeTextBytes; r++ {
		if r > 0x9FFF {
			r = 0x4E00
		}
		w.WriteRune(r)
	}
	if err := add("docs", "distinct", w.String(), manyKeysWithin()); err != nil {
		t.Fatalf("%d bytes of distinct words: %v", w.Len(), err)
	}
	if got := hitIDs(ksearch(t, s, scA, store.KnowledgeQuery{Collection: "docs", Query: "一丁 龥"})); !slices.Equal(got, []string{"distinct"}) {
		t.Errorf("search in the largest document = %v", got)
	}
	// Everything still works afterwards, and the injection changed nothing.
	if u, err := s.KnowledgeUsage(ctx, scA); err != nil || u.Documents != 6 {
		t.Errorf("usage = %+v, %v; want 6 documents", u, err)
	}
	put(t, s, scA, "still", "here")
}

// words is a query of n distinct words.
func words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprint("w", i)
	}
	return strings.Join(w, " ")
}

// manyKeysWithin is meta with the most keys allowed.
func manyKeysWithin() map[string]any {
	m := map[string]any{}
	for i := range abi.MaxKnowledgeMetaKeys {
		m[fmt.Sprint("k", i)] = fmt.Sprint("value ", i)
	}
	return m
}

// Bad scopes are refused before the backend is reached.
func (su suite) testKnowledgeValidation(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	for _, sc := range []store.Scope{{}, {Org: "o"}, {Module: "m"}} {
		if _, err := s.KnowledgeAdd(ctx, sc, store.KnowledgeDoc{Collection: "c", ID: "i", Text: "t"}, store.KnowledgeQuota{}); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("add in %+v: %v", sc, err)
		}
		if _, err := s.KnowledgeSearch(ctx, sc, store.KnowledgeQuery{Collection: "c", Query: "t"}); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("search in %+v: %v", sc, err)
		}
		if _, err := s.KnowledgeDelete(ctx, sc, store.KnowledgeKey{Collection: "c", ID: "i"}); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("delete in %+v: %v", sc, err)
		}
		if _, err := s.KnowledgeUsage(ctx, sc); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("usage of %+v: %v", sc, err)
		}
	}
	if _, err := s.KnowledgeDelete(ctx, scA, store.KnowledgeKey{Collection: "Bad", ID: "i"}); codeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("delete from a bad collection name: %v", err)
	}
	// A document of no words is stored, and found by nothing.
	kadd(t, s, scA, "docs", "symbols", "— ... !!! ***", nil)
	if u, err := s.KnowledgeUsage(ctx, scA); err != nil || u.Documents != 1 {
		t.Errorf("usage = %+v, %v", u, err)
	}
}
