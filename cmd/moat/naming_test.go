package main_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// TestOneNaming: what the CLI prints as JSON names its fields as the HTTP
// API does. moat exec --lang --json is POST /v1/runs's RunResult (decoded
// strictly: no field of another name), moat audit --json is /v1/audit's
// events, and moat audit takes --correlation-id as moat run does.
func TestOneNaming(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	data := t.TempDir()
	r := moat(t, "", "exec", "--data", data, "--lang", "javascript", "-e", `print("hi")`, "--json")
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	var res server.RunResult
	if err := dec.Decode(&res); err != nil || r.code != 0 || res.Stdout != "hi\n" || res.CorrelationID == "" || res.RunTimeMS <= 0 {
		t.Fatalf("exec --json is not a RunResult: %v, %+v\n%s", err, res, r.stdout)
	}
	a := moat(t, "", "audit", "--data", data, "--correlation-id", res.CorrelationID, "--json")
	dec = json.NewDecoder(bytes.NewReader([]byte(a.stdout)))
	dec.DisallowUnknownFields()
	var ev server.AuditEventJSON
	if err := dec.Decode(&ev); err != nil || a.code != 0 || ev.CorrelationID != res.CorrelationID || ev.Kind == "" {
		t.Fatalf("audit --json is not /v1/audit's event: %v, %+v\n%s", err, ev, a.stdout)
	}
}

// TestInspectMatchesModulesAPI: moat inspect --json and GET
// /v1/modules/{name} describe the same module with the same fields under
// the same names and shapes (actions as objects with roles and confirm,
// the manifest's version), and moat audit --json --since T --until T
// answers what /v1/audit?since=T&until=T does.
func TestInspectMatchesModulesAPI(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	data := t.TempDir()
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	dir := filepath.Join(t.TempDir(), "naming")
	os.Mkdir(dir, 0o755)
	copyFile(t, filepath.Join(testwasm.RepoRoot(t), "testdata", "plugin.wasm"), filepath.Join(dir, "naming.wasm"))
	manifest := []byte("name: naming\nversion: 0.2.0\nmodule: naming.wasm\nkind: moat\nactions:\n" +
		"  - {name: echo, roles: [admin]}\n  - {name: noop, confirm: true}\n  - {name: config, roles: [admin], permissions: [config.read]}\n")
	os.WriteFile(filepath.Join(dir, "moat.yaml"), manifest, 0o644)

	r := moat(t, "", "inspect", "--data", data, "--json", dir)
	var cli map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &cli); err != nil || r.code != 0 {
		t.Fatalf("inspect --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}

	var log bytes.Buffer
	_, base := startServe(t, &log, "--data", data, "--listen", "127.0.0.1:0")
	req := func(method, path, ct string, body io.Reader) []byte {
		t.Helper()
		hr, _ := http.NewRequest(method, base+path, body)
		hr.Header.Set("Authorization", "Bearer "+key)
		if ct != "" {
			hr.Header.Set("Content-Type", ct)
		}
		res, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
		}
		return b
	}
	since := time.Now().Add(-time.Second).UTC()
	wasm, _ := os.ReadFile(filepath.Join(dir, "naming.wasm"))
	body, bodyType := moduleForm(wasm, manifest)
	req("POST", "/v1/modules", bodyType, body)
	req("POST", "/v1/modules/naming/actions/echo", "", strings.NewReader("hi"))
	var api map[string]json.RawMessage
	if err := json.Unmarshal(req("GET", "/v1/modules/naming", "", nil), &api); err != nil {
		t.Fatal(err)
	}
	var shared []string
	for k, v := range api {
		c, ok := cli[k]
		if !ok {
			continue
		}
		shared = append(shared, k)
		var a, b any
		json.Unmarshal(v, &a)
		json.Unmarshal(c, &b)
		if acts, ok := a.([]any); ok && k == "actions" {
			// callable is the caller's (the API knows its key's roles;
			// inspect has no caller): not part of the module's shape.
			for _, act := range acts {
				if m, ok := act.(map[string]any); ok {
					delete(m, "callable")
				}
			}
		}
		if ab, _ := json.Marshal(a); string(ab) != string(must(json.Marshal(b))) {
			t.Errorf("%q: GET /v1/modules/naming says %s, moat inspect --json %s", k, ab, must(json.Marshal(b)))
		}
	}
	slices.Sort(shared)
	if want := []string{"actions", "digest", "kind", "mode", "name", "size", "version"}; !slices.Equal(shared, want) {
		t.Errorf("fields both print: %v, want %v", shared, want)
	}

	// moat langs --json and GET /v1/languages: the same names for the
	// same fields of each language both list.
	var apiLangs struct{ Languages []map[string]json.RawMessage }
	if err := json.Unmarshal(req("GET", "/v1/languages", "", nil), &apiLangs); err != nil || len(apiLangs.Languages) == 0 {
		t.Fatalf("/v1/languages: %v, %d languages", err, len(apiLangs.Languages))
	}
	l := moat(t, "", "langs", "--json")
	var cliLangs []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(l.stdout), &cliLangs); err != nil || l.code != 0 {
		t.Fatalf("langs --json: %v\n%s", err, l.stderr)
	}
	byName := map[string]map[string]json.RawMessage{}
	for _, c := range cliLangs {
		byName[string(c["name"])] = c
	}
	for _, a := range apiLangs.Languages {
		c, ok := byName[string(a["name"])]
		if !ok {
			t.Errorf("/v1/languages lists %s; moat langs --json has no such \"name\"", a["name"])
			continue
		}
		for k, v := range a {
			cv, ok := c[k]
			if !ok && serverOnlyLanguageFields[k] {
				continue // the server's own process state: what it ran since it started
			}
			if !ok || string(must(json.Marshal(json.RawMessage(cv)))) != string(must(json.Marshal(json.RawMessage(v)))) {
				t.Errorf("language %s field %q: API %s, CLI %s", a["name"], k, v, cv)
			}
		}
	}

	until := time.Now().Add(time.Second).UTC()
	var fromAPI struct{ Events []server.AuditEventJSON }
	q := url.Values{"since": {since.Format(time.RFC3339Nano)}, "until": {until.Format(time.RFC3339Nano)}}
	if err := json.Unmarshal(req("GET", "/v1/audit?"+q.Encode(), "", nil), &fromAPI); err != nil || len(fromAPI.Events) == 0 {
		t.Fatalf("/v1/audit: %v, %d events", err, len(fromAPI.Events))
	}
	a := moat(t, "", "audit", "--data", data, "--org", "acme", "--json", "--since", since.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano))
	var fromCLI []string
	dec := json.NewDecoder(strings.NewReader(a.stdout))
	for dec.More() {
		var e server.AuditEventJSON
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("audit --json: %v\n%s", err, a.stdout)
		}
		fromCLI = append(fromCLI, e.ID)
	}
	var ids []string
	for _, e := range fromAPI.Events {
		ids = append(ids, e.ID)
	}
	if a.code != 0 || !slices.Equal(ids, fromCLI) {
		t.Errorf("audit --since --until: %v; /v1/audit: %v\n%s", fromCLI, ids, a.stderr)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestAuditTimeRange: moat audit's --since and --until take an RFC 3339
// time, as /v1/audit does, or a duration back from now, and refuse an
// empty or unreadable range by name.
func TestAuditTimeRange(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	data := t.TempDir()
	if r := moat(t, "", "inspect", "--data", data, filepath.Join(testwasm.RepoRoot(t), "testdata", "plugin.wasm")); r.code != 0 {
		t.Fatalf("inspect: %+v", r) // a load event to find
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, tt := range []struct {
		args     []string
		code     int
		found    bool
		stderrIs string
	}{
		{[]string{"--since", "1h"}, 0, true, ""},
		{[]string{"--until", "1h"}, 0, false, ""},
		{[]string{"--since", future}, 0, false, ""},
		{[]string{"--since", "2000-01-01T00:00:00Z", "--until", future}, 0, true, ""},
		{[]string{"--since", "2000-01-01T00:00:00+02:00", "--until", "30s"}, 0, false, ""},
		{[]string{"--since", "10m", "--until", "1h"}, 2, false, "is not before --until"},
		{[]string{"--since", "yesterday"}, 2, false, "RFC 3339"},
		{[]string{"--until", "-5m"}, 2, false, "positive duration"},
		{[]string{"--limit", "0"}, 2, false, "--limit 0"},
	} {
		r := moat(t, "", append([]string{"audit", "--data", data, "--kind", "load"}, tt.args...)...)
		if r.code != tt.code || strings.Contains(r.stdout, "loaded") != tt.found || !strings.Contains(r.stderr, tt.stderrIs) {
			t.Errorf("audit %v: exit %d (want %d), found %v (want %v), stderr %q (want %q)", tt.args, r.code, tt.code, !tt.found, tt.found, r.stderr, tt.stderrIs)
		}
	}
}

// TestMiBFlagNames: a size flag in MiB says so (--memory-mib, --disk-mib,
// --host-memory-mib), as the API's fields say bytes (memory_bytes); the
// first names still work, on the same value, with a deprecation line, and
// are gone from --help.
func TestMiBFlagNames(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	for _, c := range []struct {
		cmd   []string
		names []string
	}{
		{[]string{"run"}, []string{"memory", "host-memory"}},
		{[]string{"exec"}, []string{"memory", "disk"}},
		{[]string{"serve"}, []string{"host-memory"}},
	} {
		h := moat(t, "", append(c.cmd, "--help")...)
		for _, n := range c.names {
			if !strings.Contains(h.stdout, "--"+n+"-mib int") || strings.Contains(h.stdout, "--"+n+" int") {
				t.Errorf("moat %s --help: want --%s-mib and not --%s:\n%s", c.cmd[0], n, n, h.stdout)
			}
		}
	}
	// The old name sets the same limit: bigmem.wasm declares 32 MiB.
	bigmem := filepath.Join(testwasm.RepoRoot(t), "testdata", "bigmem.wasm")
	data := t.TempDir()
	for _, flag := range []string{"--memory", "--memory-mib"} {
		for mib, code := range map[string]int{"16": 125, "64": 0} {
			r := moat(t, "", "run", "--data", data, bigmem, flag, mib)
			deprecated := strings.Contains(r.stderr, "--memory has been deprecated, use --memory-mib")
			if r.code != code || deprecated != (flag == "--memory") {
				t.Errorf("run %s %s: exit %d (want %d), deprecation said: %v\n%s", flag, mib, r.code, code, deprecated, r.stderr)
			}
		}
	}
}

// TestExecNativeJSONEncoding: moat exec --native --json carries output
// that is not UTF-8 as POST /v1/runs does (base64, encoding: base64),
// not as U+FFFD; text stays text.
func TestExecNativeJSONEncoding(t *testing.T) {
	testenv.Root(t, "the native layer stack needs root; CI runs as root")
	data := t.TempDir()
	for _, tc := range []struct {
		printf, encoding, stdout string
	}{
		{`\377\n`, "base64", "/wo="},
		{`h\303\251\n`, "", "hé\n"},
	} {
		r := moat(t, "", "exec", "--data", data, "--native", "--json", "--", "printf", tc.printf)
		var res struct{ Stdout, Encoding string }
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 || res.Stdout != tc.stdout || res.Encoding != tc.encoding {
			t.Errorf("printf %s: exit %d, %v, %+v; want stdout %q encoding %q\n%s", tc.printf, r.code, err, res, tc.stdout, tc.encoding, r.stderr)
		}
	}
}

// serverOnlyLanguageFields are the fields of GET /v1/languages that say
// what one server process has done (server/langstate.go): moat langs,
// a process of its own, has no such state to print.
var serverOnlyLanguageFields = map[string]bool{"state": true, "first_run": true, "since": true, "stage": true, "fix": true}
