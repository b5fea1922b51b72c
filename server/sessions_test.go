package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/toolchains"
)

// sessionRun runs code in a session's context and returns the result.
func sessionRun(t testing.TB, ts *testServer, key, id, lang, code string) (response, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"language": lang, "code": code})
	r := ts.do(t, "POST", "/v1/sessions/"+id+"/run", key, strings.NewReader(string(body)), "Content-Type", "application/json")
	if r.status == http.StatusOK {
		return r, r.json(t)
	}
	return r, nil
}

func requireInterpreter(t *testing.T, r response) {
	t.Helper()
	if r.status != http.StatusOK && strings.Contains(string(r.body), toolchains.ErrMissing.Error()) {
		testenv.Require(t, string(r.body))
	}
}

func newSession(t testing.TB, ts *testServer, key string) string {
	t.Helper()
	r := ts.do(t, "POST", "/v1/sessions", key, strings.NewReader(`{"env_vars": {"GREETING": "hi"}}`), "Content-Type", "application/json")
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	return r.json(t)["id"].(string)
}

// TestSessionLifecycle: a session keeps a Python context's variables
// between runs (x = 1, then x + 1 is 2, the notebook's result, stdout and
// stderr apart), a file the code writes at /home/user is read through the
// files API and one uploaded is read by the code, another principal (of
// another organization or the same) gets 404 on every route, paths that
// lead out (.., an absolute path, a symlink out) are refused, and DELETE
// ends it and removes its workspace.
func TestSessionLifecycle(t *testing.T) {
	var dir string
	ts := start(t, "", func(c *server.Config) { dir = c.DataDir + "-sessions" })
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	bob := ts.key(t, "acme", "bob")
	began := time.Now()
	id := newSession(t, ts, ann)

	r, got := sessionRun(t, ts, ann, id, "python", "x = 1\nprint('out')\nimport sys; print('err', file=sys.stderr)")
	requireInterpreter(t, r)
	t.Logf("create and first run (CPython cold): %v", time.Since(began))
	if r.status != http.StatusOK || got["stdout"] != "out\n" || got["stderr"] != "err\n" || got["result"] != nil {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "python", "x + 1"); r.status != http.StatusOK || got["result"] != "2" {
		t.Fatalf("x + 1: %d %s, want the result 2", r.status, r.body)
	}
	// A second session (of the same user) starts apart: none of the
	// first's variables or files.
	began = time.Now()
	id2 := newSession(t, ts, ann)
	if r, got = sessionRun(t, ts, ann, id2, "python", "'x' in globals()"); got["result"] != "False" {
		t.Fatalf("a second session sees the first's globals: %d %s", r.status, r.body)
	}
	t.Logf("create and first run of a second session: %v", time.Since(began))
	var rtts []time.Duration
	for range 21 {
		t0 := time.Now()
		sessionRun(t, ts, ann, id, "python", "x")
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	t.Logf("a run on a live context over HTTP: p50 %v", rtts[len(rtts)/2])
	if r, got = sessionRun(t, ts, ann, id, "python", "import os\nos.environ['GREETING'], os.getcwd()"); got["result"] != "('hi', '/home/user')" {
		t.Fatalf("env and cwd: %d %s", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "python", "1/0"); r.status != http.StatusOK || got["error"].(map[string]any)["name"] != "ZeroDivisionError" {
		t.Fatalf("an exception: %d %s", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "python", "x"); got["result"] != "1" {
		t.Fatalf("after an exception the context lives on: %d %s", r.status, r.body)
	}

	// Files: written by code, read through the API, and back.
	if r, _ = sessionRun(t, ts, ann, id, "python", "open('/home/user/out/a.txt','w').write('from code') if __import__('os').makedirs('/home/user/out', exist_ok=True) is None else 0"); r.status != http.StatusOK {
		t.Fatalf("write from code: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "GET", "/v1/sessions/"+id+"/files?path=/home/user/out/a.txt", ann, nil); r.status != http.StatusOK || string(r.body) != "from code" {
		t.Fatalf("read what the code wrote: %d %q", r.status, r.body)
	}
	if r = ts.do(t, "PUT", "/v1/sessions/"+id+"/files?path=in/b.txt", ann, strings.NewReader("uploaded")); r.status != http.StatusOK {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "python", "open('in/b.txt').read()"); got["result"] != "'uploaded'" {
		t.Fatalf("code reads the upload: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "GET", "/v1/sessions/"+id+"/files/list?path=/home/user", ann, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"path":"/home/user/in"`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	// Hostile paths: out by .., an absolute path elsewhere, a symlink
	// planted in the workspace that points out, and the code's own view.
	ws := filepath.Join(dir, id)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../x", "/home/user/../../etc/passwd", "/etc/passwd", "link/secret", "in/../../x", "a\x00b"} {
		q := "/v1/sessions/" + id + "/files?path=" + url.QueryEscape(p)
		if r = ts.do(t, "GET", q, ann, nil); r.status < 400 || strings.Contains(string(r.body), "s3cret") {
			t.Errorf("GET %q: %d %s, want a refusal", p, r.status, r.body)
		}
		if r = ts.do(t, "PUT", q, ann, strings.NewReader("x")); r.status < 400 {
			t.Errorf("PUT %q: %d %s, want a refusal", p, r.status, r.body)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a write left the workspace: %v", err)
	}
	if r, got = sessionRun(t, ts, ann, id, "python", "try:\n    r = open('/home/user/link/secret').read()\nexcept OSError as e:\n    r = 'refused'\nr"); got["result"] != "'refused'" {
		t.Fatalf("code followed a symlink out: %d %s", r.status, r.body)
	}

	// Another principal: 404 everywhere, as for no session.
	for _, k := range []string{eve, bob} {
		for _, rt := range []struct{ method, path, body string }{
			{"GET", "/v1/sessions/" + id, ""},
			{"DELETE", "/v1/sessions/" + id, ""},
			{"POST", "/v1/sessions/" + id + "/timeout", `{"timeout": 60}`},
			{"POST", "/v1/sessions/" + id + "/run", `{"language": "python", "code": "x"}`},
			{"GET", "/v1/sessions/" + id + "/files?path=in/b.txt", ""},
			{"PUT", "/v1/sessions/" + id + "/files?path=in/c.txt", "x"},
			{"DELETE", "/v1/sessions/" + id + "/files?path=in/b.txt", ""},
			{"GET", "/v1/sessions/" + id + "/files/list", ""},
		} {
			if r = ts.do(t, rt.method, rt.path, k, strings.NewReader(rt.body), "Content-Type", "application/json"); r.status != http.StatusNotFound {
				t.Errorf("another principal's %s %s: %d %s, want 404", rt.method, rt.path, r.status, r.body)
			}
		}
		if r = ts.do(t, "GET", "/v1/sessions", k, nil); strings.Contains(string(r.body), id) {
			t.Errorf("another principal lists the session: %s", r.body)
		}
	}
	if r = ts.do(t, "GET", "/v1/sessions", ann, nil); !strings.Contains(string(r.body), id) {
		t.Fatalf("the owner's list: %s", r.body)
	}

	// Hostile code: a loop meets the run's timeout, and the context
	// restarts with empty globals; the session lives on.
	body := `{"language": "python", "code": "while True: pass", "timeout_ms": 300}`
	if r = ts.do(t, "POST", "/v1/sessions/"+id+"/run", ann, strings.NewReader(body), "Content-Type", "application/json"); r.status != http.StatusGatewayTimeout {
		t.Fatalf("a loop: %d %s, want 504", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "python", "'x' in globals()"); got["result"] != "False" || got["restarted"] != true {
		t.Fatalf("after the timeout: %d %s, want a restarted context", r.status, r.body)
	}

	// Every step is audited as kind session, with the session id and the
	// request's correlation id.
	r = ts.do(t, "GET", "/v1/audit?kind=session&limit=1000", ann, nil)
	var trail struct {
		Events []struct {
			Rule          string            `json:"rule"`
			CorrelationID string            `json:"correlation_id"`
			Attrs         map[string]string `json:"attrs"`
		} `json:"events"`
	}
	if err := json.Unmarshal(r.body, &trail); err != nil {
		t.Fatalf("audit: %v %s", err, r.body)
	}
	if !strings.Contains(string(r.body), `"rule":"create"`) || !strings.Contains(string(r.body), `"rule":"run"`) || !strings.Contains(string(r.body), `"rule":"files.write"`) {
		t.Fatalf("the trail lacks a step: %s", r.body)
	}
	for _, e := range trail.Events {
		if (e.Attrs["session"] != id && e.Attrs["session"] != id2) || e.CorrelationID == "" {
			t.Fatalf("an event without the session id or the correlation id: %+v", e)
		}
	}

	if r = ts.do(t, "DELETE", "/v1/sessions/"+id, ann, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "GET", "/v1/sessions/"+id, ann, nil); r.status != http.StatusNotFound {
		t.Fatalf("after kill: %d", r.status)
	}
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workspace outlived the session: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatalf("removing the workspace followed the symlink out: %v", err)
	}
}

// TestSessionJavaScript: a JavaScript context keeps its globals too, and
// a session holding one forks with them (TestSessionForkJavaScript has
// the rest).
func TestSessionJavaScript(t *testing.T) {
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	r, got := sessionRun(t, ts, ann, id, "javascript", "var x = 1; console.log('out'); console.error('err');")
	requireInterpreter(t, r)
	if r.status != http.StatusOK || got["stdout"] != "out\n" || got["stderr"] != "err\n" {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "js", "x + 1"); got["result"] != "2" {
		t.Fatalf("x + 1: %d %s", r.status, r.body)
	}
	r, kids := forkSession(t, ts, ann, id, 1)
	if r.status != http.StatusCreated {
		t.Fatalf("fork of a session with a JavaScript context: %d %s", r.status, r.body)
	}
	if got := sessionStates(t, ts, ann); len(got) != 2 || got[id] != "running" || got[kids[0]] != "running" {
		t.Fatalf("sessions after the fork: %v", got)
	}
	if r, got = sessionRun(t, ts, ann, kids[0], "js", "x += 1"); got["result"] != "2" {
		t.Fatalf("x += 1 in the copy: %d %s", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "js", "x"); got["result"] != "1" {
		t.Fatalf("x after the copy's: %d %s", r.status, r.body)
	}
}

// TestSessionLimits: bounded inputs and the per-org limit, the idle
// timeout ending a session (and removing its workspace) — no interpreter
// needed.
func TestSessionLimits(t *testing.T) {
	var dir string
	ts := start(t, "", func(c *server.Config) {
		c.Sessions.MaxPerOrg = 2
		c.Sessions.IdleTimeout = 200 * 1e6 // 200ms
		c.Sessions.MaxFileBytes = 1 << 10
		c.Sessions.DiskQuotaBytes = 3 << 10
		dir = c.DataDir + "-sessions"
	})
	ann := ts.key(t, "acme", "ann")
	for _, body := range []string{
		`{"env_vars": {"HOME": "/"}}`,
		`{"env_vars": {"PYTHONPATH": "/x"}}`,
		`{"env_vars": {"A=B": "x"}}`,
		`{"env_vars": {"A": "` + strings.Repeat("v", 5000) + `"}}`,
		`{"timeout": -1}`,
	} {
		if r := ts.do(t, "POST", "/v1/sessions", ann, strings.NewReader(body), "Content-Type", "application/json"); r.status != http.StatusBadRequest {
			t.Errorf("create %.60s: %d %s, want 400", body, r.status, r.body)
		}
	}
	for _, id := range []string{"..", "S1", strings.Repeat("a", 65), "a%2Fb"} {
		if r := ts.do(t, "GET", "/v1/sessions/"+id, ann, nil); r.status != http.StatusNotFound {
			t.Errorf("GET id %q: %d, want 404", id, r.status)
		}
	}
	a := newSession(t, ts, ann)
	newSession(t, ts, ts.key(t, "acme", "bob"))

	// The files API's bounds: one file, then the workspace's quota; a
	// refused upload leaves nothing behind.
	put := func(p string, n int) response {
		return ts.do(t, "PUT", "/v1/sessions/"+a+"/files?path="+p, ann, strings.NewReader(strings.Repeat("x", n)))
	}
	if r := put("big", 1<<10+1); r.status != http.StatusRequestEntityTooLarge || !strings.Contains(string(r.body), "max_file_bytes") {
		t.Fatalf("past max_file_bytes: %d %s", r.status, r.body)
	}
	for i := range 3 {
		if r := put("d/f"+strconv.Itoa(i), 1<<10); r.status != http.StatusOK {
			t.Fatalf("upload %d: %d %s", i, r.status, r.body)
		}
	}
	if r := put("d/f3", 1); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("past the quota: %d %s", r.status, r.body)
	}
	if r := put("d/f0", 1<<10); r.status != http.StatusOK {
		t.Fatalf("replacing a file counts it once: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/v1/sessions/"+a+"/files/list?path=d", ann, nil); strings.Count(string(r.body), `"type":"file"`) != 3 {
		t.Fatalf("list after refused uploads: %s", r.body)
	}
	for _, p := range []string{"", ".", "/home/user", "..", "/home/user/.."} {
		if r := ts.do(t, "DELETE", "/v1/sessions/"+a+"/files?path="+url.QueryEscape(p), ann, nil); r.status != http.StatusBadRequest {
			t.Errorf("remove %q: %d %s, want 400", p, r.status, r.body)
		}
	}
	if r := ts.do(t, "DELETE", "/v1/sessions/"+a+"/files?path=d", ann, nil); r.status != http.StatusNoContent {
		t.Fatalf("remove a directory: %d %s", r.status, r.body)
	}
	if r := put("d/f3", 1<<10); r.status != http.StatusOK {
		t.Fatalf("room again after the remove: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "POST", "/v1/sessions", ann, nil); r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "max_per_org") {
		t.Fatalf("past the org's limit: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "POST", "/v1/sessions", ts.key(t, "other", "ann"), nil); r.status != http.StatusCreated {
		t.Fatalf("another org has its own limit: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(dir, a)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	// Listing touches no session (a GET of it would: it is a use).
	for strings.Contains(string(ts.do(t, "GET", "/v1/sessions", ann, nil).body), a) {
		if time.Now().After(deadline) {
			t.Fatal("the idle timeout did not end the session")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, a)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workspace outlived the idle session: %v", err)
	}
	if r := ts.do(t, "POST", "/v1/sessions", ann, nil); r.status != http.StatusCreated {
		t.Fatalf("after the idle ones ended, room again: %d %s", r.status, r.body)
	}
}

// TestSessionsDirApart: a sessions.dir within the data directory (or
// holding it) is refused at start, naming the field: a session's code
// writes there, and must never reach the store.
func TestSessionsDirApart(t *testing.T) {
	for _, sub := range []string{"ws", ""} {
		cfg := server.DefaultConfig()
		cfg.DataDir = t.TempDir()
		cfg.CacheDir = cacheDir
		cfg.Logger = quietLogger()
		cfg.Sessions.Dir = filepath.Join(cfg.DataDir, sub)
		if sub == "" {
			cfg.Sessions.Dir = filepath.Dir(cfg.DataDir)
		}
		srv, err := server.New(t.Context(), cfg)
		if err == nil {
			srv.Close(t.Context())
			t.Fatalf("sessions.dir %s with data_dir %s: started", cfg.Sessions.Dir, cfg.DataDir)
		}
		if !strings.Contains(err.Error(), "sessions.dir") {
			t.Fatalf("the refusal does not name sessions.dir: %v", err)
		}
	}
}

// TestSessionRuby: a Ruby context keeps its local variables and methods,
// its output apart and an exception's class, as the others do; it works
// in the workspace (/home/user, its working directory), and sees its own
// session's variables alone: a context of another organization's session,
// started from an image, sees neither those variables nor a global the
// first one set.
func TestSessionRuby(t *testing.T) {
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	id := newSession(t, ts, ann)
	r, got := sessionRun(t, ts, ann, id, "ruby", "x = 1\ndef twice(n) = n * 2\nputs 'out'\n$stderr.puts 'err'\n$leak = ENV['GREETING']\nnil")
	requireInterpreter(t, r)
	if r.status != http.StatusOK || got["stdout"] != "out\n" || got["stderr"] != "err\n" || got["result"] != nil {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "rb", "twice(x + 1)"); got["result"] != "4" {
		t.Fatalf("twice(x + 1): %d %s", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "ruby", "raise ArgumentError, 'no'"); got["error"] == nil || got["error"].(map[string]any)["name"] != "ArgumentError" {
		t.Fatalf("an exception: %d %s", r.status, r.body)
	}
	if r, got = sessionRun(t, ts, ann, id, "ruby", "File.write('made.txt', 'by ruby'); [Dir.pwd, ENV['GREETING'], ENV['HOME']]"); got["result"] != `["/home/user", "hi", "/home/user"]` {
		t.Fatalf("the workspace and the variables: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/v1/sessions/"+id+"/files?path=made.txt", ann, nil); r.status != http.StatusOK || string(r.body) != "by ruby" {
		t.Fatalf("the file the code wrote, through the files API: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/v1/sessions", eve, strings.NewReader(`{"env_vars": {"OTHER": "eve's"}}`), "Content-Type", "application/json")
	if r.status != http.StatusCreated {
		t.Fatalf("eve's session: %d %s", r.status, r.body)
	}
	other := r.json(t)["id"].(string)
	if r, got = sessionRun(t, ts, eve, other, "ruby", "[ENV['GREETING'], ENV['OTHER'], $leak, Dir.children('.')]"); got["result"] != `[nil, "eve's", nil, []]` {
		t.Fatalf("another org's context: %d %s", r.status, r.body)
	}
}
