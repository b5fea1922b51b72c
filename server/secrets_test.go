package server_test

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

func secretsKey(t testing.TB) *secrets.Key {
	t.Helper()
	raw := make([]byte, secrets.KeySize)
	rand.Read(raw)
	k, err := secrets.ParseKey(base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestAdminSecrets: the admin routes set, list and delete an
// organization's secrets for a key of that organization holding
// secret.manage; another organization's path, a key without the
// permission, hostile names and bodies are refused, and no response,
// problem or audit event ever holds a value.
func TestAdminSecrets(t *testing.T) {
	ctx := context.Background()
	t.Run("no key configured", func(t *testing.T) {
		ts := start(t, "", nil)
		admin := ts.key(t, "acme", "ann", "admin")
		for _, r := range []response{
			ts.do(t, "PUT", "/v1/admin/secrets/acme/github", admin, strings.NewReader(`{"value": "a long enough value"}`)),
			ts.do(t, "GET", "/v1/admin/secrets/acme", admin, nil),
			ts.do(t, "DELETE", "/v1/admin/secrets/acme/github", admin, nil),
		} {
			if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "MOAT_SECRETS_KEY") || !strings.Contains(string(r.body), "secrets_key_file") {
				t.Errorf("%d %s; want 503 saying how to configure a key", r.status, r.body)
			}
		}
	})

	key := secretsKey(t)
	ts := start(t, "", func(c *server.Config) { c.SecretsKey = key })
	admin := ts.key(t, "acme", "ann", "admin")
	user := ts.key(t, "acme", "bob", "dev")
	other := ts.key(t, "globex", "eve", "admin")
	const value = "ghp_admin_route_value_0001"
	put := func(k, path, body string) response {
		return ts.do(t, "PUT", path, k, strings.NewReader(body), "Content-Type", "application/json")
	}
	body := func(v string) string { b, _ := json.Marshal(map[string]string{"value": v}); return string(b) }

	if r := put(admin, "/v1/admin/secrets/acme/github", body(value)); r.status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	if r := put(admin, "/v1/admin/secrets/acme/github", body(value+"2")); r.status != http.StatusOK || r.json(t)["created"] != false {
		t.Fatalf("PUT again: %d %s", r.status, r.body)
	}
	got, err := secrets.NewVault(ts.Store(), key, nil).Secret(ctx, "acme", "github")
	if err != nil || string(got) != value+"2" {
		t.Fatalf("the stored value: %q, %v", got, err)
	}
	cases := []struct {
		name   string
		res    response
		status int
		want   string
	}{
		{"another organization's path", put(other, "/v1/admin/secrets/acme/github", body("evil-overwrite-value")), 403, "manages the secrets of organization globex only"},
		{"another organization's list", ts.do(t, "GET", "/v1/admin/secrets/acme", other, nil), 403, "organization globex only"},
		{"another organization's delete", ts.do(t, "DELETE", "/v1/admin/secrets/acme/github", other, nil), 403, "organization globex only"},
		{"no permission", put(user, "/v1/admin/secrets/acme/github", body("bob-overwrite-value")), 403, "secret.manage"},
		{"no key", put("", "/v1/admin/secrets/acme/github", body(value)), 401, "API key"},
		{"a name of SQL", put(admin, "/v1/admin/secrets/acme/x'%3B%20DROP%20TABLE%20secrets", body(value)), 400, "secret name"},
		{"a name with a dot first", put(admin, "/v1/admin/secrets/acme/..", body(value)), 0, ""},
		{"a short value", put(admin, "/v1/admin/secrets/acme/short", body("short")), 400, "the least is 8"},
		{"a value with CRLF", put(admin, "/v1/admin/secrets/acme/crlf", body("line one\r\nX-Injected: 1")), 400, "control byte"},
		{"not JSON", put(admin, "/v1/admin/secrets/acme/raw", "ghp_raw_body_not_json"), 400, `must be JSON`},
		{"a huge body", put(admin, "/v1/admin/secrets/acme/huge", body(strings.Repeat("v", 1<<20))), 413, "a secret is at most"},
		{"delete of nothing", ts.do(t, "DELETE", "/v1/admin/secrets/acme/nosuch", admin, nil), 404, "has no secret nosuch"},
	}
	for _, c := range cases {
		if c.status != 0 && (c.res.status != c.status || !strings.Contains(string(c.res.body), c.want)) {
			t.Errorf("%s: %d %s; want %d containing %q", c.name, c.res.status, c.res.body, c.status, c.want)
		}
		if c.status == 0 && c.res.status < 400 {
			t.Errorf("%s: %d %s; want a refusal", c.name, c.res.status, c.res.body)
		}
		for _, v := range []string{value, "evil-overwrite", "bob-overwrite", "ghp_raw_body", "X-Injected"} {
			if strings.Contains(string(c.res.body), v) {
				t.Errorf("%s: the response repeats a value: %s", c.name, c.res.body)
			}
		}
	}
	if got, _ := secrets.NewVault(ts.Store(), key, nil).Secret(ctx, "acme", "github"); string(got) != value+"2" {
		t.Errorf("a refused request changed the secret")
	}
	list := ts.do(t, "GET", "/v1/admin/secrets/acme", admin, nil)
	var l struct {
		Secrets []map[string]any `json:"secrets"`
	}
	if list.status != 200 || json.Unmarshal(list.body, &l) != nil || len(l.Secrets) != 1 || l.Secrets[0]["name"] != "github" ||
		l.Secrets[0]["updated_by"] != "api:ann@acme" || strings.Contains(string(list.body), "ghp_") {
		t.Fatalf("GET: %d %s", list.status, list.body)
	}
	if r := ts.do(t, "DELETE", "/v1/admin/secrets/acme/github", admin, nil); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	ts.do(t, "GET", "/v1/audit?limit=1", admin, nil) // flushes every host's trail
	evs, err := ts.Store().AuditQuery(ctx, store.AuditFilter{Org: "acme", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var changes, denials int
	for _, e := range evs {
		b, _ := json.Marshal(e)
		for _, v := range []string{value, "evil-overwrite", "bob-overwrite", "ghp_raw_body"} {
			if strings.Contains(string(b), v) {
				t.Errorf("an audit event holds a value: %s", b)
			}
		}
		if e.Kind == "secret" {
			changes++
		}
		if e.Decision == "deny" && e.Attrs["api"] == server.PermSecretManage {
			denials++
		}
	}
	if changes != 3 || denials != 1 {
		t.Errorf("%d secret changes and %d denials in acme's audit trail; want 3 (set, set, delete) and 1 (bob)", changes, denials)
	}
	if evs, _ := ts.Store().AuditQuery(ctx, store.AuditFilter{Org: "globex", Decision: "deny", Limit: 100}); len(evs) != 3 {
		t.Errorf("%d denials of globex's key audited, want 3", len(evs))
	}
}

// TestServeInjectsSecrets: through moat serve end to end: an
// organization's admin sets a secret over the admin route, uploads a
// module the profile grants an injecting target, and invokes it: the API
// sees the organization's value, the caller gets [secret]; another
// organization's call uses its own (here missing) secret.
func TestServeInjectsSecrets(t *testing.T) {
	const token = "acme-api-token-0123456789"
	var saw atomic.Value
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw.Store(r.Header.Get("X-Api-Key"))
		if strings.HasSuffix(r.URL.Path, "/ce") {
			// gzip behind identity: the client does not decode it.
			w.Header()["Content-Encoding"] = []string{"identity", "gzip"}
			zw := gzip.NewWriter(w)
			fmt.Fprintf(zw, "key=%s", r.Header.Get("X-Api-Key"))
			zw.Close()
			return
		}
		fmt.Fprintf(w, "key=%s", r.Header.Get("X-Api-Key"))
	}))
	defer api.Close()
	prof := filepath.Join(t.TempDir(), "profile.yaml")
	os.WriteFile(prof, []byte("name: inject\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http:\n      - url: "+api.URL+"/v1/\n        headers: {X-Api-Key: \"${secret:api}\"}\n"), 0o644)
	ts := start(t, "", func(c *server.Config) { c.SecretsKey, c.Profile = secretsKey(t), prof })
	admin := ts.key(t, "acme", "ann", "admin")
	other := ts.key(t, "globex", "gus", "admin")
	if r := ts.do(t, "PUT", "/v1/admin/secrets/acme/api", admin, strings.NewReader(`{"value": "`+token+`"}`)); r.status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	manifest := []byte("name: fetcher\nversion: 1.0.0\nactions: [{name: call}]\ncapabilities:\n  http: [\"" + api.URL + "/v1/\"]\n")
	wasm := testwasm.BuildGo(t, "./testdata/goguest", true)
	for _, k := range []string{admin, other} {
		if r := ts.upload(t, k, wasm, manifest); r.status != http.StatusCreated {
			t.Fatalf("upload: %d %s", r.status, r.body)
		}
	}
	input := `http.fetch {"url": "` + api.URL + `/v1/things"}`
	r := ts.do(t, "POST", "/v1/modules/fetcher/actions/call", admin, strings.NewReader(input))
	var out struct {
		Status int    `json:"status"`
		Body   []byte `json:"body"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &out) != nil || string(out.Body) != "key=[secret]" || saw.Load() != token {
		t.Fatalf("invoke: %d %s; the API saw %q", r.status, r.body, saw.Load())
	}
	// Past the prefix by a path a server that decodes twice reads as
	// /v1/../admin: refused, and nothing is sent.
	saw.Store("unsent")
	r = ts.do(t, "POST", "/v1/modules/fetcher/actions/call", admin, strings.NewReader(`http.fetch {"url": "`+api.URL+`/v1/%252e%252e/admin"}`))
	if r.status == http.StatusOK || !strings.Contains(string(r.body), "encoded %") || saw.Load() != "unsent" {
		t.Errorf("a double-encoded dot segment: %d %s; the API saw %q", r.status, r.body, saw.Load())
	}
	// A gzip body behind an identity Content-Encoding: refused unread.
	r = ts.do(t, "POST", "/v1/modules/fetcher/actions/call", admin, strings.NewReader(`http.fetch {"url": "`+api.URL+`/v1/ce"}`))
	if r.status == http.StatusOK || !strings.Contains(string(r.body), "the response body is encoded") || strings.Contains(string(r.body), token) {
		t.Errorf("identity then gzip: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/v1/modules/fetcher/actions/call", other, strings.NewReader(input))
	if r.status == http.StatusOK || !strings.Contains(string(r.body), "organization globex has no secret api") {
		t.Errorf("globex's call: %d %s", r.status, r.body)
	}
	a := ts.do(t, "GET", "/v1/audit?kind=op&limit=100", admin, nil)
	if a.status != 200 || !strings.Contains(string(a.body), `"injected":"X-Api-Key"`) || strings.Contains(string(a.body), token) {
		t.Errorf("audit: %d %s", a.status, a.body)
	}
}
