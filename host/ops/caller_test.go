package ops_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// TestCallerOp: moat.caller answers the invocation's principal and
// correlation id whatever the request says, needs no grant (the gate is
// asked on no target, as for config.get) and is neither a mutation nor a
// call out of the sandbox (so the host does not audit it per call).
func TestCallerOp(t *testing.T) {
	op, ok := ops.Lookup([]byte(abi.OpCaller))
	if !ok {
		t.Fatal("the table lacks moat.caller")
	}
	if op.Capability != "" || op.Mutates || op.LeavesSandbox {
		t.Fatalf("moat.caller: capability %q, mutates %v, leaves %v; want none", op.Capability, op.Mutates, op.LeavesSandbox)
	}
	for _, tt := range []struct {
		name string
		p    policy.Principal
		req  string
		want abi.CallerResponse
	}{
		{"empty request", policy.Principal{User: "ann", Org: "acme", Roles: []string{"admin", "viewer"}}, `{}`,
			abi.CallerResponse{User: "ann", Org: "acme", Roles: []string{"admin", "viewer"}, CorrelationID: "corr-1"}},
		{"no roles is an empty list", policy.Principal{User: "bob", Org: "acme"}, `{}`,
			abi.CallerResponse{User: "bob", Org: "acme", Roles: []string{}, CorrelationID: "corr-1"}},
		{"another user's id in the request is ignored", policy.Principal{User: "bob", Org: "acme"},
			`{"user":"ann","org":"globex","roles":["admin"],"correlation_id":"forged"}`,
			abi.CallerResponse{User: "bob", Org: "acme", Roles: []string{}, CorrelationID: "corr-1"}},
		{"a principal in a nested object is ignored", policy.Principal{User: "bob", Org: "acme", Roles: []string{"viewer"}},
			`{"principal":{"user":"ann","org":"acme","roles":["admin"]}}`,
			abi.CallerResponse{User: "bob", Org: "acme", Roles: []string{"viewer"}, CorrelationID: "corr-1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := &ops.Env{Module: "m", Logger: slog.New(slog.DiscardHandler)}
			env.Begin(context.Background(), "a", tt.p, "corr-1")
			g := &gate{}
			reply, err := ops.Dispatch(env, g, op, []byte(tt.req))
			if err != nil {
				t.Fatal(err)
			}
			var got abi.CallerResponse
			if err := json.Unmarshal(reply, &got); err != nil {
				t.Fatalf("%s: %v", reply, err)
			}
			if got.User != tt.want.User || got.Org != tt.want.Org || got.CorrelationID != tt.want.CorrelationID ||
				got.Roles == nil || !slices.Equal(got.Roles, tt.want.Roles) {
				t.Errorf("moat.caller %s = %s, want %+v", tt.req, reply, tt.want)
			}
			if !slices.Equal(g.asked, []string{abi.OpCaller + " "}) {
				t.Errorf("gate asked %q, want one decision on no target", g.asked)
			}
		})
	}
	// The reply's roles are a copy: a guest's answer cannot alias the
	// principal the host keeps deciding with.
	env := &ops.Env{Module: "m", Logger: slog.New(slog.DiscardHandler)}
	p := policy.Principal{User: "ann", Org: "acme", Roles: []string{"viewer"}}
	env.Begin(context.Background(), "a", p, "c")
	if _, err := ops.Dispatch(env, allowAll, op, []byte(`{}`)); err != nil || p.Roles[0] != "viewer" {
		t.Fatalf("%v %v", err, p.Roles)
	}
}

// TestKnowledgeUserScopeOps: through the ops, a collection the manifest
// declares scope: user is the caller's own, and a user id the guest puts
// in a request is ignored (the principal is the invocation's).
func TestKnowledgeUserScopeOps(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	views := attachViews(t, st, "", "name: kb\nversion: 1.0.0\ncapabilities: {knowledge: [notes, handbook]}\nknowledge: {notes: {scope: user}}\n")
	as := func(user, org string) *ops.Env {
		env := &ops.Env{Module: "kb", Store: st, Logger: slog.New(slog.DiscardHandler), Views: views}
		env.Begin(ctx, "a", policy.Principal{User: user, Org: org}, "c")
		return env
	}
	call := func(env *ops.Env, name, req string) string {
		t.Helper()
		op, _ := ops.Lookup([]byte(name))
		reply, err := ops.Dispatch(env, allowAll, op, []byte(req))
		if err != nil {
			t.Fatalf("%s %s as %s: %v", name, req, env.Principal, err)
		}
		return string(reply)
	}
	ids := func(reply string) []string {
		var r abi.KnowledgeSearchResponse
		if err := json.Unmarshal([]byte(reply), &r); err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, h := range r.Hits {
			out = append(out, h.ID)
		}
		slices.Sort(out)
		return out
	}
	ann, bob, eve := as("ann", "acme"), as("bob", "acme"), as("eve", "globex")
	// Ann indexes, naming bob as owner and user: ignored.
	call(ann, abi.OpKnowledgeAdd, `{"collection":"notes","id":"n1","text":"ann diagnosis harbour","owner":"bob","user":"bob"}`)
	call(ann, abi.OpKnowledgeAdd, `{"collection":"handbook","id":"h1","text":"handbook harbour"}`)
	for _, tt := range []struct {
		name string
		env  *ops.Env
		req  string
		want []string
	}{
		{"the owner finds hers", ann, `{"collection":"notes","query":"harbour"}`, []string{"n1"}},
		{"another user of the org finds nothing", bob, `{"collection":"notes","query":"harbour"}`, []string{}},
		{"naming the owner in the request changes nothing", bob, `{"collection":"notes","query":"harbour","user":"ann","owner":"ann"}`, []string{}},
		{"naming the owner in the filter finds nothing", bob, `{"collection":"notes","query":"harbour","filter":{"owner":"ann"}}`, []string{}},
		{"another org finds nothing", eve, `{"collection":"notes","query":"harbour","user":"ann","org":"acme"}`, []string{}},
		{"org-scoped is shared in the org", bob, `{"collection":"handbook","query":"harbour"}`, []string{"h1"}},
		{"and not across orgs", eve, `{"collection":"handbook","query":"harbour"}`, []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ids(call(tt.env, abi.OpKnowledgeSearch, tt.req)); !slices.Equal(got, tt.want) {
				t.Errorf("%s: %v, want %v", tt.req, got, tt.want)
			}
		})
	}
	if got := call(bob, abi.OpKnowledgeDelete, `{"collection":"notes","id":"n1","user":"ann"}`); got != `{"deleted":false}` {
		t.Errorf("bob deleting ann's n1 = %s", got)
	}
	if got := ids(call(ann, abi.OpKnowledgeSearch, `{"collection":"notes","query":"diagnosis"}`)); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("ann lost n1 to bob's delete: %v", got)
	}
}
