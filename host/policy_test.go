package host_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// policyHost starts a host enforcing the profile given as YAML.
func policyHost(t *testing.T, profileYAML string) *host.Host {
	t.Helper()
	p, err := policy.ParseProfile("test-profile.yaml", []byte(profileYAML))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

func manifest(t *testing.T, yaml string) ([]byte, *policy.Manifest) {
	t.Helper()
	m, err := policy.ParseManifest("moat.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(yaml), m
}

const baseProfile = `
name: test
role_permissions:
  auditor: [reports.read]
default:
  capabilities: {kv: true}
  limits: {memory: 256MiB, timeout: 30s, disk: 10MiB, concurrency: 16, calls_per_minute: 100000}
`

const guestManifest = `
name: goguest
version: 1.0.0
actions:
  - name: echo
  - name: admin-echo
    export: echo
    roles: [admin]
  - name: report
    export: echo
    permissions: [reports.read]
  - name: risky
    export: echo
    confirm: true
  - name: kv
capabilities: {kv: true}
`

func loadWithManifest(t *testing.T, h *host.Host, yaml string, extra ...func(*host.LoadOptions)) (*host.Module, error) {
	t.Helper()
	raw, m := manifest(t, yaml)
	opts := host.LoadOptions{Manifest: m, ManifestBytes: raw}
	for _, f := range extra {
		f(&opts)
	}
	return h.Load(context.Background(), testwasm.BuildGo(t, "./testdata/goguest", true), opts)
}

func auditEvents(t *testing.T, h *host.Host, f audit.Filter) []audit.Event {
	t.Helper()
	ev, err := host.AuditOf(h).Query(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestRolesAndPermissions: a principal without the required role or
// permission is refused, and the refusal is in the audit trail under the
// invocation's correlation id, with the rule that decided it.
func TestRolesAndPermissions(t *testing.T) {
	t.Parallel()
	h := policyHost(t, baseProfile)
	m, err := loadWithManifest(t, h, guestManifest)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		action string
		roles  []string
		denied string
	}{
		{"echo", nil, ""},
		{"admin-echo", []string{"user"}, "requires one of roles [admin]"},
		{"admin-echo", []string{"admin"}, ""},
		{"report", []string{"user"}, "reports.read"},
		{"report", []string{"auditor"}, ""},
	}
	for i, tt := range tests {
		corr := "corr-roles-" + string(rune('a'+i))
		res, err := m.Invoke(context.Background(), host.Request{Action: tt.action, Input: []byte("x"), CorrelationID: corr,
			Principal: policy.Principal{User: "ann", Org: "acme", Roles: tt.roles}})
		if tt.denied == "" {
			if err != nil || string(res.Output) != "x" {
				t.Fatalf("%s with %v: %q, %v", tt.action, tt.roles, res.Output, err)
			}
			continue
		}
		var de *policy.DeniedError
		if !errors.Is(err, host.ErrDenied) || !errors.As(err, &de) || !strings.Contains(err.Error(), tt.denied) {
			t.Fatalf("%s with %v: got %v, want a denial mentioning %q", tt.action, tt.roles, err, tt.denied)
		}
		ev := auditEvents(t, h, audit.Filter{CorrelationID: corr})
		if len(ev) != 1 || ev[0].Decision != audit.Deny || ev[0].Action != tt.action || ev[0].Rule == "" || ev[0].User != "ann" {
			t.Fatalf("audit for %s: %+v", corr, ev)
		}
	}
}

// TestConfirmation: a confirm-required action runs only after a valid
// confirmation, and only once; another principal's, a replayed and an
// expired token are refused.
func TestConfirmation(t *testing.T) {
	t.Parallel()
	h := policyHost(t, baseProfile+"confirm_ttl: 300ms\n")
	m, err := loadWithManifest(t, h, guestManifest)
	if err != nil {
		t.Fatal(err)
	}
	ann := policy.Principal{User: "ann", Org: "acme"}
	ask := func() *host.ConfirmationRequest {
		_, err := m.Invoke(context.Background(), host.Request{Action: "risky", Input: []byte("launch"), Principal: ann})
		var he *host.Error
		if !errors.As(err, &he) || he.Code != abi.CodeConfirmationRequired || he.Confirmation == nil || he.Confirmation.Token == "" {
			t.Fatalf("want a confirmation request, got %v", err)
		}
		return he.Confirmation
	}
	confirm := func(token string, who policy.Principal) (string, error) {
		res, err := m.Confirm(context.Background(), host.ConfirmRequest{Token: token, Principal: who})
		return string(res.Output), err
	}
	c := ask()
	if _, err := confirm(c.Token, policy.Principal{User: "bob", Org: "globex"}); !errors.Is(err, host.ErrDenied) || !strings.Contains(err.Error(), "another principal") {
		t.Fatalf("other principal: %v", err)
	}
	if out, err := confirm(c.Token, ann); err != nil || out != "launch" {
		t.Fatalf("confirm: %q, %v", out, err)
	}
	if _, err := confirm(c.Token, ann); !errors.Is(err, host.ErrDenied) || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("replay: %v", err)
	}
	if _, err := confirm("not-a-token", ann); !errors.Is(err, host.ErrDenied) {
		t.Fatalf("unknown token: %v", err)
	}
	c2 := ask()
	time.Sleep(400 * time.Millisecond)
	if _, err := confirm(c2.Token, ann); !errors.Is(err, host.ErrDenied) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired: %v", err)
	}
	ev := auditEvents(t, h, audit.Filter{Module: "goguest", Kind: audit.KindConfirmation})
	var allows, denies int
	for _, e := range ev {
		if e.Decision == audit.Allow {
			allows++
		} else {
			denies++
		}
	}
	if allows != 1 || denies < 5 { // 2 requests + other principal + replay + unknown + expired
		t.Fatalf("confirmation audit: %d allows, %d denies: %+v", allows, denies, ev)
	}
}

// TestSensitiveOp: an op the profile marks sensitive is refused in an
// unconfirmed invocation, which then asks for a confirmation; the confirmed
// run performs it.
func TestSensitiveOp(t *testing.T) {
	t.Parallel()
	h := policyHost(t, baseProfile+"sensitive_ops: [kv.delete]\n")
	m, err := loadWithManifest(t, h, guestManifest)
	if err != nil {
		t.Fatal(err)
	}
	ann := policy.Principal{User: "ann", Org: "acme"}
	kv := func(cmd string) (string, error) {
		res, err := m.Invoke(context.Background(), host.Request{Action: "kv", Input: []byte(cmd), Principal: ann})
		return string(res.Output), err
	}
	if _, err := kv("put doomed 1"); err != nil {
		t.Fatal(err)
	}
	_, err = kv("del doomed")
	var he *host.Error
	if !errors.As(err, &he) || he.Confirmation == nil || !strings.Contains(he.Confirmation.Summary, "kv.delete") {
		t.Fatalf("want a confirmation for kv.delete, got %v", err)
	}
	if got, _ := kv("get doomed"); got != "1" {
		t.Fatalf("the key went before confirmation: %q", got)
	}
	res, err := m.Confirm(context.Background(), host.ConfirmRequest{Token: he.Confirmation.Token, Principal: ann})
	if err != nil || string(res.Output) != "deleted" {
		t.Fatalf("confirmed delete: %q, %v", res.Output, err)
	}
}

// TestGrants: a capability the manifest does not request is denied at the
// op, and audited; a request the profile does not grant refuses the load
// (on_ungranted: refuse) or is denied at call time (deny_at_call).
func TestGrants(t *testing.T) {
	t.Parallel()
	h := policyHost(t, baseProfile)
	noKV := strings.Replace(guestManifest, "capabilities: {kv: true}", "", 1)
	m, err := loadWithManifest(t, h, noKV)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Invoke(context.Background(), host.Request{Action: "kv", Input: []byte("get x"), Principal: ann, CorrelationID: "corr-nokv"})
	if abi.CodeOf(err) != abi.CodeDenied {
		t.Fatalf("kv without the capability: %v", err)
	}
	ev := auditEvents(t, h, audit.Filter{CorrelationID: "corr-nokv", Decision: audit.Deny})
	if len(ev) != 1 || ev[0].Op != "kv.get" {
		t.Fatalf("op denial audit: %+v", ev)
	}

	wantsHTTP := strings.Replace(guestManifest, "capabilities: {kv: true}", "capabilities: {kv: true, http: [https://api.example.com:443]}", 1)
	if _, err := loadWithManifest(t, h, wantsHTTP); abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "https://api.example.com:443") {
		t.Fatalf("ungranted http: %v", err)
	}
	lenient := policyHost(t, baseProfile+"on_ungranted: deny_at_call\n")
	if _, err := loadWithManifest(t, lenient, wantsHTTP); err != nil {
		t.Fatalf("deny_at_call should load: %v", err)
	}
}

func TestLimitsFromManifest(t *testing.T) {
	t.Parallel()
	h := policyHost(t, baseProfile)
	limited := guestManifest + "limits: {calls_per_minute: 2, disk: 1KiB}\n"
	m, err := loadWithManifest(t, h, limited)
	if err != nil {
		t.Fatal(err)
	}
	call := func(org, cmd string) error {
		_, err := m.Invoke(context.Background(), host.Request{Action: "kv", Input: []byte(cmd), Principal: policy.Principal{User: "u", Org: org}})
		return err
	}
	if err := call("acme", "put big "+strings.Repeat("x", 2000)); abi.CodeOf(err) != abi.CodeTooLarge || !strings.Contains(err.Error(), "disk quota") {
		t.Fatalf("over the disk quota: %v", err)
	}
	if err := call("acme", "get x"); err != nil {
		t.Fatal(err)
	}
	if err := call("acme", "get x"); !errors.Is(err, host.ErrRateLimited) {
		t.Fatalf("third call in a minute: %v", err)
	}
	if err := call("globex", "get x"); err != nil {
		t.Fatalf("another org has its own budget: %v", err)
	}
}

// TestTrustedOnlyGrant: a grant marked trusted reaches only a module signed
// by a key the profile trusts; the same module unsigned, or signed by an
// unknown key, is refused at load because kv is not granted to it.
func TestTrustedOnlyGrant(t *testing.T) {
	t.Parallel()
	pubFile, privFile, err := policy.GenerateKey("")
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := policy.ParsePublicKey(string(pubFile))
	priv, err := policy.ParsePrivateKey(privFile, "")
	if err != nil {
		t.Fatal(err)
	}
	_, strangerFile, _ := policy.GenerateKey("")
	stranger, _ := policy.ParsePrivateKey(strangerFile, "")
	h := policyHost(t, `
name: trusting
trusted_keys:
  - name: release
    key: `+pub.String()+`
default:
  limits: {memory: 256MiB, timeout: 30s}
  trusted:
    capabilities: {kv: true}
`)
	raw, mf := manifest(t, "name: goguest"+goguestManifest)
	wasm := testwasm.BuildGo(t, "./testdata/goguest", true)
	sign := func(k policy.PrivateKey) []byte {
		sig, err := policy.Sign(k, policy.Signed{Name: "goguest", Module: wasm, Manifest: raw})
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	load := func(sig []byte) (*host.Module, error) {
		return h.Load(context.Background(), wasm, host.LoadOptions{Manifest: mf, ManifestBytes: raw, Signature: sig, CorrelationID: "corr-trust"})
	}
	for name, sig := range map[string][]byte{"unsigned": nil, "unknown key": sign(stranger)} {
		if _, err := load(sig); abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "kv") {
			t.Fatalf("%s: %v", name, err)
		}
	}
	m, err := load(sign(priv))
	if err != nil {
		t.Fatal(err)
	}
	if m.Evaluation().Mode != policy.ModeTrusted || m.Info().Signer != "release" {
		t.Fatalf("mode %s signer %q", m.Evaluation().Mode, m.Info().Signer)
	}
	if res, err := m.Invoke(context.Background(), host.Request{Action: "kv", Input: []byte("put a 1"), Principal: ann}); err != nil || string(res.Output) != "ok" {
		t.Fatalf("kv in trusted mode: %q, %v", res.Output, err)
	}
	ev := auditEvents(t, h, audit.Filter{CorrelationID: "corr-trust", Kind: audit.KindSignature, Decision: audit.Allow})
	if len(ev) != 2 || !strings.Contains(ev[1].Reason, "signed by trusted key release") {
		t.Fatalf("signature audit: %+v", ev)
	}
}
