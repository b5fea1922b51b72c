package main_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestServeResidentImagePerOrganization: three organizations deploy the
// same Python main.py to one moat serve (a host per organization, one
// cache directory). Its top level reads every granted config it can find
// and makes a random key. Each organization's calls must see only what its
// own grants hold and a key of its own, never another's, whoever deployed
// first; and an organization whose grants have another shape (none) must
// deploy and serve, where it had failed with "cannot open /dev/moat/ops:
// Bad file descriptor" (the first organization's image, restored under
// other mounts).
func TestServeResidentImagePerOrganization(t *testing.T) {
	testenv.Slow(t, "three organizations' Python images made through moat serve; languages/python TestResidentImageStaysWithItsOrganization holds the same isolation on the host")
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	testenv.Require(t, langMissing("python"))
	base := t.TempDir()
	dirs := map[string]string{}
	for _, org := range []string{"a", "b"} {
		dirs[org] = filepath.Join(base, org)
		if err := os.Mkdir(dirs[org], 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dirs[org], "config"), "password-of-"+org)
	}
	profile := filepath.Join(base, "profile.yaml")
	writeFile(t, profile, "name: tenants\ndefault:\n  capabilities:\n    filesystem: ["+dirs["a"]+", "+dirs["b"]+"]\n")
	data := t.TempDir()
	keys := map[string]string{}
	for _, org := range []string{"a", "b", "c"} {
		r := moat(t, "", "keys", "create", "--data", data, "--org", "org-"+org, "--user", "admin-"+org, "--role", "admin")
		if keys[org] = strings.TrimSpace(r.stdout); r.code != 0 || keys[org] == "" {
			t.Fatalf("keys create for org-%s: %+v", org, r)
		}
	}
	var rest bytes.Buffer
	_, url := startServe(t, &rest, "--data", data, "--listen", "127.0.0.1:0", "--profile", profile)

	main := `import json, os
import moat

SEEN = {}
for org in ("a", "b"):
    try:
        with open("` + base + `/" + org + "/config") as f:
            SEEN[org] = f.read()
    except OSError as e:
        SEEN[org] = type(e).__name__

KEY = os.urandom(16).hex()


@moat.action("seen")
def seen(inp):
    return json.dumps(dict(SEEN, key=KEY))
`
	grants := map[string]string{"a": "[" + dirs["a"] + "]", "b": "[" + dirs["b"] + "]", "c": "[]"}
	work := t.TempDir()
	seen := map[string]map[string]string{}
	for _, org := range []string{"a", "b", "c"} {
		dir := filepath.Join(work, org, "tenant")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "main.py"), main)
		writeFile(t, filepath.Join(dir, "moat.yaml"), "name: tenant\nversion: 0.1.0\nlanguage: python\nkind: moat\ncapabilities:\n  filesystem: "+
			grants[org]+"\nactions:\n  - {name: seen, timeout: 10s}\n")
		if r := moatEnvIn(t, filepath.Dir(dir), []string{"MOAT_API_KEY=" + keys[org]}, "deploy", "tenant", "--server", url); r.code != 0 {
			t.Fatalf("org-%s's deploy: %+v\n%s", org, r, rest.String())
		}
		req, _ := http.NewRequest("POST", url+"/v1/modules/tenant/actions/seen", nil)
		req.Header.Set("Authorization", "Bearer "+keys[org])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var got map[string]string
		if res.StatusCode != 200 || json.Unmarshal(body, &got) != nil {
			t.Fatalf("org-%s's call: %s %s", org, res.Status, body)
		}
		seen[org] = got
	}
	for _, tt := range []struct{ org, a, b string }{
		{"a", "password-of-a", "FileNotFoundError"},
		{"b", "FileNotFoundError", "password-of-b"},
		{"c", "FileNotFoundError", "FileNotFoundError"},
	} {
		if got := seen[tt.org]; got["a"] != tt.a || got["b"] != tt.b {
			t.Errorf("org-%s's top level saw a's config as %q and b's as %q; want %q and %q", tt.org, got["a"], got["b"], tt.a, tt.b)
		}
	}
	if ka, kb, kc := seen["a"]["key"], seen["b"]["key"], seen["c"]["key"]; ka == "" || ka == kb || ka == kc || kb == kc {
		t.Errorf("the organizations' top-level keys are %q, %q and %q: one organization's instances hold another's", ka, kb, kc)
	}
}
