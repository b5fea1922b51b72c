package main_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/ai/aitest"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// matrixPlugins are the acceptance matrix's plugins, one per language
// with an SDK: testdata/matrix/<dir> (see its README), with the lines of
// moat.yaml that say the language and kind. Each needs what langMissing
// says for lang.
var matrixPlugins = []struct {
	lang  string // langMissing's name
	dir   string // under testdata/matrix
	kind  string // moat.yaml's language and kind lines
	extra string // appended to the copied main file (python-native's serve)
}{
	{lang: "javascript", dir: "javascript", kind: "language: javascript\nkind: moat\n"},
	{lang: "python", dir: "python", kind: "language: python\nkind: moat\n"},
	{lang: "python-native", dir: "python", kind: "language: python\nkind: native\ncommand: [python3, main.py]\n", extra: "\nmoat.serve()\n"},
	{lang: "ruby", dir: "ruby", kind: "language: ruby\nkind: moat\n"},
	{lang: "go", dir: "go", kind: "language: go\nkind: moat\n"},
	{lang: "c", dir: "c", kind: "language: c\nkind: moat\n"},
	{lang: "cpp", dir: "cpp", kind: "language: cpp\nkind: moat\n"},
	{lang: "rust", dir: "rust", kind: "language: rust\nkind: moat\n"},
	{lang: "assemblyscript", dir: "assemblyscript", kind: "language: assemblyscript\nkind: moat\n"},
}

// matrixFamilies are the op families of action all, in its order, and
// the capability each needs ("" for none): policy check's line of it
// starts with that word.
var matrixFamilies = []struct{ family, capability string }{
	{"log", ""}, {"config", ""}, {"kv", "kv"}, {"db", "db"}, {"knowledge", "knowledge"}, {"tasks", "tasks"},
	{"http", "http"}, {"media", "media"}, {"ai", "ai"}, {"files", "filesystem"}, {"caller", ""},
}

// matrixPDF is the document action all keeps with media.put: the
// smallest bytes the host takes for application/pdf, and text, so every
// SDK carries it as a config value.
const matrixPDF = "%PDF-1.4\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n"

// TestAcceptanceMatrix is issue 28's acceptance matrix: the built moat
// binary, driven as a user drives it, runs the same plugin in every
// language with an SDK through every entry point, and each op family
// does the same thing on each:
//
//   - moat run with its default confinement, on the profile granting
//     every family (SQLite, a fresh data directory per language);
//   - moat serve on PostgreSQL: the plugin deployed through replica a and
//     invoked there, then invoked through replica b, which reads what a
//     wrote (kv, db and knowledge are stateful: b's call sees a's);
//   - the same on a profile granting nothing (on_ungranted:
//     deny_at_call): every family that needs a grant is denied, with the
//     same reason under moat run and moat serve, and with an audit event
//     of the denial on both;
//   - moat policy check of the plugin on each profile shows ✓ for the
//     families that worked and ✗ for those that were denied.
//
// http.fetch reaches a loopback server through a grant that injects an
// operator secret (the server sees it; the guest sees [secret]); ai calls
// the OpenAI-compatible test server; files reads a granted directory.
func TestAcceptanceMatrix(t *testing.T) {
	testenv.Slow(t, "every language through the binary and two replicas on PostgreSQL; TestRunInterpretedPlugin and the serve tests keep the path")
	start := time.Now()
	const token = "matrix-secret-0123456789"
	var apiSaw atomic.Value
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiSaw.Store(r.Header.Get("X-Api-Key"))
		io.WriteString(w, "key="+r.Header.Get("X-Api-Key"))
	}))
	t.Cleanup(target.Close)
	ai := aitest.New(t, "matrix-ai-key")
	t.Setenv("MATRIX_AI_KEY", ai.Key)
	raw := make([]byte, 32)
	rand.Read(raw)
	t.Setenv("MOAT_SECRETS_KEY", base64.StdEncoding.EncodeToString(raw))

	base := t.TempDir()
	// The granted directory is not under /tmp or /var/tmp: a native
	// worker gets fresh ones of its own (and a grant of them is refused).
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	files, err := os.MkdirTemp(home, "moat-matrix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(files) })
	os.Chmod(files, 0o755)
	writeFile(t, filepath.Join(files, "in.txt"), "matrix file\n")
	caps := "  kv: true\n  db: [notes]\n  knowledge: [docs]\n  tasks: true\n  media: true\n  ai: [small-chat]\n  filesystem: [" + files + "]\n"
	granted := filepath.Join(base, "granted.yaml")
	writeFile(t, granted, "name: granted\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n"+strings.ReplaceAll(caps, "  ", "    ")+
		"    http:\n      - url: "+target.URL+"/v1/\n        headers: {X-Api-Key: \"${secret:api}\"}\n")
	denied := filepath.Join(base, "denied.yaml")
	writeFile(t, denied, "name: denied\non_ungranted: deny_at_call\ndefault:\n  capabilities: {}\n")
	aiConf := "ai:\n  providers:\n    test: {base_url: \"" + ai.URL + "\", api_key_env: MATRIX_AI_KEY}\n" +
		"  models:\n    small-chat: {provider: test, model: tiny, kind: chat}\n"
	// moat run reads the ai: section (and nothing else: --data and
	// --profile win) from a server configuration.
	runConf := filepath.Join(base, "run.yaml")
	writeFile(t, runConf, aiConf)

	// The plugins, built once each (in parallel: the compilers are
	// mostly single-threaded), through moat build as a user builds.
	manifest := func(name, kind string) string {
		return "name: " + name + "\nversion: 0.1.0\n" + kind +
			"actions: [{name: all, timeout: 60s}, {name: noop}]\ncapabilities:\n" + caps +
			"  http: [\"" + target.URL + "/v1/\"]\n" +
			"models:\n  notes:\n    fields: {title: {type: string, required: true, max: 100}}\n" +
			"config:\n  greeting: hi\n  url: \"" + target.URL + "/v1/secret\"\n  file: \"" + filepath.Join(files, "in.txt") + "\"\n" +
			"  pdf: " + yamlQuote(matrixPDF) + "\n"
	}
	buildData := filepath.Join(os.TempDir(), "moat-test-cli-build") // the Go seed cache, as TestBuildGoPlugin keeps it
	plugins := map[string]string{}                                  // lang -> plugin directory
	missing := map[string]string{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	buildErr := map[string]string{}
	for _, p := range matrixPlugins {
		if missing[p.lang] = langMissing(p.lang); missing[p.lang] != "" {
			continue
		}
		if _, err := os.Stat(filepath.Join("testdata", "matrix", p.dir)); err != nil {
			missing[p.lang] = err.Error()
			continue
		}
		name := "matrix-" + p.lang
		dir := filepath.Join(base, "plugins", name)
		copyTree(t, filepath.Join("testdata", "matrix", p.dir), dir)
		if p.extra != "" {
			appendFile(t, filepath.Join(dir, "main.py"), p.extra)
		}
		writeFile(t, filepath.Join(dir, "moat.yaml"), manifest(name, p.kind))
		plugins[p.lang] = dir
		if slices.Contains([]string{"javascript", "python", "python-native", "ruby"}, p.lang) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := moat(t, "", "build", "--data", buildData, dir)
			if r.code != 0 {
				mu.Lock()
				buildErr[p.lang] = fmt.Sprintf("moat build: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("plugins built after %s", time.Since(start).Round(time.Millisecond))

	// Two replicas on one PostgreSQL database; organization acme has the
	// granting profile, nix the denying one.
	dbURL := pgtest.Database(t)
	cfg := filepath.Join(base, "moat-server.yaml")
	writeFile(t, cfg, "database_url: "+dbURL+"\nprofile: "+granted+
		"\nprofiles: {nix: "+denied+"}\nmodules: {allow_native: true}\n"+
		"limits: {key_rate: 100000, key_burst: 100000, org_rate: 100000, org_burst: 100000}\n"+aiConf)
	keys := map[string]string{}
	for _, org := range []string{"acme", "nix"} {
		r := moat(t, "", "keys", "create", "--config", cfg, "--org", org, "--user", "ann", "--role", "admin")
		if keys[org] = strings.TrimSpace(r.stdout); r.code != 0 || keys[org] == "" {
			t.Fatalf("keys create for %s: %+v", org, r)
		}
	}
	if r := moat(t, token, "secrets", "set", "--config", cfg, "--org", "acme", "api"); r.code != 0 {
		t.Fatalf("secrets set on the server's store: %+v", r)
	}
	rs := startReplicas(t, []string{"a", "b"}, func(name string) []string {
		return []string{"--config", cfg, "--data", filepath.Join(base, "replica-"+name), "--listen", "127.0.0.1:0"}
	})
	a, b := rs[0], rs[1]
	t.Logf("replicas up after %s", time.Since(start).Round(time.Millisecond))

	invoke := func(r *replica, org, name, input string) (int, string) {
		code, out, err := api(r.base, keys[org], "POST", "/v1/modules/"+name+"/actions/all", input, "text/plain")
		if err != nil {
			t.Fatalf("invoke %s on %s: %v", name, r.name, err)
		}
		return code, out
	}
	want := func(kv, db, knowledge string) []string {
		return []string{"log ok", "config ok hi", "kv ok " + kv, "db ok " + db, "knowledge ok " + knowledge, "tasks ok queued",
			"http ok 200 key=[secret]", fmt.Sprintf("media ok application/pdf %d", len(matrixPDF)),
			"ai ok " + aitest.Reply("tiny", "say matrix"), "files ok matrix file", "caller ok ann acme"}
	}

	// deniedLines is each family's line on the denying profile, which
	// every language prints alike (files aside: each language words its
	// own I/O errors).
	deniedLines := map[string]string{}
	for _, p := range matrixPlugins {
		t.Run(p.lang, func(t *testing.T) {
			testenv.Require(t, missing[p.lang])
			if e := buildErr[p.lang]; e != "" {
				t.Fatal(e)
			}
			dir := plugins[p.lang]
			name := filepath.Base(dir)
			began := time.Now()
			step := func(what string) { t.Logf("%s after %s", what, time.Since(began).Round(time.Millisecond)) }
			runData := t.TempDir()
			if r := moat(t, token, "secrets", "set", "--data", runData, "--org", "acme", "api"); r.code != 0 {
				t.Fatalf("secrets set: %+v", r)
			}
			for org, key := range keys {
				if r := moatEnvIn(t, filepath.Dir(dir), []string{"MOAT_API_KEY=" + key}, "deploy", name, "--server", a.base); r.code != 0 {
					t.Fatalf("deploy to %s: %+v\n%s", org, r, a.log)
				}
			}

			step("deployed")
			// Granted.
			run := moat(t, "", "run", "--data", runData, "--server-config", runConf, "--profile", granted,
				"--org", "acme", "--user", "ann", dir, "all", "--input", "A")
			if got := lines(run.stdout); run.code != 0 || !slices.Equal(got, want("-", "0", "0")) {
				t.Errorf("moat run, granted: exit %d\n%s\nwant\n%s\nstderr: %s", run.code, run.stdout, strings.Join(want("-", "0", "0"), "\n"), run.stderr)
			}
			if !strings.Contains(run.stderr, "matrix") {
				t.Errorf("moat run: the guest's log record is not on stderr: %s", run.stderr)
			}
			step("moat run, granted")
			code, out := invoke(a, "acme", name, "A")
			step("replica a")
			if got := lines(out); code != 200 || !slices.Equal(got, want("-", "0", "0")) {
				t.Errorf("moat serve (replica a), granted: %d\n%s", code, out)
			}
			code, out = invoke(b, "acme", name, "B")
			if got := lines(out); code != 200 || !slices.Equal(got, want("A", "1", "1")) {
				t.Errorf("moat serve (replica b, after a's call), granted: %d\n%s\nwant\n%s", code, out, strings.Join(want("A", "1", "1"), "\n"))
			}
			step("replica b")
			if saw, _ := apiSaw.Load().(string); saw != token {
				t.Errorf("the API saw X-Api-Key %q, want the secret", saw)
			}

			// Denied: the same reasons on both paths, and audited on both.
			denyData := t.TempDir()
			drun := moat(t, "", "run", "--data", denyData, "--server-config", runConf, "--profile", denied,
				"--org", "nix", "--user", "ann", dir, "all", "--input", "A")
			step("moat run, denied")
			code, out = invoke(b, "nix", name, "A")
			step("replica b, denied")
			runLines, serveLines := lines(drun.stdout), lines(out)
			if drun.code != 0 || code != 200 || !slices.Equal(runLines, serveLines) || len(runLines) != len(matrixFamilies) {
				t.Errorf("denied: moat run (exit %d) and moat serve (%d) differ:\n%s\n---\n%s\n%s", drun.code, code, drun.stdout, out, drun.stderr)
			}
			if last := runLines[len(runLines)-1]; last != "caller ok ann nix" {
				t.Errorf("denied: the caller family says %q, want the invocation's principal, ann of nix", last)
			}
			runAudit := moat(t, "", "audit", "--data", denyData, "--kind", "op", "--decision", "deny", "--json", "--limit", "1000")
			_, serveAudit, _ := api(b.base, keys["nix"], "GET", "/v1/audit?kind=op&decision=deny&module="+name+"&limit=1000", "", "")
			runDenied, serveDenied := deniedOps(t, runAudit.stdout), deniedOps(t, serveAudit)

			step("audit")
			// policy check's verdict per family agrees with what happened.
			for _, prof := range []struct {
				name, path string
				lines      []string
			}{{"granted", granted, want("-", "0", "0")}, {"denied", denied, runLines}} {
				check := moat(t, "", "policy", "check", dir, "--profile", prof.path)
				report := capabilityVerdicts(check.stdout)
				for i, f := range matrixFamilies {
					if i >= len(prof.lines) {
						break
					}
					line := prof.lines[i]
					ok := strings.HasPrefix(line, f.family+" ok")
					if !ok && !strings.HasPrefix(line, f.family+" err ") {
						t.Errorf("%s: line %d is %q, not the %s family's", prof.name, i, line, f.family)
						continue
					}
					if f.capability == "" {
						if !ok {
							t.Errorf("%s: %s needs no grant but failed: %s", prof.name, f.family, line)
						}
						continue
					}
					verdict, found := report[f.capability]
					if !found {
						t.Errorf("%s: policy check has no line for %s:\n%s", prof.name, f.capability, check.stdout)
					} else if verdict != ok {
						t.Errorf("%s: policy check says %s granted=%v, but the call: %s\n%s", prof.name, f.capability, verdict, line, check.stdout)
					}
					if prof.name == "denied" && f.family != "files" {
						// An op the profile does not grant: denied, and
						// an audit event of it on both paths.
						if !strings.HasPrefix(line, f.family+" err denied: ") {
							t.Errorf("denied: %s", line)
						}
						if first := deniedLines[f.family]; first == "" {
							deniedLines[f.family] = line
						} else if line != first {
							t.Errorf("denied %s: %q, but another language printed %q", f.family, line, first)
						}
						if !runDenied[f.family] || !serveDenied[f.family] {
							t.Errorf("denied %s: audited by moat run %v, by moat serve %v", f.family, runDenied[f.family], serveDenied[f.family])
						}
					}
				}
			}
		})
	}
	// A stock Extism plug-in (testdata/extism/stock: only the Extism Go
	// PDK) reaches the families Extism has: log and config (greet), http
	// (fetch, Extism's http_request, through the same client and its
	// injected secret).
	t.Run("extism", func(t *testing.T) {
		dir := buildStockExtism(t, filepath.Join(base, "plugins"), "matrix-extism")
		writeFile(t, filepath.Join(dir, "moat.yaml"), "name: matrix-extism\nversion: 0.1.0\nkind: extism\n"+
			"actions: [{name: greet}, {name: fetch}]\ncapabilities:\n  http: [\""+target.URL+"/v1/\"]\nconfig: {greeting: hi}\n")
		for org, key := range keys {
			if r := moatEnvIn(t, filepath.Dir(dir), []string{"MOAT_API_KEY=" + key}, "deploy", "matrix-extism", "--server", a.base); r.code != 0 {
				t.Fatalf("deploy to %s: %+v", org, r)
			}
		}
		runData := t.TempDir()
		if r := moat(t, token, "secrets", "set", "--data", runData, "--org", "acme", "api"); r.code != 0 {
			t.Fatalf("secrets set: %+v", r)
		}
		url := target.URL + "/v1/secret"
		// The reason every language's http family was denied with.
		deniedFetch := "op http.fetch " + target.URL + ": http " + target.URL + " was requested but not granted: no granted target covers it (granted: none) (rule: profile denied: default grant)"
		if l := deniedLines["http"]; l != "" && l != "http err denied: "+deniedFetch {
			t.Errorf("the plugins' http denial %q is not Extism's %q", l, deniedFetch)
		}
		for _, tc := range []struct {
			org, profile, action, input, want string
		}{
			{"acme", granted, "greet", "A", "hi, A!"},
			{"acme", granted, "fetch", url, "200 key=[secret]"},
			{"nix", denied, "greet", "A", "hi, A!"},
			{"nix", denied, "fetch", url, deniedFetch},
		} {
			data := runData
			if tc.org == "nix" {
				data = t.TempDir()
			}
			run := moat(t, "", "run", "--data", data, "--profile", tc.profile, "--org", tc.org, "--user", "ann", dir, tc.action, "--input", tc.input)
			for _, r := range []*replica{a, b} {
				code, out, err := api(r.base, keys[tc.org], "POST", "/v1/modules/matrix-extism/actions/"+tc.action, tc.input, "text/plain")
				if err != nil {
					t.Fatal(err)
				}
				if tc.want == deniedFetch { // denied on both paths, with one reason
					if run.code != 3 || !strings.Contains(run.stderr, tc.want) || code != http.StatusForbidden || !strings.Contains(out, tc.want) {
						t.Errorf("%s %s on %s: moat run exit %d %s; replica %s: %d %s; want denied: %s", tc.org, tc.action, tc.profile, run.code, run.stderr, r.name, code, out, tc.want)
					}
					continue
				}
				if run.code != 0 || run.stdout != tc.want || code != 200 || out != tc.want {
					t.Errorf("%s %s: moat run exit %d %q %s; replica %s: %d %q; want %q", tc.org, tc.action, run.code, run.stdout, run.stderr, r.name, code, out, tc.want)
				}
			}
		}
		for _, prof := range []struct {
			path string
			ok   bool
		}{{granted, true}, {denied, false}} {
			check := moat(t, "", "policy", "check", dir, "--profile", prof.path)
			if v, found := capabilityVerdicts(check.stdout)["http"]; !found || v != prof.ok {
				t.Errorf("policy check on %s: http granted=%v (found %v), want %v\n%s", prof.path, v, found, prof.ok, check.stdout)
			}
		}
	})
	t.Logf("matrix done after %s", time.Since(start).Round(time.Millisecond))
	if t.Failed() {
		t.Logf("replica a:\n%s\nreplica b:\n%s", a.log, b.log)
	}
}

// lines splits out into its lines, without the final newline.
func lines(out string) []string {
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

// deniedOps is the op families (the op's name before its dot; task.* as
// tasks) of the denial events in out: /v1/audit's answer ({"events":
// [...]}) or moat audit --json's lines.
func deniedOps(t *testing.T, out string) map[string]bool {
	t.Helper()
	var events []map[string]any
	if strings.HasPrefix(strings.TrimSpace(out), "{\"events\"") {
		var wrapped struct {
			Events []map[string]any `json:"events"`
		}
		if err := json.Unmarshal([]byte(out), &wrapped); err != nil {
			t.Fatalf("audit: %v\n%s", err, out)
		}
		events = wrapped.Events
	} else {
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			var e map[string]any
			if err := dec.Decode(&e); err != nil {
				t.Fatalf("audit: %v\n%s", err, out)
			}
			events = append(events, e)
		}
	}
	fams := map[string]bool{}
	for _, e := range events {
		op, _ := e["op"].(string)
		fam, _, _ := strings.Cut(op, ".")
		if fam == "task" {
			fam = "tasks"
		}
		fams[fam] = true
	}
	return fams
}

// capabilityVerdicts reads moat policy check's report: for each
// capability's first word, whether every line of it says ✓.
func capabilityVerdicts(report string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(report, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		var ok bool
		switch {
		case strings.Contains(l, "✓"):
			ok = true
		case strings.Contains(l, "✗"):
		default:
			continue
		}
		if prev, seen := out[f[0]]; seen {
			ok = ok && prev
		}
		out[f[0]] = ok
	}
	return out
}

// yamlQuote is s as a double-quoted YAML scalar.
func yamlQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// copyTree copies the regular files under from to to.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// buildStockExtism builds testdata/extism/stock, the plug-in written only
// against the Extism Go PDK, as plugin name in a directory under parent.
func buildStockExtism(t *testing.T, parent, name string) string {
	t.Helper()
	root := testwasm.RepoRoot(t)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	dl := exec.Command("go", "mod", "download", "github.com/extism/go-pdk")
	dl.Dir, dl.Env = filepath.Join(root, "testdata", "extism"), env
	if msg, err := dl.CombinedOutput(); err != nil {
		testenv.Require(t, fmt.Sprintf("the Extism Go PDK is not available (`make extism-pdk`): %v\n%s", err, msg))
	}
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, name+".wasm"), "./stock")
	build.Dir, build.Env = filepath.Join(root, "testdata", "extism"), append(env, "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the stock plug-in: %v\n%s", err, msg)
	}
	return dir
}
