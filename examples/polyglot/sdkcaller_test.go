//go:build !wasip1

package polyglot_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy"
)

// TestSDKCaller: every SDK's caller (Go moat.Caller, C/C++ moat_caller,
// Rust moat::caller, AssemblyScript moat.caller, JavaScript moat.caller,
// Python moat.caller, Ruby Moat.caller) returns the invocation's
// principal, typed: the user, organization, roles and correlation id the
// host invoked it with, whatever the input says, and anew on every call
// of a reused (pooled or resident) instance. The fixtures are the
// outside-* ones, which cover every language; their caller action
// answers {"user","org","roles","correlation_id","admin"}.
func TestSDKCaller(t *testing.T) {
	testenv.Slow(t, "eight SDKs built; host's TestCallerOp keeps the op")
	type fixture struct {
		lang string
		load func(t *testing.T, h *host.Host) *host.Module
	}
	var fixtures []fixture
	for _, g := range outsideFixtures {
		fixtures = append(fixtures, fixture{g.lang, func(t *testing.T, h *host.Host) *host.Module { return load(t, h, bundle(t, g), nil) }})
	}
	for _, s := range outsideScripts {
		fixtures = append(fixtures, fixture{s.lang, loadScriptFixture(s.dir, nil)})
	}
	admin := policy.Principal{User: "ann", Org: "acme", Roles: []string{"admin", "viewer"}}
	bob := policy.Principal{User: "bob", Org: "acme"}
	eve := policy.Principal{User: "eve", Org: "globex", Roles: []string{"viewer"}}
	for _, f := range fixtures {
		t.Run(f.lang, func(t *testing.T) {
			h := sdkHost(t, slog.New(slog.DiscardHandler))
			m := f.load(t, h)
			for i, tt := range []struct {
				who   policy.Principal
				cid   string
				input string // what a caller could claim; never read as the principal
				want  map[string]any
			}{
				{admin, "c-ann", "", map[string]any{"user": "ann", "org": "acme", "roles": []any{"admin", "viewer"}, "correlation_id": "c-ann", "admin": true}},
				{bob, "c-bob", `{"user":"ann","org":"acme","roles":["admin"]}`, map[string]any{"user": "bob", "org": "acme", "roles": []any{}, "correlation_id": "c-bob", "admin": false}},
				{eve, "c-eve", "user=ann org=acme", map[string]any{"user": "eve", "org": "globex", "roles": []any{"viewer"}, "correlation_id": "c-eve", "admin": false}},
				// The same instance again: nothing of the last caller is kept.
				{admin, "c-ann-2", "", map[string]any{"user": "ann", "org": "acme", "roles": []any{"admin", "viewer"}, "correlation_id": "c-ann-2", "admin": true}},
			} {
				res, err := m.Invoke(context.Background(), host.Request{Action: "caller", Input: []byte(tt.input), Principal: tt.who, CorrelationID: tt.cid})
				if err != nil {
					t.Fatalf("call %d as %s: %v", i, tt.who, err)
				}
				var got map[string]any
				if err := json.Unmarshal(res.Output, &got); err != nil {
					t.Fatalf("call %d: output %q: %v", i, res.Output, err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("call %d as %s = %v, want %v", i, tt.who, got, tt.want)
				}
			}
		})
	}
}
