package javascript_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// TestScriptPluginPolicy: a script plugin's actions pass the same gates
// as a compiled plugin's: the manifest's roles, confirm: true with a
// single-use token, the action's input limit, a failing script as a
// guest_error with its last stderr line, and each outcome audited under
// the action's name.
func TestScriptPluginPolicy(t *testing.T) {
	mf, err := policy.ParseManifest("moat.yaml", []byte(`
name: gates-js
version: 0.1.0
language: javascript
kind: moat
actions:
  - name: whoami
    roles: [admin]
    max_input: 16B
  - name: wipe
    confirm: true
  - name: fail
`))
	if err != nil {
		t.Fatal(err)
	}
	m := suite.LoadScript(t, mf, "main.js", `
const action = std.getenv("MOAT_ACTION");
const input = std.in.readAsString() ?? "";
if (action === "fail") {
  std.err.puts("warming up\nit broke: no disk\n");
  std.exit(3);
}
print(action + ":" + input);
`)
	ctx := context.Background()
	admin := policy.Principal{User: "ann", Org: "acme", Roles: []string{"admin"}}
	guest := policy.Principal{User: "bob", Org: "acme"}
	code := func(err error) abi.Code { return abi.CodeOf(err) }

	// Roles.
	_, err = m.Invoke(ctx, host.Request{Action: "whoami", Input: []byte("hi"), Principal: guest, CorrelationID: "c-roles"})
	var denied *policy.DeniedError
	if !errors.As(err, &denied) {
		t.Fatalf("whoami without the admin role: %v, want a *policy.DeniedError", err)
	}
	res, err := m.Invoke(ctx, host.Request{Action: "whoami", Input: []byte("hi"), Principal: admin, CorrelationID: "c-ok"})
	if err != nil || string(res.Output) != "whoami:hi" {
		t.Fatalf("whoami as admin: %q, %v; want whoami:hi", res.Output, err)
	}
	// The action's max_input.
	if _, err := m.Invoke(ctx, host.Request{Action: "whoami", Input: []byte(strings.Repeat("x", 17)), Principal: admin}); code(err) != abi.CodeInputTooLarge {
		t.Errorf("17 bytes into a 16B action: %v, want input_too_large", err)
	}

	// confirm: true asks first, then runs once for the token.
	_, err = m.Invoke(ctx, host.Request{Action: "wipe", Input: []byte("all"), Principal: admin})
	var he *host.Error
	if !errors.As(err, &he) || he.Code != abi.CodeConfirmationRequired || he.Confirmation == nil {
		t.Fatalf("wipe: %v, want a confirmation request", err)
	}
	tok := he.Confirmation.Token
	if _, err := m.Confirm(ctx, host.ConfirmRequest{Token: tok, Principal: guest}); err == nil {
		t.Error("another principal used the token")
	}
	res, err = m.Confirm(ctx, host.ConfirmRequest{Token: tok, Principal: admin})
	if err != nil || string(res.Output) != "wipe:all" {
		t.Fatalf("confirmed wipe: %q, %v; want wipe:all", res.Output, err)
	}
	if _, err := m.Confirm(ctx, host.ConfirmRequest{Token: tok, Principal: admin}); err == nil {
		t.Error("a replayed token ran the action again")
	}

	// A failing script.
	_, err = m.Invoke(ctx, host.Request{Action: "fail", Principal: guest, CorrelationID: "c-fail"})
	if code(err) != abi.CodeGuestError || !strings.Contains(err.Error(), "status 3: it broke: no disk") {
		t.Fatalf("fail: %v, want a guest_error with the exit status and the last stderr line", err)
	}

	if err := suite.Audit.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for corr, want := range map[string]string{"c-roles": "deny", "c-ok": "allow", "c-fail": "allow"} {
		evs, err := suite.Store.AuditQuery(ctx, store.AuditFilter{CorrelationID: corr})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range evs {
			if ev.Module == "gates-js" && ev.Action != "" && ev.Action != "_start" && ev.Decision == want {
				found = true
			}
		}
		if !found {
			t.Errorf("correlation %s: no %s event naming the action; events: %+v", corr, want, evs)
		}
	}
}
