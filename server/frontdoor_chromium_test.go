package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestConsoleUnderCSP runs the console in headless Chromium under the
// server's Content-Security-Policy: no part of the console breaks it (a
// listener installed before any script records every violation), and a
// module's hostile output (markup, a script, an event handler) shows as
// text and runs nothing.
func TestConsoleUnderCSP(t *testing.T) {
	bin := chromium(t)
	ts := start(t, "", nil)
	key := ts.key(t, "acme", "ann", "admin")
	spinModule(t, ts, key, "spin", testwasm.BuildGo(t, "./testdata/goguest", true))
	// hello-js made to log its input as the message, then 300 records more
	// than a response carries.
	uploadJS(t, ts, key, `import * as moat from "./moat.js";
const input = std.in.readAsString() ?? "";
moat.log.warn(input, { input });
for (let i = 0; i < 300; i++) moat.log.info("record " + i);
print("logged");
`)
	bctx := browser(t, bin, 90*time.Second)

	const hostile = `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script><svg onload="window.pwned=3"></svg>`
	var output string
	var violations []string
	var pwned bool
	err := chromedp.Run(bctx,
		recordCSPViolations(),
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible("#api-key", chromedp.ByQuery),
		chromedp.SendKeys("#api-key", key, chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.WaitVisible(`#modules li[data-name="spin"]`, chromedp.ByQuery),
		chromedp.Click(`#modules li[data-name="spin"]`, chromedp.ByQuery),
		chromedp.SetValue("#input", hostile, chromedp.ByQuery),
		chromedp.Evaluate(`(() => { const s = document.querySelector("#action-select"); if (s) { s.value = "echo"; s.dispatchEvent(new Event("change")); } })()`, nil),
		chromedp.Click("#invoke", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#output").textContent.length > 0`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Sleep(300*time.Millisecond),
		chromedp.Text("#output", &output, chromedp.ByQuery),
		chromedp.Evaluate(`window.violations`, &violations),
		chromedp.Evaluate(`window.pwned !== undefined`, &pwned),
	)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	if output != hostile {
		t.Errorf("the hostile output shows as %q; want its text %q", output, hostile)
	}
	if pwned {
		t.Error("the module's output ran in the console")
	}
	if len(violations) > 0 {
		t.Errorf("the console breaks its CSP: %v", violations)
	}

	// A failed invocation (loop passes its 1500ms timeout) is an error in
	// its own box, not a green pill and not output.
	var pill, title, after string
	var errShown bool
	err = chromedp.Run(bctx,
		chromedp.Evaluate(`(() => { const s = document.querySelector("#action-select"); s.value = "loop"; s.dispatchEvent(new Event("change")); })()`, nil),
		chromedp.Click("#invoke", chromedp.ByQuery),
		chromedp.Poll(`!document.querySelector("#invoke-error").hidden`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Text("#result-status", &pill, chromedp.ByQuery),
		chromedp.Text("#invoke-error-title", &title, chromedp.ByQuery),
		chromedp.Text("#output", &after, chromedp.ByQuery),
		chromedp.Evaluate(`!document.querySelector("#invoke-error").hidden`, &errShown),
	)
	if err != nil {
		t.Fatalf("failed invocation: %v", err)
	}
	if !errShown || strings.HasPrefix(pill, "200") || !strings.Contains(title, "(") || after != "" {
		t.Errorf("failed invocation: pill %q, error box %v %q, output %q; want a non-200 pill, the problem in the error box, no output", pill, errShown, title, after)
	}

	// Guest logs holding markup show as text; past a response's 200
	// records the page says how many more there were.
	var first, dropped string
	var rows int
	err = chromedp.Run(bctx,
		chromedp.Click(`#modules li[data-name="hello-js"]`, chromedp.ByQuery),
		chromedp.SetValue("#input", hostile, chromedp.ByQuery),
		chromedp.Click("#invoke", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#output").textContent === "logged"`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Sleep(300*time.Millisecond),
		chromedp.Evaluate(`document.querySelector("#invoke-logs .log-message").textContent`, &first),
		chromedp.Evaluate(`document.querySelectorAll("#invoke-logs tr").length`, &rows),
		chromedp.Text("#invoke-logs-dropped", &dropped, chromedp.ByQuery),
		chromedp.Evaluate(`window.pwned !== undefined`, &pwned),
		chromedp.Evaluate(`window.violations`, &violations),
	)
	if err != nil {
		t.Fatalf("guest logs: %v", err)
	}
	if first != hostile || pwned {
		t.Errorf("a guest log record of markup shows as %q (ran: %v); want its text %q", first, pwned, hostile)
	}
	if rows != 200 || !strings.HasPrefix(dropped, "101 more record") {
		t.Errorf("%d log rows, dropped note %q; want 200 rows and 101 more", rows, dropped)
	}
	if len(violations) > 0 {
		t.Errorf("the console breaks its CSP: %v", violations)
	}
}

// screenshot saves a full-page screenshot as name in the test's artifact
// directory (go test -artifacts keeps it).
func screenshot(t *testing.T, name string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var png []byte
		if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
			return err
		}
		p := filepath.Join(t.ArtifactDir(), name)
		t.Logf("screenshot: %s", p)
		return os.WriteFile(p, png, 0o644)
	})
}

// recordCSPViolations makes every page the browser loads next collect its
// Content-Security-Policy violations in window.violations, for the test to
// read.
func recordCSPViolations() chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(`window.violations = [];
document.addEventListener("securitypolicyviolation", e => window.violations.push(e.violatedDirective + " " + e.blockedURI + " " + e.sourceFile + ":" + e.lineNumber));`).Do(ctx)
		return err
	})
}
