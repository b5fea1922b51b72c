package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/all"
	"github.com/moat-sandbox/moat/server"
)

func withExecutor(t *testing.T) func(*server.Config) {
	return func(c *server.Config) {
		c.Piston.Enabled = true
		c.NewExecutor = func(h *host.Host, a *audit.Log) (server.Executor, error) {
			e, err := languages.NewExecutor(languages.ExecutorConfig{Host: h, Audit: a, BuildCacheDir: filepath.Join(c.DataDir, "build")})
			if err != nil {
				return nil, err
			}
			return e, nil
		}
	}
}

func requireC(t *testing.T, ts *testServer) {
	r := ts.do(t, "GET", "/api/v2/runtimes", "", nil)
	if !strings.Contains(string(r.body), `"language":"c"`) {
		testenv.Require(t, fmt.Sprintf("the c language is not available (make toolchains): %s", r.body))
	}
}

// TestRunsWithExecutor runs C through /v1/runs with the real executor.
func TestRunsWithExecutor(t *testing.T) {
	ts := start(t, "", withExecutor(t))
	requireC(t, ts)
	key := ts.key(t, "acme", "ann", "admin")
	r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(`{"language":"c","files":[{"name":"main.c","content":"#include <stdio.h>\nint main(void){char b[64];fgets(b,64,stdin);printf(\"got %s\",b);return 0;}\n"}],"stdin":"hi\n"}`), "Content-Type", "application/json")
	m := r.json(t)
	if r.status != 200 || m["status"] != "ok" || m["stdout"] != "got hi\n" {
		t.Fatalf("/v1/runs: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/v1/runs", key, strings.NewReader(`{"runs":[{"language":"c","files":[{"name":"a.c","content":"int main(void){return 3;}"}]},{"language":"gcc","files":[{"name":"b.c","content":"int main(void){ oops }"}]}]}`))
	var batch struct{ Runs []server.RunResult }
	json.Unmarshal(r.body, &batch)
	if r.status != 200 || len(batch.Runs) != 2 || batch.Runs[0].Status != languages.StatusRuntimeError || batch.Runs[0].ExitCode != 3 || batch.Runs[1].Status != languages.StatusCompileError {
		t.Errorf("batch: %d %s", r.status, r.body)
	}
}

// TestPistonWithExecutor sends a Piston client's requests unchanged:
// JSON as text/plain, no auth, and reads Piston's response shape.
func TestPistonWithExecutor(t *testing.T) {
	ts := start(t, "", withExecutor(t))
	requireC(t, ts)
	r := ts.do(t, "POST", "/api/v2/execute", "", strings.NewReader(`{"language":"c","version":"*","files":[{"name":"main.c","content":"#include <stdio.h>\nint main(int c,char**v){printf(\"%s\\n\",v[1]);fprintf(stderr,\"e\\n\");return 0;}"}],"args":["arg1"],"run_timeout":3000}`), "Content-Type", "text/plain;charset=UTF-8")
	var res struct {
		Language, Version string
		Run, Compile      *struct {
			Stdout, Stderr, Output string
			Code                   *int
			Signal                 *string
		}
	}
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != http.StatusOK {
		t.Fatalf("execute: %d %s", r.status, r.body)
	}
	if res.Language != "c" || res.Run == nil || res.Run.Stdout != "arg1\n" || res.Run.Stderr != "e\n" || res.Run.Code == nil || *res.Run.Code != 0 || res.Compile == nil {
		t.Errorf("execute response: %s", r.body)
	}
	r = ts.do(t, "POST", "/api/v2/execute", "", strings.NewReader(`{"language":"clang","version":"*","files":[{"content":"int main(void){ oops }"}]}`))
	if !strings.Contains(string(r.body), `"compile":{`) || strings.Contains(string(r.body), `"run":`) || !strings.Contains(string(r.body), `"code":1`) {
		t.Errorf("compile error: %s", r.body)
	}
	for body, want := range map[string]string{
		`{"language":"cobol","version":"*","files":[{"content":"x"}]}`:                  "cobol-* runtime is unknown",
		`{"language":"c","files":[{"content":"x"}]}`:                                    "version is required as a string",
		`{"language":"c","version":"*","files":[{"content":"x"}],"run_timeout":999999}`: "run_timeout cannot exceed the configured limit of 3000",
	} {
		if r := ts.do(t, "POST", "/api/v2/execute", "", strings.NewReader(body)); r.status != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %d %s, want 400 %q", body, r.status, r.body, want)
		}
	}
}

// TestConsoleRunCode runs C from the console's Run code tab in headless
// Chromium.
func TestConsoleRunCode(t *testing.T) {
	bin := chromium(t)
	ts := start(t, "", withExecutor(t))
	requireC(t, ts)
	key := ts.key(t, "acme", "ann", "admin")
	actx, acancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(bin), chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true), chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(profileDir(t)), chromedp.WindowSize(1280, 900))
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var stdout string
	var png []byte
	err := chromedp.Run(ctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.SendKeys("#api-key", key, chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.WaitVisible(`.tab[data-tab="run"]`, chromedp.ByQuery),
		chromedp.Click(`.tab[data-tab="run"]`, chromedp.ByQuery),
		chromedp.WaitReady(`#run-language option[value="c"]`, chromedp.ByQuery),
		chromedp.Evaluate(`(() => { const s = document.querySelector("#run-language"); s.value = "c"; s.dispatchEvent(new Event("change")); })()`, nil),
		chromedp.Click("#run", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#run-stdout").textContent.length > 0`, nil, chromedp.WithPollingTimeout(60*time.Second)),
		chromedp.Text("#run-stdout", &stdout, chromedp.ByQuery),
		chromedp.FullScreenshot(&png, 100),
	)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.ArtifactDir(), "console-run.png")
	os.WriteFile(p, png, 0o644)
	t.Logf("screenshot: %s", p)
	if stdout != "hello from C\n" {
		t.Errorf("stdout on the page = %q", stdout)
	}
}

// TestRunsUnknownLanguage: a mistyped language is a 400 naming the likely
// one; a name built to be long gets no suggestion and no slow answer.
func TestRunsUnknownLanguage(t *testing.T) {
	ts := start(t, "", withExecutor(t))
	key := ts.key(t, "acme", "ann", "admin")
	for _, tc := range []struct{ lang, want, not string }{
		{"javscript", `did you mean \"javascript\"?`, ""},
		{"cobol", "is not offered here; GET /v1/languages", "did you mean"},
		{strings.Repeat("pyton", 1000), "is not offered here", "did you mean"},
	} {
		body := `{"language":"` + tc.lang + `","files":[{"name":"main.x","content":"x"}]}`
		r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(body), "Content-Type", "application/json")
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), tc.want) || tc.not != "" && strings.Contains(string(r.body), tc.not) {
			t.Errorf("%.20s: %d %s; want 400 with %q", tc.lang, r.status, r.body, tc.want)
		}
	}
}

// TestRunsNumpyPandas: POST /v1/runs runs a python3-native program that
// uses Debian's numpy and pandas (issue 33, item 4).
func TestRunsNumpyPandas(t *testing.T) {
	testenv.Slow(t, "a server and pandas' import: about 8 s")
	if why := testenv.NativePython(true); why != "" {
		testenv.Require(t, why)
	}
	if _, err := os.Stat("/usr/lib/python3/dist-packages/pandas"); err != nil {
		testenv.Require(t, "Debian's python3-pandas is not installed (make deps)")
	}
	ts := start(t, "", withExecutor(t))
	key := ts.key(t, "acme", "ann", "dev")
	body, _ := json.Marshal(map[string]any{"language": "python3-native", "files": []map[string]string{{"name": "main.py",
		"content": "import numpy as np, pandas as pd\ns = pd.Series(np.array([3, 1, 2]))\nprint(s.sort_values().tolist(), s.mean())\n"}}})
	r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(string(body)), "Content-Type", "application/json")
	if m := r.json(t); r.status != 200 || m["status"] != "ok" || m["stdout"] != "[1, 2, 3] 2.0\n" {
		t.Fatalf("/v1/runs: %d %s", r.status, r.body)
	}
}
