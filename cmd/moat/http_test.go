package main_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestHTTPExample follows examples/http-go/README.md against a loopback
// API instead of GitHub's: a secret set with moat secrets, a profile that
// grants the plugin a path and injects the secret, moat policy check
// naming the header and the secret but no value, and moat run fetching
// with it: the API sees the token, the plugin's output holds [secret],
// another path is denied, another organization lacks the secret.
func TestHTTPExample(t *testing.T) {
	const token = "ghp_example_token_0123456789"
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"message":"Bad credentials"}`)
			return
		}
		fmt.Fprintf(w, `{"login":"ann","you_sent":%q}`, r.Header.Get("Authorization"))
	}))
	defer api.Close()
	dir := writeModule(t, "http-go", testwasm.BuildGo(t, "./examples/http-go", true))
	os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte("name: http-go\nversion: 0.1.0\nactions: [{name: get}]\ncapabilities:\n  http: [\""+api.URL+"/user\"]\n"), 0o644)
	prof := filepath.Join(t.TempDir(), "profile.yaml")
	os.WriteFile(prof, []byte("name: http-example\nmodules:\n  http-go:\n    capabilities:\n      http:\n        - url: "+api.URL+"/user\n          headers:\n            Authorization: \"Bearer ${secret:github}\"\n"), 0o644)
	data := t.TempDir()
	raw := make([]byte, 32)
	rand.Read(raw)
	t.Setenv("MOAT_SECRETS_KEY", base64.StdEncoding.EncodeToString(raw))

	if r := moat(t, token, "secrets", "set", "--data", data, "--org", "acme", "github"); r.code != 0 {
		t.Fatalf("secrets set: %d %s", r.code, r.stderr)
	}
	check := moat(t, "", "policy", "check", dir, "--profile", prof)
	if check.code != 0 || !strings.Contains(check.stdout, "the host injects Authorization (secret github)") || strings.Contains(check.stdout, "Bearer") {
		t.Fatalf("policy check: %d\n%s%s", check.code, check.stdout, check.stderr)
	}
	run := func(org, url string) result {
		return moat(t, "", "run", "--data", data, "--profile", prof, dir, "get", "--org", org, "--input", url)
	}
	if r := run("acme", api.URL+"/user"); r.code != 0 || r.stdout != `200 {"login":"ann","you_sent":"Bearer [secret]"}` || strings.Contains(r.stdout+r.stderr, token) {
		t.Fatalf("run: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := run("acme", api.URL+"/admin"); r.code != 3 || !strings.Contains(r.stderr, "the path /admin is not under the granted prefix") {
		t.Errorf("another path: %d %s", r.code, r.stderr)
	}
	if r := run("globex", api.URL+"/user"); r.code != 3 || !strings.Contains(r.stderr, "organization globex has no secret github") {
		t.Errorf("another organization: %d %s", r.code, r.stderr)
	}
	audit := moat(t, "", "audit", "--data", data, "--json")
	if audit.code != 0 || !strings.Contains(audit.stdout, `"injected":"Authorization"`) || strings.Contains(audit.stdout, token) {
		t.Errorf("audit: %d %s %s", audit.code, audit.stdout, audit.stderr)
	}
}
