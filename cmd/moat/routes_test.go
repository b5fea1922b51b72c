package main_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestServeRoutes: moat serve, the built binary, serves a module whose
// manifest has routes: a public GET as the service user, a signed GitHub
// webhook (its secret set through the admin API, sealed under
// $MOAT_SECRETS_KEY) and its replay refused, each call in the trail.
func TestServeRoutes(t *testing.T) {
	testenv.Slow(t, "moat serve and a Go plugin's upload: about 15 s")
	t.Parallel() // its own data dir and moat serve; no environment, no timing lock
	data := t.TempDir()
	create := moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin")
	key := strings.TrimSpace(create.stdout)
	if create.code != 0 {
		t.Fatalf("keys create: %+v", create)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	cmd := exec.Command(moatBin, "serve", "--data", data, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "MOAT_SECRETS_KEY="+base64.StdEncoding.EncodeToString(raw))
	var rest bytes.Buffer
	base := startServeCmd(t, cmd, &rest)

	req := func(method, path, key string, body io.Reader, headers ...string) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(method, base+path, body)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	manifest, _ := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "testdata/routeguest/moat.yaml"))
	body, bodyType := moduleForm(testwasm.BuildGo(t, "./testdata/routeguest", true), manifest)
	if code, out := req("POST", "/v1/modules", key, body, "Content-Type", bodyType); code != 201 {
		t.Fatalf("upload: %d %s", code, out)
	}
	if code, out := req("PUT", "/v1/admin/secrets/acme/gh-hook", key, strings.NewReader(`{"value": "gh-secret"}`)); code != 201 {
		t.Fatalf("secret: %d %s", code, out)
	}

	if code, out := req("GET", "/m/acme/routes/public/3", "", nil); code != 200 || !strings.Contains(out, `"user":"moat.service"`) || !strings.Contains(out, `"id":"3"`) {
		t.Errorf("public GET: %d %s", code, out)
	}
	payload := `{"zen":"Keep it logically awesome."}`
	m := hmac.New(sha256.New, []byte("gh-secret"))
	m.Write([]byte(payload))
	sig := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if code, out := req("POST", "/m/acme/routes/hooks/github", "", strings.NewReader(payload), "X-Hub-Signature-256", sig, "X-GitHub-Event", "ping"); code != 200 || !strings.Contains(out, `"event":"ping"`) {
		t.Errorf("webhook: %d %s", code, out)
	}
	if code, out := req("POST", "/m/acme/routes/hooks/github", "", strings.NewReader(payload), "X-Hub-Signature-256", sig); code != 409 {
		t.Errorf("replayed webhook: %d %s", code, out)
	}
	if code, out := req("GET", "/v1/audit?kind=route", key, nil); code != 200 || strings.Count(out, `"kind":"route"`) != 3 || !strings.Contains(out, `"reason":"a replay`) {
		t.Errorf("the trail: %d %s", code, out)
	}
	if t.Failed() {
		t.Logf("moat serve's log:\n%s", rest.String())
	}
}
