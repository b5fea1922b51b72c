package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// A user-scoped collection (scope: user) is the caller's own: user A of an
// organization adds, user B of the same organization finds, replaces and
// deletes nothing of it, lexically or by vector, and its scores say
// nothing of B's documents. An org-scoped collection is shared within the
// organization and never across organizations. Issue 28's defect 6: the
// store applies the scope, so this holds on every backend.
func (su suite) testKnowledgeUserScope(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	orgO, orgP := store.Scope{Org: "org-o", Module: "kb"}, store.Scope{Org: "org-p", Module: "kb"}
	embed := embedWords("embed-u", 64)
	add := func(sc store.Scope, user, coll, id, text string, userScoped bool) bool {
		t.Helper()
		replaced, err := s.KnowledgeAdd(ctx, sc, store.KnowledgeDoc{Collection: coll, ID: id, Text: text, Owner: user, UserScoped: userScoped, Embed: embed}, store.KnowledgeQuota{})
		if err != nil {
			t.Fatalf("%s of %s adding %s/%s: %v", user, sc.Org, coll, id, err)
		}
		return replaced
	}
	find := func(sc store.Scope, user, coll, query string, userScoped, hybrid bool) string {
		t.Helper()
		q := store.KnowledgeQuery{Collection: coll, Query: query, User: user, UserScoped: userScoped}
		if hybrid {
			q.Embed = embed
		}
		ids := hitIDs(ksearch(t, s, sc, q))
		slices.Sort(ids)
		return strings.Join(ids, ",")
	}

	add(orgO, "alice", "notes", "a1", "alice diagnosis harbour", true)
	add(orgO, "alice", "notes", "shared-id", "alice second harbour", true)
	if add(orgO, "bob", "notes", "shared-id", "bob lighthouse", true) {
		t.Errorf("bob's add of an id alice uses replaced a document: ids are per user in a user-scoped collection")
	}
	add(orgO, "alice", "handbook", "h1", "handbook harbour rules", false)
	add(orgP, "carol", "handbook", "h1", "other org harbour", false)
	add(orgP, "carol", "notes", "c1", "carol harbour", true)

	for _, tt := range []struct {
		name       string
		sc         store.Scope
		user, coll string
		query      string
		userScoped bool
		want       string
	}{
		{"the owner finds her documents", orgO, "alice", "notes", "harbour", true, "a1,shared-id"},
		{"another user of the org finds nothing of them", orgO, "bob", "notes", "harbour diagnosis", true, ""},
		{"another user of the org finds nothing by a word of them", orgO, "bob", "notes", "harbour", true, ""},
		{"another user finds his own under the same id", orgO, "bob", "notes", "lighthouse", true, "shared-id"},
		{"the owner does not find the other user's", orgO, "alice", "notes", "lighthouse", true, ""},
		{"a user of another org finds nothing of them", orgP, "alice", "notes", "harbour", true, ""},
		{"the other org's user finds hers", orgP, "carol", "notes", "harbour", true, "c1"},
		{"a user-scoped collection read as org-scoped holds nothing of its users", orgO, "bob", "notes", "harbour", false, ""},
		{"an org-scoped collection is shared within the org", orgO, "bob", "handbook", "harbour", false, "h1"},
		{"and by its author", orgO, "alice", "handbook", "rules", false, "h1"},
		{"an org-scoped collection read as user-scoped is another collection", orgO, "alice", "handbook", "harbour", true, ""},
		{"an org-scoped collection is not shared across orgs", orgP, "carol", "handbook", "rules", false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, hybrid := range []bool{false, true} {
				if got := find(tt.sc, tt.user, tt.coll, tt.query, tt.userScoped, hybrid); got != tt.want {
					t.Errorf("%s of %s searching %s for %q (hybrid %v) = [%s], want [%s]", tt.user, tt.sc.Org, tt.coll, tt.query, hybrid, got, tt.want)
				}
			}
		})
	}
	// By vector alone (no word in common), another user's nearest
	// documents are not candidates either.
	if got := find(orgO, "bob", "notes", "alice diagnosis", true, true); got != "" {
		t.Errorf("bob's hybrid search for alice's words = [%s], want nothing", got)
	}

	// Deletes reach the caller's own document only.
	if deleted, err := s.KnowledgeDelete(ctx, orgO, store.KnowledgeKey{Collection: "notes", ID: "a1", User: "bob", UserScoped: true}); err != nil || deleted {
		t.Errorf("bob deleting alice's a1 = %v, %v; want false", deleted, err)
	}
	if deleted, err := s.KnowledgeDelete(ctx, orgO, store.KnowledgeKey{Collection: "notes", ID: "shared-id", User: "bob", UserScoped: true}); err != nil || !deleted {
		t.Errorf("bob deleting his shared-id = %v, %v; want true", deleted, err)
	}
	if deleted, err := s.KnowledgeDelete(ctx, orgO, store.KnowledgeKey{Collection: "notes", ID: "a1"}); err != nil || deleted {
		t.Errorf("an org-scoped delete of a1 = %v, %v; want false", deleted, err)
	}
	if got := find(orgO, "alice", "notes", "harbour", true, false); got != "a1,shared-id" {
		t.Errorf("after bob's deletes alice finds [%s], want [a1,shared-id]", got)
	}

	// A score in alice's part says nothing of bob's: bob adding documents
	// full of the term moves none of alice's scores.
	score := func() float64 {
		hits := ksearch(t, s, orgO, store.KnowledgeQuery{Collection: "notes", Query: "harbour", User: "alice", UserScoped: true})
		if len(hits) == 0 {
			t.Fatal("alice lost her documents")
		}
		return hits[0].Score
	}
	before := score()
	for i := range 5 {
		add(orgO, "bob", "notes", "flood"+string(rune('a'+i)), "harbour harbour harbour", true)
	}
	if after := score(); after != before {
		t.Errorf("alice's score moved from %v to %v when bob added documents", before, after)
	}

	// A user-scoped call without a user, or with a user no text can be,
	// is refused: it would otherwise share one part with every such call.
	for _, bad := range []struct {
		user string
		code abi.Code
		says string
	}{
		{"", abi.CodeInvalidArgument, "the caller has no user"},
		{"a\x00b", abi.CodeInvalidArgument, "contains a NUL byte"},
		{strings.Repeat("u", abi.MaxKnowledgeIDLen+1), abi.CodeTooLarge, "is 257 bytes"},
		{"\xff", abi.CodeInvalidArgument, "is not valid UTF-8"},
	} {
		check := func(what string, err error) {
			t.Helper()
			if codeOf(err) != bad.code || !strings.Contains(err.Error(), bad.says) {
				t.Errorf("%s as user %q: %v, want %s saying %q", what, bad.user, err, bad.code, bad.says)
			}
		}
		_, err := s.KnowledgeAdd(ctx, orgO, store.KnowledgeDoc{Collection: "notes", ID: "x", Text: "x y", Owner: bad.user, UserScoped: true}, store.KnowledgeQuota{})
		check("add", err)
		_, err = s.KnowledgeSearch(ctx, orgO, store.KnowledgeQuery{Collection: "notes", Query: "harbour", User: bad.user, UserScoped: true})
		check("search", err)
		_, err = s.KnowledgeDelete(ctx, orgO, store.KnowledgeKey{Collection: "notes", ID: "a1", User: bad.user, UserScoped: true})
		check("delete", err)
	}
	// A user's id holding the separator cannot reach another user's part
	// or another collection: "notes" of user "alice/x" is not alice's.
	if got := find(orgO, "alice/x", "notes", "harbour", true, false); got != "" {
		t.Errorf("user alice/x finds [%s] of alice's", got)
	}
	if _, err := s.KnowledgeSearch(ctx, orgO, store.KnowledgeQuery{Collection: "notes/alice", Query: "harbour"}); codeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("a search of collection notes/alice: %v, want %s", err, abi.CodeInvalidArgument)
	}
}
