package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/moat-sandbox/moat/server"
)

// TestConsoleKeysInChromium: on the console's Keys page an admin creates
// a scoped key (its secret shown once, working, never in the listing),
// rotates it (the old secret stops) and revokes it; a key's name is text,
// never markup; an audit row opens to show the event's every field.
func TestConsoleKeysInChromium(t *testing.T) {
	bin := chromium(t)
	ts := start(t, "", nil)
	admin := ts.key(t, "acme", "ann", "admin")
	const hostile = `<img src=x onerror="document.title='pwned'">`

	bctx := browser(t, bin, 90*time.Second, chromedp.WindowSize(1280, 900))
	var secret, rotated, table, afterRevoke, title, detail string
	var imgs int
	var png []byte
	err := chromedp.Run(bctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible("#api-key", chromedp.ByQuery),
		chromedp.SendKeys("#api-key", admin, chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.WaitVisible(`#app`, chromedp.ByQuery),
		chromedp.Click(`button[data-tab="keys"]`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll("#keys-all tr").length >= 1`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Click(`#tab-keys details summary`, chromedp.ByQuery),
		chromedp.SendKeys("#key-name", hostile, chromedp.ByQuery),
		chromedp.SendKeys("#key-scopes", "invoke, audit:read", chromedp.ByQuery),
		chromedp.SendKeys("#key-days", "30", chromedp.ByQuery),
		chromedp.Click("#key-create", chromedp.ByQuery),
		chromedp.WaitVisible("#key-secret-box", chromedp.ByQuery),
		chromedp.Text("#key-secret", &secret, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll("#keys-all tr").length >= 2`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("#keys-all", &table, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#tab-keys img").length`, &imgs),
		chromedp.FullScreenshot(&png, 100),
	)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	p := filepath.Join(t.ArtifactDir(), "console-keys.png")
	os.WriteFile(p, png, 0o644)
	t.Logf("screenshot: %s", p)
	secret = strings.TrimSpace(secret)
	if !strings.HasPrefix(secret, server.KeyPrefix) || ts.whoami(t, secret) != 200 {
		t.Fatalf("the secret shown does not work: %q", secret)
	}
	if strings.Contains(table, secret) || !strings.Contains(table, "audit:read, invoke") || !strings.Contains(table, hostile) || imgs != 0 {
		t.Errorf("the keys table (%d img):\n%s", imgs, table)
	}
	if r := ts.do(t, "POST", "/v1/modules/x", secret, nil); r.status != 403 && r.status != 404 && r.status != 405 {
		t.Errorf("the scoped key uploading: %d", r.status)
	}

	// Rotate the new key (the last row), then revoke it.
	err = chromedp.Run(bctx,
		chromedp.Evaluate(`document.querySelector("#keys-all tr:last-child button[data-rotate]").click()`, nil),
		chromedp.Poll(`document.querySelector("#key-secret").textContent.indexOf(`+jsString(secret)+`) < 0`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("#key-secret", &rotated, chromedp.ByQuery),
		chromedp.Evaluate(`window.confirm = () => true; document.querySelector("#keys-all tr:last-child button[data-revoke]").click()`, nil),
		chromedp.Poll(`document.querySelector("#keys-all tr:last-child").textContent.includes("revoked")`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("#keys-all", &afterRevoke, chromedp.ByQuery),
		// The audit trail: a row opens to its every field.
		chromedp.Click(`button[data-tab="audit"]`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll("#audit-all tr.audit-row").length >= 3`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate(`(() => { const rows = [...document.querySelectorAll("#audit-all tr.audit-row")]; const r = rows.find((x) => x.textContent.includes("api_key")); r.click(); return r.nextElementSibling.hidden; })()`, nil),
		chromedp.Evaluate(`(() => { const r = [...document.querySelectorAll("#audit-all tr.audit-detail")].find((x) => !x.hidden); return r ? r.textContent : ""; })()`, &detail),
		chromedp.Title(&title),
	)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	rotated = strings.TrimSpace(rotated)
	if ts.whoami(t, secret) != 401 {
		t.Error("the old secret works after the rotation")
	}
	if ts.whoami(t, rotated) != 401 || !strings.Contains(afterRevoke, "revoked") {
		t.Errorf("after the revocation: the rotated secret answers %d; table:\n%s", ts.whoami(t, rotated), afterRevoke)
	}
	if !strings.Contains(detail, `"kind": "api_key"`) || !strings.Contains(detail, `"key": "key_`) {
		t.Errorf("the opened audit row:\n%s", detail)
	}
	if title == "pwned" {
		t.Error("a key's name became markup")
	}
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
