package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// TestKnowledgeGuest drives the knowledge family end to end from a real
// Go guest (testdata/knowledgeguest, the SDK's moat.Knowledge): a granted
// collection is written, searched and deleted, and each write audited as
// a mutation on its collection; a collection the manifest asks for but
// the profile does not grant is denied and audited, whichever op; another
// organization and another module see none of it.
func TestKnowledgeGuest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := policyHost(t, `
name: test
on_ungranted: deny_at_call
default:
  capabilities: {knowledge: [docs]}
`)
	wasm := testwasm.BuildGo(t, "./testdata/knowledgeguest", true)
	load := func(name string) *host.Module {
		mf := mustManifest(t, "name: "+name+"\nversion: 1.0.0\nactions: [{name: kb}]\ncapabilities: {knowledge: [docs, secrets]}\n")
		m, err := h.Load(ctx, wasm, host.LoadOptions{Manifest: mf})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	kb, other := load("kb-plugin"), load("kb-other")
	call := func(m *host.Module, who policy.Principal, cid, cmd string) (string, abi.Code) {
		t.Helper()
		res, err := m.Invoke(ctx, host.Request{Action: "kb", Input: []byte(cmd), Principal: who, CorrelationID: cid})
		if err != nil {
			return err.Error(), abi.CodeOf(err)
		}
		return string(res.Output), ""
	}
	lastOp := func(cid string) audit.Event {
		t.Helper()
		evs := auditEvents(t, h, audit.Filter{CorrelationID: cid, Kind: audit.KindOp})
		if len(evs) != 1 {
			t.Fatalf("%d op events under %s, want 1: %+v", len(evs), cid, evs)
		}
		return evs[0]
	}

	out, code := call(kb, ann, "kb-add", `{"op":"add","collection":"docs","id":"guide","text":"How to rotate an API key: revoke the old key, then create a new one.","meta":{"lang":"en","v":2}}`)
	if code != "" || out != `{"replaced":false}` {
		t.Fatalf("add = %s %s", out, code)
	}
	if ev := lastOp("kb-add"); ev.Op != abi.OpKnowledgeAdd || ev.Decision != audit.Allow || ev.MutationID == "" ||
		ev.Attrs["target"] != "docs" || ev.User != ann.User || ev.Org != ann.Org || ev.Module != "kb-plugin" {
		t.Errorf("the add's audit event: %+v", ev)
	}
	call(kb, ann, "kb-add2", `{"op":"add","collection":"docs","id":"faq","text":"Keys expire after a year.","meta":{"lang":"en","v":1}}`)

	out, code = call(kb, ann, "kb-search", `{"op":"search","collection":"docs","query":"rotate KEY","filter":{"lang":"en"}}`)
	var hits []abi.KnowledgeHit
	if code != "" || json.Unmarshal([]byte(out), &hits) != nil || len(hits) != 1 || hits[0].ID != "guide" ||
		!strings.Contains(hits[0].Snippet, "rotate an API key") || hits[0].Meta["v"] != 2.0 || hits[0].Score <= 0 {
		t.Fatalf("search = %s %s", out, code)
	}
	if evs := auditEvents(t, h, audit.Filter{CorrelationID: "kb-search", Kind: audit.KindOp}); len(evs) != 0 {
		t.Errorf("a search is not a mutation, yet it was audited: %+v", evs)
	}
	out, _ = call(kb, ann, "", `{"op":"search","collection":"docs","query":"keys","filter":{"v":1}}`)
	if !strings.Contains(out, `"id":"faq"`) || strings.Contains(out, `"id":"guide"`) {
		t.Errorf("search filtered on v=1 = %s", out)
	}
	if out, _ = call(kb, ann, "", `{"op":"search","collection":"docs","query":"key","filter":{"v":1}}`); out != "[]" {
		t.Errorf("key found %s, but no document with v=1 holds the word key (keys is another word)", out)
	}

	// Ungranted: denied and audited with the collection, for every op.
	for i, cmd := range []string{
		`{"op":"add","collection":"secrets","id":"x","text":"launch codes"}`,
		`{"op":"search","collection":"secrets","query":"launch"}`,
		`{"op":"delete","collection":"secrets","id":"x"}`,
	} {
		cid := "kb-denied-" + string(rune('a'+i))
		out, code := call(kb, ann, cid, cmd)
		if code != abi.CodeDenied || !strings.Contains(out, "knowledge secrets was requested but not granted") {
			t.Errorf("%s = %s %s; want denied", cmd, out, code)
		}
		if ev := lastOp(cid); ev.Decision != audit.Deny || ev.Attrs["target"] != "secrets" || ev.Rule != "profile test: default grant" || ev.MutationID != "" {
			t.Errorf("%s: audit event %+v", cmd, ev)
		}
	}
	// A collection the manifest does not name: denied by the manifest.
	if out, code := call(kb, ann, "kb-unasked", `{"op":"search","collection":"notes","query":"x"}`); code != abi.CodeDenied || !strings.Contains(out, "add knowledge: [notes] under capabilities") {
		t.Errorf("unasked collection = %s %s", out, code)
	}

	// Another organization, and another module of the same one, see
	// nothing of acme's kb-plugin, and their writes stay theirs.
	bob := policy.Principal{User: "bob", Org: "globex"}
	for _, tt := range []struct {
		m   *host.Module
		who policy.Principal
	}{{kb, bob}, {other, ann}} {
		if out, code := call(tt.m, tt.who, "", `{"op":"search","collection":"docs","query":"key"}`); code != "" || out != "[]" {
			t.Errorf("%s as %s@%s: search = %s %s; want no hits", tt.m.Info().Name, tt.who.User, tt.who.Org, out, code)
		}
		if out, code := call(tt.m, tt.who, "", `{"op":"delete","collection":"docs","id":"guide"}`); code != "" || out != `{"deleted":false}` {
			t.Errorf("%s as %s@%s: delete of acme's guide = %s %s", tt.m.Info().Name, tt.who.User, tt.who.Org, out, code)
		}
	}
	out, code = call(kb, ann, "kb-delete", `{"op":"delete","collection":"docs","id":"guide"}`)
	if code != "" || out != `{"deleted":true}` {
		t.Fatalf("delete = %s %s", out, code)
	}
	if ev := lastOp("kb-delete"); ev.Op != abi.OpKnowledgeDelete || ev.Decision != audit.Allow || ev.MutationID == "" || ev.Attrs["target"] != "docs" {
		t.Errorf("the delete's audit event: %+v", ev)
	}
	// Hostile query text from the guest is words, not syntax.
	if out, code := call(kb, ann, "", `{"op":"search","collection":"docs","query":"\"expire* NEAR(year) OR"}`); code != "" || out != "[]" {
		t.Errorf("hostile query = %s %s; want no hits (no document holds near and or)", out, code)
	}
	if out, code := call(kb, ann, "", `{"op":"search","collection":"docs","query":"(expire) \"year\""}`); code != "" || !strings.Contains(out, `"id":"faq"`) {
		t.Errorf("query with syntax characters = %s %s; want faq", out, code)
	}
}
