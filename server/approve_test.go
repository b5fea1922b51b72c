package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/server"
)

// pendingAll is what GET /v1/confirmations?all=1 answers key.
func (ts *testServer) pendingAll(t *testing.T, key string) []map[string]any {
	t.Helper()
	r := ts.do(t, "GET", "/v1/confirmations?all=1", key, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/confirmations?all=1: %d %s", r.status, r.body)
	}
	var out struct {
		Confirmations []map[string]any `json:"confirmations"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Confirmations
}

// request invokes greet on module as key, expects a 428, and returns the
// token and the id an approver sees.
func (ts *testServer) request(t *testing.T, key, module, input string) (token, id string) {
	t.Helper()
	r := ts.do(t, "POST", "/v1/modules/"+module+"/actions/greet", key, strings.NewReader(input))
	conf, _ := r.json(t)["confirmation"].(map[string]any)
	if r.status != http.StatusPreconditionRequired || conf == nil {
		t.Fatalf("428 expected: %d %s", r.status, r.body)
	}
	token = conf["token"].(string)
	st := ts.do(t, "GET", "/v1/confirmations/"+token, key, nil)
	if st.status != http.StatusOK || st.json(t)["state"] != "pending" {
		t.Fatalf("status of a fresh confirmation: %d %s", st.status, st.body)
	}
	return token, st.json(t)["id"].(string)
}

// TestConfirmationApproval (class 1): four-eyes approval. An approver
// (permission confirm.approve; role admin by default) sees every pending
// confirmation of its organization, without tokens, and approves or denies
// one by id; an approval runs the action once AS THE REQUESTER with the
// roles it held when it asked, and both names are in the audit event. The
// requester cannot approve its own; another organization gets 404; a member
// without the permission gets 403; a module changed since is a 409 and used
// up; the requester's tab learns the outcome from GET
// /v1/confirmations/{token}.
func TestConfirmationApproval(t *testing.T) {
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann", "admin")              // approver
	bob := ts.key(t, "acme", "bob", "billing")            // requester
	boss := ts.key(t, "acme", "boss", "admin", "billing") // an approver who asks itself
	vic := ts.key(t, "acme", "vic", "viewer")             // neither
	eve := ts.key(t, "globex", "eve", "admin")            // another organization's approver
	scoped, _, err := server.CreateAPIKey(context.Background(), ts.Store(), server.NewAPIKey{Org: "acme", User: "ann", Roles: []string{"admin"}, Scopes: []string{server.ScopeInvoke}})
	if err != nil {
		t.Fatal(err)
	}
	wasm := helloWasm(t)
	mf := renamed(t, "hello-billing", "    confirm: true\n    roles: [billing]\n")
	if r := ts.upload(t, ann, wasm, mf); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	// ann cannot run the action herself: it takes role billing.
	if r := ts.do(t, "POST", "/v1/modules/hello-billing/actions/greet", ann, strings.NewReader("x")); r.status != http.StatusForbidden {
		t.Fatalf("ann invoking directly: %d %s, want 403", r.status, r.body)
	}

	long := strings.Repeat("é", 300) // 600 bytes: the preview stops at 256, on a rune boundary
	token, id := ts.request(t, bob, "hello-billing", "Later "+long)

	// The list: approvers only, their organization only, no token.
	ts.check(t, ann, "list-vic", call{"GET", "/v1/confirmations?all=1", vic, nil, ""}, 403, "denied", "confirm.approve", event{"decision", "deny", "confirm.approve"})
	if r := ts.do(t, "GET", "/v1/confirmations?all=yes", ann, nil); r.status != http.StatusBadRequest {
		t.Errorf("all=yes: %d, want 400", r.status)
	}
	if got := ts.pendingAll(t, eve); len(got) != 0 {
		t.Errorf("another organization's approver sees %v", got)
	}
	list := ts.pendingAll(t, ann)
	if len(list) != 1 {
		t.Fatalf("ann sees %d pending, want 1: %v", len(list), list)
	}
	c := list[0]
	raw, _ := json.Marshal(c)
	switch pv, _ := c["input_preview"].(string); {
	case c["id"] != id || c["user"] != "bob" || c["module"] != "hello-billing" || c["action"] != "greet":
		t.Errorf("pending = %v", c)
	case len(c["input_sha256"].(string)) != 64 || c["input_bytes"] != float64(len("Later "+long)) || c["input_truncated"] != true:
		t.Errorf("input fields = %v", c)
	case len(pv) > 256 || !strings.HasPrefix(pv, "Later é") || !strings.HasSuffix(pv, "é"):
		t.Errorf("preview (%d bytes) = %q", len(pv), pv)
	case strings.Contains(string(raw), token):
		t.Errorf("the list holds the token: %s", raw)
	}

	// Refusals leave it pending.
	approve := "/v1/confirmations/id/" + id + "/approve"
	ts.check(t, ann, "approve-vic", call{"POST", approve, vic, nil, ""}, 403, "denied", "confirm.approve", event{"decision", "deny", "confirm.approve"})
	ts.check(t, eve, "approve-eve", call{"POST", approve, eve, nil, ""}, 404, "not_found", "no pending confirmation", event{})
	ts.check(t, ann, "approve-scoped", call{"POST", approve, scoped, nil, ""}, 403, "denied", "scope", event{"decision", "deny", "api key scopes"})
	ts.check(t, ann, "approve-bob", call{"POST", approve, bob, nil, ""}, 403, "denied", "needs role admin", event{"decision", "deny", "confirm.approve"})
	for _, bad := range []string{"/v1/confirmations/id/" + id + "/run", "/v1/confirmations/id/" + strings.ToUpper(id) + "/approve",
		"/v1/confirmations/id/" + id[:15] + "/approve", "/v1/confirmations/id/%00%00/approve", "/v1/confirmations/id/" + id + "00/approve"} {
		if r := ts.do(t, "POST", bad, ann, nil); r.status != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", bad, r.status)
		}
	}

	// The approval runs as bob, with bob's roles, once.
	r := ts.check(t, ann, "approve-ann", call{"POST", approve, ann, nil, ""}, 200, "", "", event{"confirmation", "allow", "confirmation approve"})
	if !strings.HasPrefix(string(r.body), "Hello, Later ") {
		t.Errorf("approved output = %q", r.body)
	}
	var approved map[string]any
	for _, e := range ts.auditEvents(t, ann, "approve-ann") {
		if e["kind"] == "confirmation" {
			approved = e
		}
	}
	if attrs, _ := approved["attrs"].(map[string]any); approved["user"] != "bob" || attrs["approver"] != "ann" || attrs["requester"] != "bob" {
		t.Errorf("approval event = %v; want user bob, approver ann", approved)
	}
	ts.check(t, ann, "approve-again", call{"POST", approve, ann, nil, ""}, 404, "not_found", "no pending confirmation", event{})
	if r := ts.do(t, "POST", "/v1/confirmations/"+token, bob, nil); r.status != http.StatusNotFound {
		t.Errorf("bob's token after approval: %d, want 404", r.status)
	}
	st := ts.do(t, "GET", "/v1/confirmations/"+token, bob, nil).json(t)
	if st["state"] != "approved" || st["decided_by"] != "ann" || st["decided_at"] == nil {
		t.Errorf("status after approval = %v", st)
	}
	for _, k := range []string{ann, eve} { // only the holder of the token asks
		if r := ts.do(t, "GET", "/v1/confirmations/"+token, k, nil); r.status != http.StatusNotFound {
			t.Errorf("status by another: %d, want 404", r.status)
		}
	}

	// A denial runs nothing.
	token2, id2 := ts.request(t, bob, "hello-billing", "Never")
	r = ts.check(t, ann, "deny-ann", call{"POST", "/v1/confirmations/id/" + id2 + "/deny", ann, nil, ""}, 200, "", "", event{"confirmation", "deny", "confirmation deny"})
	if d := r.json(t); d["decision"] != "denied" || d["requester"] != "bob" {
		t.Errorf("denial = %v", d)
	}
	if st := ts.do(t, "GET", "/v1/confirmations/"+token2, bob, nil).json(t); st["state"] != "denied" || st["decided_by"] != "ann" {
		t.Errorf("status after denial = %v", st)
	}

	// The requester cannot approve its own request, even as an approver.
	_, id3 := ts.request(t, boss, "hello-billing", "Myself")
	ts.check(t, ann, "approve-self", call{"POST", "/v1/confirmations/id/" + id3 + "/approve", boss, nil, ""}, 403, "denied",
		"another approver of the organization must decide it", event{"confirmation", "deny", "confirmation approve"})
	if got := ts.pendingAll(t, ann); len(got) != 1 || got[0]["id"] != id3 {
		t.Errorf("after the refused self-approval, pending = %v", got)
	}

	// A module changed since is refused and used up.
	_, id4 := ts.request(t, bob, "hello-billing", "Swapped")
	if r := ts.upload(t, ann, wasm, []byte(strings.Replace(string(mf), "greeting: Hello", "greeting: Pwned", 1))); r.status != http.StatusCreated {
		t.Fatalf("swap: %d %s", r.status, r.body)
	}
	ts.check(t, ann, "approve-stale", call{"POST", "/v1/confirmations/id/" + id4 + "/approve", ann, nil, ""}, 409, "confirmation_stale",
		"changed since the confirmation was requested", event{"confirmation", "deny", "confirmation approve"})
	ts.check(t, ann, "approve-stale-again", call{"POST", "/v1/confirmations/id/" + id4 + "/approve", ann, nil, ""}, 404, "not_found", "", event{})
}

// TestConfirmationApprovalProfile (class 1): role_permissions gives
// confirm.approve to a role (admin is then not implied), and
// confirm_self_approve lets an approver decide its own request.
func TestConfirmationApprovalProfile(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "ops.yaml")
	if err := os.WriteFile(prof, []byte("name: ops\nconfirm_self_approve: true\nrole_permissions:\n  approver: [confirm.approve]\ndefault:\n  capabilities: {kv: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := start(t, "", func(c *server.Config) { c.Profiles = map[string]string{"lab": prof} })
	lia := ts.key(t, "lab", "lia", "admin")
	amy := ts.key(t, "lab", "amy", "approver")
	if r := ts.upload(t, lia, helloWasm(t), renamed(t, "hello-confirm", "    confirm: true\n")); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	_, id := ts.request(t, amy, "hello-confirm", "Self")
	ts.check(t, lia, "list-lia", call{"GET", "/v1/confirmations?all=1", lia, nil, ""}, 403, "denied",
		"needs permission confirm.approve", event{"decision", "deny", "role_permissions confirm.approve"})
	if r := ts.do(t, "POST", "/v1/confirmations/id/"+id+"/approve", amy, nil); r.status != http.StatusOK || string(r.body) != "Hello, Self! (call #1)" {
		t.Errorf("self-approval under confirm_self_approve: %d %s", r.status, r.body)
	}
}
