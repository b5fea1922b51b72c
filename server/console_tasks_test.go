package server_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// TestConsoleTasksInChromium: the console's Tasks tab lists the
// organization's tasks with their state, and shows a task's error (text
// a module wrote, here HTML) as text, never as markup.
func TestConsoleTasksInChromium(t *testing.T) {
	bin := chromium(t)
	ts := start(t, "", func(c *server.Config) { c.Profile = "dev" })
	key := ts.key(t, "acme", "ann", "admin")
	if r := ts.upload(t, key, testwasm.BuildGo(t, "./testdata/taskguest", true), []byte(taskerManifest)); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	const hostile = `<img src=x onerror="document.title='pwned'">`
	var ids []string
	for _, req := range []string{`{"action":"work","input":"fine"}`, `{"action":"boom","input":"` + strings.ReplaceAll(hostile, `"`, `\"`) + `","max_attempts":1}`} {
		r := ts.do(t, "POST", "/v1/modules/tasker/actions/start", key, strings.NewReader(req))
		var out struct{ ID string }
		if r.status != http.StatusOK || json.Unmarshal(r.body, &out) != nil {
			t.Fatalf("start %s: %d %s", req, r.status, r.body)
		}
		ids = append(ids, out.ID)
	}
	for _, id := range ids {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var tk server.TaskJSON
			json.Unmarshal(ts.do(t, "GET", "/v1/tasks/"+id, key, nil).body, &tk)
			if tk.State == "done" || tk.State == "failed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s: %+v", id, tk)
			}
		}
	}

	bctx := browser(t, bin, 90*time.Second, chromedp.WindowSize(1280, 900))
	var table, title string
	var imgs int
	var png []byte
	err := chromedp.Run(bctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible("#api-key", chromedp.ByQuery),
		chromedp.SendKeys("#api-key", key, chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.WaitVisible(`#modules li[data-name="tasker"]`, chromedp.ByQuery),
		chromedp.Click(`button[data-tab="tasks"]`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll("#tasks-all tr").length >= 2`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("#tasks-all", &table, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#tasks-all img").length`, &imgs),
		chromedp.Title(&title),
		chromedp.FullScreenshot(&png, 100),
	)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	p := filepath.Join(t.ArtifactDir(), "console-tasks.png")
	os.WriteFile(p, png, 0o644)
	t.Logf("screenshot: %s", p)
	for _, want := range append(ids, "done", "failed", "work", "boom", hostile) {
		if !strings.Contains(table, want) {
			t.Errorf("the tasks table lacks %q:\n%s", want, table)
		}
	}
	if imgs != 0 || title == "pwned" {
		t.Errorf("a task's error became markup: %d <img>, title %q", imgs, title)
	}
}
