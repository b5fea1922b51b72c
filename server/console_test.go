package server_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// chromium finds Debian's chromium (mk/server.mk installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Require(t, "chromium (apt package chromium) is not installed; `make tools` installs it")
	return ""
}

// profileDir is a fresh Chromium profile directory. Chromium's helper
// processes may still write to it for a moment after the browser exits, so
// it is removed with retries rather than by t.TempDir's single attempt.
func profileDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "moat-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		for range 50 {
			if err = os.RemoveAll(dir); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("remove the Chromium profile %s: %v", dir, err)
	})
	return dir
}

// TestConsoleInChromium signs in to the web console in headless Chromium
// with an API key, invokes hello-go's greet, reads the output and the
// audit trail off the page, approves a confirmation, and saves screenshots
// (go test -artifacts keeps them; the log names the files).
func TestConsoleInChromium(t *testing.T) {
	bin := chromium(t)
	ts := start(t, "", nil)
	key := ts.key(t, "acme", "ann", "admin")
	wasm := helloWasm(t)
	for name, mf := range map[string][]byte{"hello-go": helloManifest(t), "hello-confirm": renamed(t, "hello-confirm", "    confirm: true\n")} {
		if r := ts.upload(t, key, wasm, mf); r.status != 201 {
			t.Fatalf("upload %s: %d %s", name, r.status, r.body)
		}
	}

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profileDir(t)),
		chromedp.WindowSize(1280, 900),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()

	shot := func(name string) chromedp.Action { return screenshot(t, name) }

	var output, who, logRows string
	var auditRows int
	err := chromedp.Run(bctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible("#api-key", chromedp.ByQuery),
		chromedp.SendKeys("#api-key", key, chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.WaitVisible(`#modules li[data-name="hello-go"]`, chromedp.ByQuery),
		chromedp.Text("#whoami", &who, chromedp.ByQuery),
		chromedp.Click(`#modules li[data-name="hello-go"]`, chromedp.ByQuery),
		chromedp.SendKeys("#input", "Chromium", chromedp.ByQuery),
		chromedp.Click("#invoke", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#output").textContent.startsWith("Hello, Chromium!")`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Text("#output", &output, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll("#audit-table tr").length >= 2`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate(`document.querySelectorAll("#audit-table tr").length`, &auditRows),
		chromedp.Evaluate(`[...document.querySelectorAll("#invoke-logs tr")].map(r => [...r.cells].slice(1).map(c => c.textContent).join(" | ")).join("\n")`, &logRows),
		shot("console-greet.png"),
	)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	if who != "ann@acme [admin]" {
		t.Errorf("signed in as %q", who)
	}
	if output != "Hello, Chromium! (call #1)" {
		t.Errorf("output on the page = %q", output)
	}
	if auditRows < 2 {
		t.Errorf("%d audit rows for the invocation, want its kv.put and the invocation", auditRows)
	}
	// hello-go logs moat.Log.Info("greeting", "name", name).
	if logRows != `INFO | greeting | {"name":"Chromium"}` {
		t.Errorf("guest logs on the page = %q, want the one greeting record with its name", logRows)
	}

	// A confirm-required action: the page shows the request, approving
	// it runs the action.
	var confirmed, pill, confirmedLogs string
	err = chromedp.Run(bctx,
		chromedp.Click(`#modules li[data-name="hello-confirm"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#input").value = ""`, nil),
		chromedp.SendKeys("#input", "Later", chromedp.ByQuery),
		chromedp.Click("#invoke", chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-box", chromedp.ByQuery),
		chromedp.Text("#result-status", &pill, chromedp.ByQuery),
		shot("console-confirm.png"),
		chromedp.Click("#confirm-approve", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#output").textContent.startsWith("Hello, Later!")`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Text("#output", &confirmed, chromedp.ByQuery),
		chromedp.Text("#invoke-logs", &confirmedLogs, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("confirmation in the console: %v", err)
	}
	if !strings.HasPrefix(pill, "428") || confirmed != "Hello, Later! (call #1)" || !strings.Contains(confirmedLogs, `"name":"Later"`) {
		t.Errorf("confirmation: status %q, then output %q and logs %q", pill, confirmed, confirmedLogs)
	}

	// Sign out reloads the page (nothing of the session stays in it):
	// wait for that navigation, not for an element, which would race it.
	if _, err := chromedp.RunResponse(bctx, chromedp.Click("#sign-out", chromedp.ByQuery)); err != nil {
		t.Fatalf("sign out: %v", err)
	}
	// A wrong key is refused on the page.
	var msg string
	err = chromedp.Run(bctx,
		chromedp.WaitVisible("#api-key", chromedp.ByQuery),
		chromedp.SendKeys("#api-key", "moat_sk_wrong", chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#signin-error").textContent.length > 0`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("#signin-error", &msg, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("wrong key: %v", err)
	}
	if !strings.Contains(msg, "unknown or revoked") {
		t.Errorf("sign-in error = %q", msg)
	}
}

// browser starts a headless Chromium (bin) with a fresh profile, extra
// options after the common ones, and returns a tab's context, ended with
// the test or after timeout.
func browser(t *testing.T, bin string, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true), chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(profileDir(t)),
	}, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(bcancel)
	return bctx
}
