package server_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/server"
)

// gatedExecutor is the real executor with a controllable delay in its
// first-time work: each Preparing call (the executor's own, as a job
// starts a build not in the cache or a WASM load) is announced on entered
// and holds the job there until release is closed. The work itself, and
// everything the server does around it, is the real code path.
type gatedExecutor struct {
	*languages.Executor
	entered chan string
	release chan struct{}
}

func (g *gatedExecutor) Exec(ctx context.Context, req languages.ExecRequest) (*languages.ExecResult, error) {
	if p := req.Preparing; p != nil {
		req.Preparing = func(stage string) func() {
			done := p(stage)
			select {
			case g.entered <- req.Language + " " + stage:
			default:
			}
			select {
			case <-g.release:
			case <-ctx.Done():
			}
			return done
		}
	}
	return g.Executor.Exec(ctx, req)
}

// open releases the held jobs, once.
func (g *gatedExecutor) open() {
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

// wait returns the next first-time work a job entered, failing the test
// if none does within 30 s.
func (g *gatedExecutor) wait(t *testing.T) string {
	t.Helper()
	select {
	case s := <-g.entered:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no job entered first-time work within 30 s")
		return ""
	}
}

func withGatedExecutor(g *gatedExecutor) func(*server.Config) {
	return func(c *server.Config) {
		c.NewExecutor = func(h *host.Host, a *audit.Log) (server.Executor, error) {
			e, err := languages.NewExecutor(languages.ExecutorConfig{Host: h, Audit: a, BuildCacheDir: filepath.Join(c.DataDir, "build")})
			g.Executor = e
			return g, err
		}
	}
}

func languageStates(t *testing.T, ts *testServer, key string) map[string]server.LanguageJSON {
	t.Helper()
	r := ts.do(t, "GET", "/v1/languages", key, nil)
	var body struct{ Languages []server.LanguageJSON }
	if err := json.Unmarshal(r.body, &body); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/languages: %d %s", r.status, r.body)
	}
	out := map[string]server.LanguageJSON{}
	for _, l := range body.Languages {
		out[l.Name] = l
	}
	return out
}

// TestLanguageStates: JavaScript is cold until a run of it has reached its
// run stage, preparing (with since and the stage) while a run is in its
// first-time work, and ready after; a native interpreter has no
// first-time work and is ready from the start.
func TestLanguageStates(t *testing.T) {
	g := &gatedExecutor{entered: make(chan string, 8), release: make(chan struct{})}
	ts := start(t, "", withGatedExecutor(g))
	t.Cleanup(g.open) // before the server stops, should the test end early
	key := ts.key(t, "acme", "ann", "admin")

	st := languageStates(t, ts, key)
	js, ok := st["javascript"]
	if !ok || js.State != server.LangCold || !strings.Contains(js.FirstRun, "interpreter") || js.Since != nil {
		t.Fatalf("javascript before any run: %+v, want cold saying what the first run does", js)
	}
	for _, l := range st {
		if l.Path == languages.PathNative && l.State != server.LangReady && l.State != server.LangUnavailable {
			t.Errorf("%s (native): %s, want ready (no first-time work) or unavailable", l.Name, l.State)
		}
	}

	before := time.Now().UTC()
	done := make(chan response, 1)
	go func() {
		done <- ts.do(t, "POST", "/v1/runs", key, strings.NewReader(`{"language":"javascript","files":[{"name":"main.js","content":"console.log('hi')"}]}`))
	}()
	if got := g.wait(t); !strings.HasPrefix(got, "javascript ") {
		t.Fatalf("entered %q, want javascript's first-time work", got)
	}
	js = languageStates(t, ts, key)["javascript"]
	if js.State != server.LangPreparing || js.Since == nil || js.Since.Before(before.Add(-time.Second)) || js.Stage == "" || js.FirstRun == "" {
		t.Errorf("javascript during its first run: %+v, want preparing since the run began, with the stage", js)
	}
	g.open()
	if r := <-done; r.status != 200 || !strings.Contains(string(r.body), `"stdout":"hi\n"`) {
		t.Fatalf("the run: %d %s", r.status, r.body)
	}
	if js = languageStates(t, ts, key)["javascript"]; js.State != server.LangReady || js.Since != nil || js.FirstRun != "" {
		t.Errorf("javascript after its first run: %+v, want ready", js)
	}
}

// TestLanguageStateUnavailable: with no toolchains directory, a language
// that needs one is listed as unavailable with what is missing and the
// command that installs it, and is not offered to /v1/runs.
func TestLanguageStateUnavailable(t *testing.T) {
	t.Setenv("MOAT_TOOLCHAINS", t.TempDir())
	ts := start(t, "", withExecutor(t))
	key := ts.key(t, "acme", "ann", "admin")
	py, ok := languageStates(t, ts, key)["python"]
	if !ok || py.State != server.LangUnavailable || py.Missing == "" || py.Fix != "moat toolchains install python" {
		t.Fatalf("python without toolchains: %+v, want unavailable with missing and fix", py)
	}
	r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(`{"language":"python","files":[{"name":"main.py","content":"print(1)"}]}`))
	if r.status != 400 || !strings.Contains(string(r.body), "not offered here") {
		t.Errorf("a run of an unavailable language: %d %s, want 400 not offered", r.status, r.body)
	}
}

// TestLanguagesWarm: languages.warm does the first-time work at start, in
// the background: the language reads preparing while it runs and ready
// after, with no run asked for; a name that is no language is refused at
// load with the field and a suggestion.
func TestLanguagesWarm(t *testing.T) {
	g := &gatedExecutor{entered: make(chan string, 8), release: make(chan struct{})}
	ts := start(t, "", func(c *server.Config) {
		withGatedExecutor(g)(c)
		c.Languages.Warm = []string{"js"}
	})
	t.Cleanup(g.open)
	key := ts.key(t, "acme", "ann", "admin")
	g.wait(t)
	if js := languageStates(t, ts, key)["javascript"]; js.State != server.LangPreparing || js.Since == nil {
		t.Errorf("javascript while warming: %+v, want preparing", js)
	}
	g.open()
	deadline := time.Now().Add(30 * time.Second)
	for languageStates(t, ts, key)["javascript"].State != server.LangReady {
		if time.Now().After(deadline) {
			t.Fatalf("javascript never became ready after warming: %+v", languageStates(t, ts, key)["javascript"])
		}
		time.Sleep(20 * time.Millisecond)
	}

	_, err := server.ParseConfig("moat-server.yaml", []byte("languages:\n  warm: [python, pyton]\n"))
	if err == nil || !strings.Contains(err.Error(), "languages.warm[1]") || !strings.Contains(err.Error(), "python") {
		t.Errorf("warm: [python, pyton]: %v, want an error naming languages.warm[1] and suggesting python", err)
	}
}

// TestRunsStreamPreparing: a streamed run that does first-time work (a
// cold JavaScript: QuickJS compiled to machine code) past a second says so,
// a "preparing" event naming the language, the stage and what the first
// run does, and a "prepared" event with how long it took, before its
// output and result: the client of a first run is not left waiting in
// silence.
func TestRunsStreamPreparing(t *testing.T) {
	g := &gatedExecutor{entered: make(chan string, 8), release: make(chan struct{})}
	ts := start(t, "", withGatedExecutor(g))
	t.Cleanup(g.open)
	key := ts.key(t, "acme", "ann")
	done := make(chan []sseEvent, 1)
	go func() {
		done <- postSSE(t, ts.URL+"/v1/runs", key, `{"language":"javascript","files":[{"name":"main.js","content":"console.log('hi')"}]}`)
	}()
	if got := g.wait(t); !strings.HasPrefix(got, "javascript ") {
		t.Fatalf("entered %q, want javascript's first-time work", got)
	}
	time.Sleep(1500 * time.Millisecond) // past the second a quick step is silent for
	g.open()
	evs := <-done
	var names []string
	for _, e := range evs {
		names = append(names, e.name)
	}
	if len(evs) < 3 || evs[0].name != "preparing" || evs[len(evs)-1].name != "result" {
		t.Fatalf("events %v, want preparing first and result last", names)
	}
	if p := evs[0].data; p["language"] != "javascript" || p["stage"] == "" || !strings.Contains(p["first_run"].(string), "once per machine") {
		t.Errorf("preparing event: %v", p)
	}
	prepared := false
	for _, e := range evs {
		if e.name == "prepared" {
			_, ok := e.data["took_ms"].(float64)
			prepared = ok && e.data["language"] == "javascript"
		}
	}
	if !prepared {
		t.Errorf("no prepared event with took_ms: %v", names)
	}
	if res := evs[len(evs)-1].data; res["stdout"] != "hi\n" {
		t.Errorf("result: %v", res)
	}
}
