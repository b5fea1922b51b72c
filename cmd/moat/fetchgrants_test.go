package main_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// fetchPlugins are a plugin per kind whose action get fetches the URL in
// its input with http.fetch and answers "STATUS BODY": the files of its
// directory besides moat.yaml, and the manifest's lines that say its kind.
var fetchPlugins = []struct {
	lang  string // for langMissing
	kind  string // the manifest's language/kind lines
	files map[string]string
}{
	{"javascript", "language: javascript\nkind: moat\n", map[string]string{"main.js": `import * as moat from "./moat.js";
moat.action("get", (input) => {
  const r = moat.http.fetch(input.trim(), { timeoutMs: 5000 });
  return r.status + " " + r.text();
});
`}},
	{"python", "language: python\nkind: moat\n", map[string]string{"main.py": fetchPy}},
	{"python-native", "language: python\nkind: native\ncommand: [python3, main.py]\n", map[string]string{"main.py": fetchPy + "\nmoat.serve()\n"}},
	{"go", "module: fetch-go.wasm\nkind: moat\n", nil}, // examples/http-go, built below
}

const fetchPy = `import moat


@moat.action("get")
def get(inp):
    r = moat.http.fetch(inp.text.strip(), timeout=5)
    return f"{r.status} {r.text}"
`

// TestFetchGrantedEveryPath is issue 28's defects 1 and 2, followed as a
// newcomer meets them: a plugin in JavaScript, Python, python-native and
// Go, whose manifest names two loopback servers, fetches them under
// `moat run` with its default confinement and under `moat serve`, on four
// profiles; `moat policy check` gives the verdict that happened.
//
//   - grants, a profile naming http://127.0.0.1:GRANTED: the granted
//     server answers on both paths (moat run's Landlock layer opened its
//     port for every kind of plugin, not only compiled ones); the other
//     is denied on both with policy's reason, and policy check shows ✓
//     and ✗ for them.
//   - dev: both servers answer (the manifest names them, and dev's
//     manifest_addresses lets it); policy check shows ✓.
//   - wild, a profile granting "*" alone: both are denied on both paths,
//     with the reason and fix policy check shows (✗), and no message
//     suggests the grant the manifest already writes.
//   - minimal: policy check says REFUSED (exit 3); moat run and moat
//     deploy are refused at load with the same reason.
//
// Each server counts its requests: no denied fetch reached one.
func TestFetchGrantedEveryPath(t *testing.T) {
	testenv.Slow(t, "four grant shapes through every entry point in four languages")
	type server struct {
		url  string
		port string
		hits atomic.Int32
	}
	serve := func(body string) *server {
		s := &server{}
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			s.hits.Add(1)
			io.WriteString(w, body)
		}))
		t.Cleanup(ts.Close)
		s.url = ts.URL
		s.port = ts.URL[strings.LastIndexByte(ts.URL, ':')+1:]
		return s
	}
	granted, other := serve("granted"), serve("other")

	base := t.TempDir()
	grantsProfile := filepath.Join(base, "grants.yaml")
	writeFile(t, grantsProfile, "name: grants\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: [\""+granted.url+"\"]\n")
	wildProfile := filepath.Join(base, "wild.yaml")
	writeFile(t, wildProfile, "name: wild\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: {targets: [\"*\"], allow_any: true}\n")
	profiles := map[string]string{"grants": grantsProfile, "dev": "dev", "wild": wildProfile, "minimal": "minimal"}

	// The plugins.
	var plugins []string
	ready := map[string]string{} // plugin name -> why it cannot run here, or ""
	for _, p := range fetchPlugins {
		name := "fetch-" + p.lang
		plugins = append(plugins, name)
		if ready[name] = langMissing(p.lang); ready[name] != "" {
			continue
		}
		dir := filepath.Join(base, "plugins", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, src := range p.files {
			writeFile(t, filepath.Join(dir, f), src)
		}
		if p.lang == "go" {
			if err := os.WriteFile(filepath.Join(dir, name+".wasm"), testwasm.BuildGo(t, "./examples/http-go", true), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, filepath.Join(dir, "moat.yaml"), "name: "+name+"\nversion: 0.1.0\n"+p.kind+
			"actions: [{name: get, timeout: 30s}]\ncapabilities:\n  http: [\""+granted.url+"\", \""+other.url+"\"]\n")
	}
	pluginDir := func(name string) string { return filepath.Join(base, "plugins", name) }

	// One server, an organization per profile.
	data := t.TempDir()
	cfg := filepath.Join(base, "moat-server.yaml")
	writeFile(t, cfg, fmt.Sprintf("profile: %s\nprofiles: {dev: dev, wild: %s, minimal: minimal}\nmodules: {allow_native: true}\n", grantsProfile, wildProfile))
	keys := map[string]string{}
	for org := range profiles {
		r := moat(t, "", "keys", "create", "--data", data, "--org", org, "--user", "ann", "--role", "admin")
		if keys[org] = strings.TrimSpace(r.stdout); r.code != 0 || keys[org] == "" {
			t.Fatalf("keys create for %s: %+v", org, r)
		}
	}
	var rest bytes.Buffer
	_, srv := startServe(t, &rest, "--config", cfg, "--data", data, "--listen", "127.0.0.1:0")

	notGranted := func(s *server) string {
		return "http " + s.url + " was requested but not granted: no granted target covers it (granted: " + granted.url + ")"
	}
	wildReason := func(s *server) string {
		return "http http://127.0.0.1:" + s.port + " was requested but not granted: 127.0.0.1 is a loopback address; a grant reaches such an address only by naming it, and no grant of profile wild does (it covers the target with a wildcard or name); grant http://127.0.0.1:" +
			s.port + " in the profile, or, on a developer's own machine, set manifest_addresses: true in it (the dev profile does)"
	}
	type fetch struct {
		to   *server
		want string // the output, or a reason the denial holds
	}
	for _, tc := range []struct {
		org     string
		check   []string // what policy check prints
		noCheck []string // what it must not print
		code    int      // policy check's exit status
		fetches []fetch
		refused string // the load's refusal, for a module that must not load
	}{
		{org: "grants", check: []string{"http " + granted.url + " ✓ granted", "http " + other.url + " ✗ refused (profile grants: default grant): no granted target covers it", "verdict: LOADS; 1 request will be denied at call time"},
			fetches: []fetch{{granted, "200 granted"}, {other, notGranted(other)}}},
		{org: "dev", check: []string{"http " + granted.url + " ✓ granted", "http " + other.url + " ✓ granted", "verdict: LOADS"},
			fetches: []fetch{{granted, "200 granted"}, {other, "200 other"}}},
		{org: "wild", check: []string{"✗ refused (profile wild: default grant): 127.0.0.1 is a loopback address", "set manifest_addresses: true"},
			noCheck: []string{"✓ granted"},
			fetches: []fetch{{granted, wildReason(granted)}}},
		{org: "minimal", code: 3, check: []string{"verdict: REFUSED at load"}, refused: "not granted by profile minimal"},
	} {
		for _, name := range plugins {
			t.Run(tc.org+"/"+name, func(t *testing.T) {
				testenv.Require(t, ready[name])
				dir := pluginDir(name)
				check := moat(t, "", "policy", "check", dir, "--profile", profiles[tc.org])
				if check.code != tc.code {
					t.Errorf("policy check: exit %d, want %d\n%s%s", check.code, tc.code, check.stdout, check.stderr)
				}
				// The report's columns are padded: compare with runs of
				// spaces made one.
				report := strings.Join(strings.Fields(check.stdout), " ")
				for _, w := range tc.check {
					if !strings.Contains(report, w) {
						t.Errorf("policy check does not say %q:\n%s", w, check.stdout)
					}
				}
				for _, w := range tc.noCheck {
					if strings.Contains(report, w) {
						t.Errorf("policy check says %q:\n%s", w, check.stdout)
					}
				}

				deploy := moatEnvIn(t, filepath.Dir(dir), []string{"MOAT_API_KEY=" + keys[tc.org]}, "deploy", name, "--server", srv)
				if tc.refused != "" {
					r := moat(t, "", "run", "--data", t.TempDir(), "--profile", profiles[tc.org], dir, "get", "--input", granted.url)
					if r.code == 0 || !strings.Contains(r.stderr, tc.refused) {
						t.Errorf("moat run: exit %d, stdout %q, stderr %q; want a refusal naming %q", r.code, r.stdout, r.stderr, tc.refused)
					}
					if deploy.code == 0 || !strings.Contains(deploy.stdout+deploy.stderr, tc.refused) {
						t.Errorf("moat deploy: %+v; want a refusal naming %q", deploy, tc.refused)
					}
					return
				}
				if deploy.code != 0 {
					t.Fatalf("moat deploy: %+v\n%s", deploy, rest.String())
				}
				for _, f := range tc.fetches {
					before := f.to.hits.Load()
					run := moat(t, "", "run", "--data", t.TempDir(), "--profile", profiles[tc.org], dir, "get", "--input", f.to.url)
					req, _ := http.NewRequest("POST", srv+"/v1/modules/"+name+"/actions/get", strings.NewReader(f.to.url))
					req.Header.Set("Authorization", "Bearer "+keys[tc.org])
					res, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if strings.HasPrefix(f.want, "200 ") {
						if run.code != 0 || run.stdout != f.want {
							t.Errorf("moat run fetching %s: exit %d, stdout %q, stderr %q; want %q", f.to.url, run.code, run.stdout, run.stderr, f.want)
						}
						if res.StatusCode != 200 || string(body) != f.want {
							t.Errorf("moat serve fetching %s: %s %q; want %q", f.to.url, res.Status, body, f.want)
						}
						if n := f.to.hits.Load() - before; n != 2 {
							t.Errorf("the server got %d requests, want 2 (moat run's and moat serve's)", n)
						}
						continue
					}
					if run.code != 3 || !strings.Contains(run.stderr, f.want) {
						t.Errorf("moat run fetching %s: exit %d, stdout %q, stderr %q; want denied: %s", f.to.url, run.code, run.stdout, run.stderr, f.want)
					}
					if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), f.want) {
						t.Errorf("moat serve fetching %s: %s %s; want 403 denied: %s", f.to.url, res.Status, body, f.want)
					}
					for _, out := range []string{run.stderr, string(body)} {
						if strings.Contains(out, "a grant of "+f.to.url) || strings.Contains(out, "permission denied") {
							t.Errorf("the denial suggests the grant the manifest writes, or comes from the kernel layer: %s", out)
						}
					}
					if n := f.to.hits.Load() - before; n != 0 {
						t.Errorf("a denied fetch reached the server %d times", n)
					}
				}
			})
		}
	}
}
