package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/toolchains"
)

// e2bDo sends an E2B control-plane request with the SDK's X-API-Key.
func e2bDo(t *testing.T, ts *testServer, method, path, key, body string) response {
	t.Helper()
	var hdr []string
	if key != "" {
		hdr = append(hdr, "X-API-Key", key)
	}
	if body != "" {
		hdr = append(hdr, "Content-Type", "application/json")
	}
	return ts.do(t, method, "/e2b"+path, "", strings.NewReader(body), hdr...)
}

// e2bErrorOf checks r is E2B's error shape with status want.
func e2bErrorOf(t *testing.T, what string, r response, want int) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if r.status != want || json.Unmarshal(r.body, &e) != nil || e.Code != want || e.Message == "" {
		t.Errorf("%s: %d %s, want E2B's error {code: %d, message}", what, r.status, r.body, want)
	}
}

// TestE2BControlPlane: /e2b answers E2B's API with the moat key as
// X-API-Key (or Bearer): a sandbox is a session of its creator, with its
// metadata, timeout and tokens; list pages and filters the caller's own;
// another organization's key, a missing or wrong key, an unknown
// template, network rules, pause and fork are refused in E2B's error
// shape with the status the SDKs turn into their exceptions.
func TestE2BControlPlane(t *testing.T) {
	t.Parallel()
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")

	r := e2bDo(t, ts, "POST", "/v2/sandboxes", ann, `{"templateID":"code-interpreter-v1","timeout":60,"metadata":{"k":"v"},"envVars":{"A":"1"},"autoPause":true,"iam":{}}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb struct {
		SandboxID, TemplateID, EnvdVersion, EnvdAccessToken, TrafficAccessToken string
		EndAt                                                                   time.Time
		Metadata                                                                map[string]string
	}
	if err := json.Unmarshal(r.body, &sb); err != nil {
		t.Fatal(err)
	}
	if sb.EnvdAccessToken != server.E2BAccessToken(ts.Server, sb.SandboxID, "acme", "ann") || sb.TrafficAccessToken != sb.EnvdAccessToken || sb.EnvdVersion == "" {
		t.Errorf("create's tokens: %s", r.body)
	}
	if until := time.Until(sb.EndAt); until < 50*time.Second || until > 70*time.Second {
		t.Errorf("timeout 60 s: ends in %v", until)
	}
	id := sb.SandboxID
	second := e2bDo(t, ts, "POST", "/sandboxes", "", "")
	e2bErrorOf(t, "no key", second, http.StatusUnauthorized)
	if !strings.Contains(string(second.body), "E2B_API_KEY") {
		t.Errorf("no key: %s, want the E2B setting named", second.body)
	}
	e2bErrorOf(t, "a wrong key", e2bDo(t, ts, "GET", "/v2/sandboxes", "moat_wrong", ""), http.StatusUnauthorized)
	if r := ts.do(t, "GET", "/e2b/sandboxes/"+id, ann, nil); r.status != http.StatusOK {
		t.Errorf("Authorization: Bearer works too: %d %s", r.status, r.body)
	}

	// Another organization's key: 404 everywhere, as for no sandbox.
	for _, c := range [][3]string{{"GET", "/sandboxes/" + id, ""}, {"DELETE", "/sandboxes/" + id, ""},
		{"POST", "/sandboxes/" + id + "/timeout", `{"timeout":10}`}, {"POST", "/v2/sandboxes/" + id + "/connect", `{"timeout":10}`},
		{"POST", "/sandboxes/" + id + "/pause", ""}, {"POST", "/sandboxes/" + id + "/fork", ""}} {
		e2bErrorOf(t, "another org's "+c[0]+" "+c[1], e2bDo(t, ts, c[0], c[1], eve, c[2]), http.StatusNotFound)
	}
	if r := e2bDo(t, ts, "GET", "/v2/sandboxes", eve, ""); string(bytes.TrimSpace(r.body)) != "[]" {
		t.Errorf("another org's list: %s", r.body)
	}

	// Refusals by name.
	for name, body := range map[string]string{
		"an unknown template": `{"templateID":"my-custom"}`,
		"network rules":       `{"network":{"denyOut":["0.0.0.0/0"]}}`,
		"volume mounts":       `{"volumeMounts":[{"name":"v","path":"/data"}]}`,
		"a negative timeout":  `{"timeout":-1}`,
		"a reserved env var":  `{"envVars":{"HOME":"/"}}`,
	} {
		e2bErrorOf(t, name, e2bDo(t, ts, "POST", "/sandboxes", ann, body), http.StatusBadRequest)
	}
	e2bErrorOf(t, "fork of 101", e2bDo(t, ts, "POST", "/sandboxes/"+id+"/fork", ann, `{"count":101}`), http.StatusBadRequest)
	e2bErrorOf(t, "another org's fork", e2bDo(t, ts, "POST", "/sandboxes/"+id+"/fork", eve, `{"count":1}`), http.StatusNotFound)
	e2bErrorOf(t, "another org's pause", e2bDo(t, ts, "POST", "/sandboxes/"+id+"/pause", eve, "{}"), http.StatusNotFound)
	// Pause, then connect resumes; fork answers one entry per copy.
	if r := e2bDo(t, ts, "POST", "/sandboxes/"+id+"/pause", ann, "{}"); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	e2bErrorOf(t, "get while paused", e2bDo(t, ts, "GET", "/sandboxes/"+id, ann, ""), http.StatusNotFound)
	e2bErrorOf(t, "another org's connect to a paused one", e2bDo(t, ts, "POST", "/v2/sandboxes/"+id+"/connect", eve, "{}"), http.StatusNotFound)
	if r := e2bDo(t, ts, "POST", "/v2/sandboxes/"+id+"/connect", ann, "{}"); r.status != http.StatusOK {
		t.Fatalf("connect resumes: %d %s", r.status, r.body)
	}
	var forks []struct {
		Sandbox struct {
			ID string `json:"sandboxID"`
		} `json:"sandbox"`
	}
	if r := e2bDo(t, ts, "POST", "/sandboxes/"+id+"/fork", ann, `{"count":2}`); r.status != http.StatusCreated || json.Unmarshal(r.body, &forks) != nil || len(forks) != 2 {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	for _, f := range forks {
		if r := e2bDo(t, ts, "DELETE", "/sandboxes/"+f.Sandbox.ID, ann, ""); r.status != http.StatusNoContent {
			t.Fatalf("kill a copy: %d %s", r.status, r.body)
		}
	}

	// Timeout and connect: connect extends, never shortens.
	if r := e2bDo(t, ts, "POST", "/sandboxes/"+id+"/timeout", ann, `{"timeout":600}`); r.status != http.StatusNoContent {
		t.Fatalf("timeout: %d %s", r.status, r.body)
	}
	r = e2bDo(t, ts, "POST", "/v2/sandboxes/"+id+"/connect", ann, `{"timeout":10}`)
	if err := json.Unmarshal(r.body, &sb); err != nil || r.status != http.StatusOK || sb.EnvdAccessToken == "" {
		t.Fatalf("connect: %d %s", r.status, r.body)
	}
	sb.EnvdAccessToken = ""
	if r = e2bDo(t, ts, "GET", "/sandboxes/"+id, ann, ""); json.Unmarshal(r.body, &sb) != nil || time.Until(sb.EndAt) < 500*time.Second || sb.Metadata["k"] != "v" || sb.EnvdAccessToken != "" {
		t.Errorf("get after timeout 600 and connect 10: %s", r.body)
	}

	// List: pages of limit, the caller's, filtered by metadata.
	ids := map[string]bool{id: true}
	for range 2 {
		r := e2bDo(t, ts, "POST", "/sandboxes", ann, `{"metadata":{"k":"w"}}`)
		json.Unmarshal(r.body, &sb)
		ids[sb.SandboxID] = true
	}
	got, token := map[string]bool{}, ""
	for page := 0; ; page++ {
		q := "/v2/sandboxes?limit=2"
		if token != "" {
			q += "&nextToken=" + token
		}
		r := e2bDo(t, ts, "GET", q, ann, "")
		var list []struct{ SandboxID, State string }
		if err := json.Unmarshal(r.body, &list); err != nil || len(list) > 2 || page > 3 {
			t.Fatalf("list page %d: %s", page, r.body)
		}
		for _, s := range list {
			if _, twice := got[s.SandboxID]; twice {
				t.Errorf("list: %s on two pages", s.SandboxID)
			}
			got[s.SandboxID] = s.State == "running"
		}
		if token = r.header.Get("X-Next-Token"); token == "" {
			break
		}
		if last := list[len(list)-1].SandboxID; page == 0 && last != id {
			// The last of a page ends before the next is asked for: the
			// next page still begins after it.
			e2bDo(t, ts, "DELETE", "/sandboxes/"+last, ann, "")
		}
	}
	if len(got) != 3 || !got[id] {
		t.Errorf("list in pages: %v, want %v", got, ids)
	}
	r = e2bDo(t, ts, "GET", "/v2/sandboxes?metadata=k%3Dv&state=running,paused", ann, "")
	var list []struct{ SandboxID string }
	if json.Unmarshal(r.body, &list); len(list) != 1 || list[0].SandboxID != id {
		t.Errorf("list metadata k=v: %s", r.body)
	}
	e2bErrorOf(t, "a forged nextToken", e2bDo(t, ts, "GET", "/v2/sandboxes?nextToken=Li4v", ann, ""), http.StatusBadRequest)
	e2bErrorOf(t, "a long nextToken", e2bDo(t, ts, "GET", "/v2/sandboxes?nextToken="+strings.Repeat("A", 300), ann, ""), http.StatusBadRequest)
	e2bErrorOf(t, "limit 1000", e2bDo(t, ts, "GET", "/v2/sandboxes?limit=1000", ann, ""), http.StatusBadRequest)

	if r := e2bDo(t, ts, "DELETE", "/sandboxes/"+id, ann, ""); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	e2bErrorOf(t, "get after kill", e2bDo(t, ts, "GET", "/sandboxes/"+id, ann, ""), http.StatusNotFound)
}

// envdCall calls one of envd's procedures on sandbox id as the SDK does.
func envdCall[Req, Res any](t *testing.T, ts *testServer, id, token, proc string, req *Req) (*Res, error) {
	t.Helper()
	c := connect.NewClient[Req, Res](http.DefaultClient, ts.URL+"/e2b/sandbox/filesystem.Filesystem/"+proc, connect.WithCodec(jsonCodec{}))
	r := connect.NewRequest(req)
	r.Header().Set("E2b-Sandbox-Id", id)
	r.Header().Set("E2b-Sandbox-Port", "49983")
	r.Header().Set("X-Access-Token", token)
	res, err := c.CallUnary(context.Background(), r)
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

type envdEntry struct {
	Name, Type, Path, Size, ModifiedTime string
}

// TestE2BFilesystem: envd's filesystem service and /files on a session's
// workspace — stat, make dir, move, list to a depth, remove, upload as
// multipart (several files, each named by its path) and as one body,
// download — and every path that leads out refused: "..", an absolute
// path outside /home/user, a symbolic link out (read, listed into,
// moved onto), a multipart file name with "..", and uploads past the
// file size limit.
func TestE2BFilesystem(t *testing.T) {
	t.Parallel()
	var dir string
	ts := start(t, "", func(c *server.Config) {
		dir = c.DataDir + "-sessions"
		c.Sessions.MaxFileBytes = 1 << 20
	})
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	tok := server.E2BAccessToken(ts.Server, id, "acme", "ann")

	files := func(method, query, ctype string, body []byte) response {
		return ts.do(t, method, "/e2b/sandbox/files?"+query, "", bytes.NewReader(body), "E2b-Sandbox-Id", id,
			"E2b-Sandbox-Port", "49983", "X-Access-Token", tok, "Content-Type", ctype)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	for _, f := range [][2]string{{"/home/user/d/a.txt", "aaa"}, {"d/e/b.txt", "bb"}} {
		w, _ := mw.CreateFormFile("file", f[0])
		w.Write([]byte(f[1]))
	}
	mw.Close()
	if r := files("POST", "", mw.FormDataContentType(), form.Bytes()); r.status != http.StatusOK || !strings.Contains(string(r.body), `"path":"/home/user/d/e/b.txt"`) {
		t.Fatalf("multipart upload: %d %s", r.status, r.body)
	}
	if r := files("POST", "path=c.txt&username=user", "application/octet-stream", []byte("cc")); r.status != http.StatusOK {
		t.Fatalf("octet-stream upload: %d %s", r.status, r.body)
	}
	if r := files("GET", "path=/home/user/d/a.txt", "", nil); r.status != http.StatusOK || string(r.body) != "aaa" {
		t.Fatalf("download: %d %s", r.status, r.body)
	}

	st, err := envdCall[map[string]string, struct{ Entry envdEntry }](t, ts, id, tok, "Stat", &map[string]string{"path": "d/a.txt"})
	if err != nil || st.Entry.Type != "FILE_TYPE_FILE" || st.Entry.Size != "3" || st.Entry.Path != "/home/user/d/a.txt" || len(st.Entry.ModifiedTime) != len("2006-01-02T15:04:05.000000000Z") {
		t.Fatalf("stat: %+v %v", st, err)
	}
	if _, err := envdCall[map[string]string, struct{ Entry envdEntry }](t, ts, id, tok, "MakeDir", &map[string]string{"path": "m/n"}); err != nil {
		t.Fatalf("makeDir: %v", err)
	}
	if _, err := envdCall[map[string]string, struct{ Entry envdEntry }](t, ts, id, tok, "MakeDir", &map[string]string{"path": "m/n"}); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("makeDir again: %v, want already exists", err)
	}
	mv, err := envdCall[map[string]string, struct{ Entry envdEntry }](t, ts, id, tok, "Move", &map[string]string{"source": "c.txt", "destination": "m/n/c2.txt"})
	if err != nil || mv.Entry.Path != "/home/user/m/n/c2.txt" {
		t.Fatalf("move: %+v %v", mv, err)
	}
	list := func(p string, depth int) ([]envdEntry, error) {
		l, err := envdCall[map[string]any, struct{ Entries []envdEntry }](t, ts, id, tok, "ListDir", &map[string]any{"path": p, "depth": depth})
		if err != nil {
			return nil, err
		}
		return l.Entries, nil
	}
	if es, err := list("/home/user", 1); err != nil || len(es) != 2 {
		t.Errorf("list depth 1: %+v %v, want d and m", es, err)
	}
	if es, err := list("", 3); err != nil || len(es) != 7 {
		t.Errorf("list depth 3: %+v %v, want 7 names", es, err)
	}
	if _, err := envdCall[map[string]string, struct{}](t, ts, id, tok, "Remove", &map[string]string{"path": "m"}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := envdCall[map[string]string, struct{ Entry envdEntry }](t, ts, id, tok, "Stat", &map[string]string{"path": "m/n/c2.txt"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("stat after remove: %v", err)
	}

	// A polled watcher: the names that came since the last look; another
	// sandbox cannot read or remove it.
	wid, err := envdCall[map[string]string, struct{ WatcherID string }](t, ts, id, tok, "CreateWatcher", &map[string]string{"path": "/home/user"})
	if err != nil || wid.WatcherID == "" {
		t.Fatalf("createWatcher: %+v %v", wid, err)
	}
	files("POST", "path=new.txt", "application/octet-stream", []byte("n"))
	type events struct{ Events []struct{ Name, Type string } }
	if evs, err := envdCall[map[string]string, events](t, ts, id, tok, "GetWatcherEvents", &map[string]string{"watcherId": wid.WatcherID}); err != nil ||
		len(evs.Events) != 1 || evs.Events[0].Name != "new.txt" || evs.Events[0].Type != "EVENT_TYPE_CREATE" {
		t.Errorf("getWatcherEvents: %+v %v", evs, err)
	}
	other := newSession(t, ts, ann)
	otherTok := server.E2BAccessToken(ts.Server, other, "acme", "ann")
	if _, err := envdCall[map[string]string, events](t, ts, other, otherTok, "GetWatcherEvents", &map[string]string{"watcherId": wid.WatcherID}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("another sandbox's getWatcherEvents: %v", err)
	}
	if _, err := envdCall[map[string]string, struct{}](t, ts, other, otherTok, "RemoveWatcher", &map[string]string{"watcherId": wid.WatcherID}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("another sandbox's removeWatcher: %v", err)
	}
	if _, err := envdCall[map[string]string, struct{}](t, ts, id, tok, "RemoveWatcher", &map[string]string{"watcherId": wid.WatcherID}); err != nil {
		t.Errorf("removeWatcher: %v", err)
	}
	if _, err := envdCall[map[string]string, events](t, ts, id, tok, "GetWatcherEvents", &map[string]string{"watcherId": wid.WatcherID}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("getWatcherEvents after remove: %v", err)
	}

	// Hostile paths.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	if err := os.Symlink(outside, filepath.Join(dir, id, "link")); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{"..": "../x", "an absolute path outside": "/etc/passwd", "a link out": "link/secret", "NUL": "a\x00b"} {
		if _, err := envdCall[map[string]string, struct{ Entry envdEntry }](t, ts, id, tok, "Stat", &map[string]string{"path": p}); err == nil {
			t.Errorf("stat %s: answered", name)
		}
		if r := files("GET", "path="+strings.ReplaceAll(p, "\x00", "%00"), "", nil); r.status == http.StatusOK {
			t.Errorf("download %s: %d %s", name, r.status, r.body)
		}
	}
	if _, err := list("link", 1); err == nil {
		t.Error("list through a link out: answered")
	}
	if _, err := envdCall[map[string]string, struct{ Entry envdEntry }](t, ts, id, tok, "Move", &map[string]string{"source": "d/a.txt", "destination": "link/stolen"}); err == nil {
		t.Error("move onto a link out: answered")
	}
	if _, err := envdCall[map[string]string, struct{ Entry envdEntry }](t, ts, id, tok, "Move", &map[string]string{"source": "d/a.txt", "destination": "/tmp/x"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("move outside: %v", err)
	}
	if _, err := list("", 33); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("list depth 33: %v", err)
	}
	form.Reset()
	mw = multipart.NewWriter(&form)
	w, _ := mw.CreateFormFile("file", "../../escape.txt")
	w.Write([]byte("x"))
	mw.Close()
	if r := files("POST", "", mw.FormDataContentType(), form.Bytes()); r.status != http.StatusBadRequest {
		t.Errorf("multipart name ..: %d %s", r.status, r.body)
	}
	if r := files("POST", "path=big", "application/octet-stream", make([]byte, 1<<20+1)); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("an upload past max_file_bytes: %d %s", r.status, r.body)
	}
	if r := files("POST", "path=x&username=admin", "application/octet-stream", []byte("x")); r.status != http.StatusBadRequest {
		t.Errorf("another username: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(outside, "stolen")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file reached outside the workspace: %v", err)
	}
	if r := ts.do(t, "GET", "/e2b/sandbox/health", "", nil, "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "49983", "X-Access-Token", "forged"); r.status != http.StatusBadGateway {
		t.Errorf("health with a forged token: %d, want 502 (not running, as E2B's proxy answers)", r.status)
	}
}

// TestE2BSDK drives moat with E2B's stock JS SDKs (server/testdata/e2b,
// installed by make e2b-sdk): an agent's code with E2B_API_URL and
// E2B_SANDBOX_URL pointing at moat and its moat key as the E2B key —
// create, stateful runCode in python and js, contexts, files both ways,
// watchDir, hostile code held by the workspace's grant (/etc, .., a
// symbolic link out), setTimeout, connect, list, another organization
// refused, kill; each step's time is logged.
func TestE2BSDK(t *testing.T) {
	testenv.Slow(t, "runs node and cold interpreters")
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Require(t, "node is not installed (apt-get install nodejs)")
	}
	sdk, _ := filepath.Abs("testdata/e2b")
	for _, p := range []string{"node_modules/e2b/package.json", "node_modules/@e2b/code-interpreter/package.json"} {
		if _, err := os.Stat(filepath.Join(sdk, p)); err != nil {
			testenv.Require(t, "the E2B SDKs are not installed: make e2b-sdk")
		}
	}
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk.mjs")
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "E2B_API_URL="+ts.URL+"/e2b", "E2B_SANDBOX_URL="+ts.URL+"/e2b/sandbox",
		"E2B_API_KEY="+ann, "OTHER_KEY="+eve, "E2B_DOMAIN=localhost")
	began := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("the SDK script (%v):\n%s", time.Since(began).Round(time.Millisecond), out)
	if err != nil {
		if strings.Contains(string(out), toolchains.ErrMissing.Error()) {
			testenv.Require(t, string(out))
		}
		t.Fatalf("the SDK script failed: %v", err)
	}
	if !strings.Contains(string(out), "ok kill") {
		t.Fatal("the SDK script stopped before its last step")
	}
}

// TestE2BInterpreterRefusals: the code interpreter's routes refuse, before
// any interpreter starts, what a request may shape wrongly — no token or
// another session's, per-run env_vars, a language moat does not run, a
// context id that is not a context name, code past 1 MiB, a cwd outside
// the workspace — and a context that does not exist is a 404.
func TestE2BInterpreterRefusals(t *testing.T) {
	t.Parallel()
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	id, other := newSession(t, ts, ann), newSession(t, ts, ann)
	tok := server.E2BAccessToken(ts.Server, id, "acme", "ann")
	call := func(method, path, token, body string, traffic bool) response {
		h := "X-Access-Token"
		if traffic {
			h = "E2B-Traffic-Access-Token"
		}
		return ts.do(t, method, "/e2b/sandbox"+path, "", strings.NewReader(body), "E2b-Sandbox-Id", id,
			"E2b-Sandbox-Port", "49999", h, token, "Content-Type", "application/json")
	}
	for name, c := range map[string]struct {
		method, path, token, body string
		want                      int
	}{
		"no token":                    {"POST", "/execute", "", `{"code":"1"}`, 404},
		"another session's token":     {"POST", "/execute", server.E2BAccessToken(ts.Server, other, "acme", "ann"), `{"code":"1"}`, 404},
		"per-run env_vars":            {"POST", "/execute", tok, `{"code":"1","env_vars":{"A":"1"}}`, 400},
		"cobol":                       {"POST", "/execute", tok, `{"code":"1","language":"cobol"}`, 400},
		"context and language":        {"POST", "/execute", tok, `{"code":"1","language":"python","context_id":"python"}`, 400},
		"a context id with a path":    {"POST", "/execute", tok, `{"code":"1","context_id":"python-../../x"}`, 400},
		"code past 1 MiB":             {"POST", "/execute", tok, `{"code":"` + strings.Repeat("x", 1<<20+70<<10) + `"}`, 413},
		"not JSON":                    {"POST", "/execute", tok, `{"code":`, 400},
		"a cwd outside the workspace": {"POST", "/contexts", tok, `{"language":"python","cwd":"/etc"}`, 400},
		"a context language":          {"POST", "/contexts", tok, `{"language":"cobol"}`, 400},
		"remove a missing context":    {"DELETE", "/contexts/python-0", tok, ``, 404},
		"restart a missing context":   {"POST", "/contexts/python-0/restart", tok, ``, 404},
	} {
		if r := call(c.method, c.path, c.token, c.body, false); r.status != c.want {
			t.Errorf("%s: %d %.200s, want %d", name, r.status, r.body, c.want)
		}
	}
	if r := call("GET", "/contexts", tok, "", true); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "[]" {
		t.Errorf("list contexts with the traffic token: %d %s", r.status, r.body)
	}
}
