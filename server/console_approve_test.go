package server_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestConsoleApprovalInChromium: four-eyes approval in the console, two
// people in two tabs. Bob (role billing) asks for an action that needs
// confirmation; Ann (admin, an approver) sees it in her Confirmations tab
// with its requester and a preview of the input, shown as text even when
// it is markup, approves it, and sees the output of the run as Bob; Bob's
// tab learns that Ann approved it. Bob, not an approver, sees no list.
func TestConsoleApprovalInChromium(t *testing.T) {
	testenv.Slow(t, "two Chromium tabs, one polling for the outcome")
	bin := chromium(t)
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann", "admin")
	bob := ts.key(t, "acme", "bob", "billing")
	if r := ts.upload(t, ann, helloWasm(t), renamed(t, "hello-billing", "    confirm: true\n    roles: [billing]\n")); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	const hostile = `<img src=x onerror="document.title='pwned'">`

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true), chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(profileDir(t)),
		chromedp.WindowSize(1280, 900),
		// Bob's tab polls while Ann's is in front, as a tab left open
		// while a colleague decides would.
		chromedp.Flag("disable-background-timer-throttling", true), chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bobTab, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	signIn := func(key string) chromedp.Tasks {
		return chromedp.Tasks{
			chromedp.Navigate(ts.URL + "/"),
			chromedp.WaitVisible("#api-key", chromedp.ByQuery),
			chromedp.SendKeys("#api-key", key, chromedp.ByQuery),
			chromedp.Click("#sign-in", chromedp.ByQuery),
			chromedp.WaitVisible(`#modules li[data-name="hello-billing"]`, chromedp.ByQuery),
		}
	}
	began := time.Now()
	var pill string
	var bobSeesList bool
	err := chromedp.Run(bobTab, signIn(bob),
		chromedp.Click(`#modules li[data-name="hello-billing"]`, chromedp.ByQuery),
		chromedp.SendKeys("#input", "Four eyes "+hostile, chromedp.ByQuery),
		chromedp.Click("#invoke", chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-box", chromedp.ByQuery),
		chromedp.Text("#result-status", &pill, chromedp.ByQuery),
		chromedp.Evaluate(`!document.querySelector("#approvals-card").hidden`, &bobSeesList),
	)
	if err != nil {
		t.Fatalf("bob's tab: %v", err)
	}
	t.Logf("bob asked after %s", time.Since(began))
	if !strings.HasPrefix(pill, "428") || bobSeesList {
		t.Errorf("bob's tab: status %q, approvers' list shown %v", pill, bobSeesList)
	}

	annTab, ancancel := chromedp.NewContext(bobTab) // a second tab: its own sessionStorage, its own key
	defer ancancel()
	var listed, output, title string
	var imgs int
	var png []byte
	err = chromedp.Run(annTab, signIn(ann),
		chromedp.Click(`button[data-tab="confirm"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#approvals li.approval button.approve`, chromedp.ByQuery),
		chromedp.Text("#approvals", &listed, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#approvals img").length`, &imgs),
		chromedp.FullScreenshot(&png, 100),
		chromedp.Click(`#approvals li.approval button.approve`, chromedp.ByQuery),
		chromedp.WaitVisible(`#approvals pre.result`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#approvals pre.result").textContent !== ""`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text(`#approvals pre.result`, &output, chromedp.ByQuery),
		chromedp.Title(&title),
	)
	if err != nil {
		t.Fatalf("ann's tab: %v", err)
	}
	p := filepath.Join(t.ArtifactDir(), "console-approvals.png")
	os.WriteFile(p, png, 0o644)
	t.Logf("ann approved after %s", time.Since(began))
	t.Logf("screenshot: %s", p)
	for _, want := range []string{"hello-billing · greet", "requested by bob", "Four eyes " + hostile, "Approve and run as bob", "input sha256"} {
		if !strings.Contains(listed, want) {
			t.Errorf("the approvers' list lacks %q:\n%s", want, listed)
		}
	}
	if imgs != 0 || title == "pwned" {
		t.Errorf("the input preview became markup: %d <img>, title %q", imgs, title)
	}
	if !strings.HasPrefix(output, "Hello, Four eyes ") {
		t.Errorf("approved output = %q", output)
	}

	var outcome string
	err = chromedp.Run(bobTab,
		chromedp.Poll(`document.querySelector("#confirm-outcome").textContent.includes("approved by ann")`, nil,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)), // not raf: a tab behind another draws no frames,
		chromedp.Text("#confirm-outcome", &outcome, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("bob's tab never learned the outcome: %v", err)
	}
	if !strings.Contains(outcome, "approved by ann and run as you") {
		t.Errorf("bob's outcome = %q", outcome)
	}
}
