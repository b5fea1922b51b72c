package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/server/console"
)

// TestConsoleEditorBundle checks the code editor's bundle the binary
// embeds: the bytes `make console-editor` recorded in editor.js.sha256
// (a hand edit of the minified file, or a bundle rebuilt without updating
// the record, fails here; `make console-editor-check` rebuilds it from
// the registry), served from this origin as JavaScript, and loaded by the
// page before app.js, which uses it.
func TestConsoleEditorBundle(t *testing.T) {
	b, err := fs.ReadFile(console.Files, "editor.js")
	if err != nil {
		t.Fatalf("the console embeds no editor.js (make console-editor builds it): %v", err)
	}
	rec, err := os.ReadFile(filepath.Join("console", "editor", "editor.js.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	want, _, _ := strings.Cut(string(rec), " ")
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("the embedded editor.js is %s; editor.js.sha256 records %s: rebuild with make console-editor", got, want)
	}
	if !strings.Contains(string(b), "window.MoatEditor=") {
		t.Error("editor.js does not define window.MoatEditor, which app.js uses")
	}

	ts := start(t, "", nil)
	r := ts.do(t, "GET", "/console/editor.js", "", nil)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/javascript") || string(r.body) != string(b) {
		t.Errorf("GET /console/editor.js: %d %q, %d bytes (want the embedded %d)", r.status, r.header.Get("Content-Type"), len(r.body), len(b))
	}
	page := ts.do(t, "GET", "/", "", nil)
	html := string(page.body)
	ed, app := strings.Index(html, `<script src="/console/editor.js" defer>`), strings.Index(html, `<script src="/console/app.js" defer>`)
	if ed < 0 || app < 0 || ed > app {
		t.Errorf("index.html must load /console/editor.js (at %d) before /console/app.js (at %d), both deferred", ed, app)
	}
}

// TestConsoleEditor drives the Run code tab in headless Chromium under the
// server's CSP: "Sign out" shows only when signed in; the tab opens with a
// language's hello world in a CodeMirror editor that highlights it;
// switching language replaces untouched code and keeps typed code; a run
// shows its stdout as output, its stderr as logs and its audit events; a
// compile error shows as an error, apart from the output, and the markup
// its message quotes shows as text. It fails when
// editor.js is missing or the CSP blocks any of it (every violation is
// recorded by a listener installed before any script); a reload keeps the
// draft. Screenshots go to
// t.ArtifactDir() (kept by go test -artifacts; the log names them).
func TestConsoleEditor(t *testing.T) {
	bin := chromium(t)
	// The real executor, held in its first-time work until the page has
	// shown the server's preparing state (gatedExecutor).
	g := &gatedExecutor{entered: make(chan string, 8), release: make(chan struct{})}
	ts := start(t, "", func(c *server.Config) { withExecutor(t)(c); withGatedExecutor(g)(c) })
	t.Cleanup(g.open)
	requireC(t, ts)
	key := ts.key(t, "acme", "ann", "admin")
	actx, acancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(bin), chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(profileDir(t)), chromedp.WindowSize(1280, 900))
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 120*time.Second)
	defer cancel()

	shot := func(name string) chromedp.Action { return screenshot(t, name) }
	// doc is the editor's text, read through CodeMirror's own state (the
	// DOM shows only the visible lines).
	const doc = `window.MoatEditor.textOf(document.querySelector("#run-editor"))`
	const shadow = `document.querySelector("#run-editor").shadowRoot`
	// typeOver replaces the editor's text by typing: a click on its text,
	// Ctrl+A, Backspace, then the text as the browser's input pipeline
	// inserts typed text (Input.insertText: key events per character
	// leave non-breaking spaces in a contenteditable).
	typeOver := func(text string) chromedp.Action {
		return chromedp.Tasks{
			chromedp.Click(shadow+`.querySelector(".cm-content")`, chromedp.ByJSPath),
			chromedp.KeyEvent("a", chromedp.KeyModifiers(input.ModifierCtrl)),
			chromedp.KeyEvent(kb.Backspace),
			input.InsertText(text),
		}
	}
	setLang := func(name string) chromedp.Action {
		return chromedp.Evaluate(`(() => { const s = document.querySelector("#run-language"); s.value = "`+name+`"; s.dispatchEvent(new Event("change")); })()`, nil)
	}

	var signOutBefore, signOutAfter, editorLoaded bool
	var firstLang, firstDoc, cppDoc, keptDoc string
	var tokens int
	err := chromedp.Run(ctx,
		recordCSPViolations(),
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible("#api-key", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#sign-out").getClientRects().length > 0`, &signOutBefore),
		shot("console-signin.png"),
		chromedp.SendKeys("#api-key", key, chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.WaitVisible(`.tab[data-tab="run"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#sign-out").getClientRects().length > 0`, &signOutAfter),
		chromedp.Click(`.tab[data-tab="run"]`, chromedp.ByQuery),
		chromedp.Evaluate(`!!window.MoatEditor`, &editorLoaded),
	)
	if err != nil {
		t.Fatalf("sign in: %v", err)
	}
	if signOutBefore || !signOutAfter {
		t.Errorf(`"Sign out" visible before sign-in: %v, after: %v; want only after`, signOutBefore, signOutAfter)
	}
	if !editorLoaded {
		t.Fatal("window.MoatEditor is not defined: /console/editor.js did not load or run")
	}
	// The languages added for Judge0's users are highlighted too (PHP
	// is edited as plain text: see editor/entry.mjs).
	var listed struct{ Languages []struct{ Name string } }
	if err := json.Unmarshal(ts.do(t, "GET", "/v1/languages", key, nil).body, &listed); err != nil {
		t.Fatal(err)
	}
	langTokens := map[string]*int{}
	var highlighted chromedp.Tasks
	for _, l := range listed.Languages {
		if !slices.Contains([]string{"java", "typescript", "lua", "perl"}, l.Name) {
			continue
		}
		n := new(int)
		langTokens[l.Name] = n
		highlighted = append(highlighted, setLang(l.Name),
			chromedp.Evaluate(`[...`+shadow+`.querySelectorAll(".cm-line span[class]")].filter(s => getComputedStyle(s).color !== getComputedStyle(s.closest(".cm-line")).color).length`, n))
	}
	err = chromedp.Run(ctx,
		chromedp.Poll(doc+` !== null && `+doc+`.length > 0`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Value("#run-language", &firstLang, chromedp.ByQuery),
		chromedp.Evaluate(doc, &firstDoc),
		// An untouched hello world is replaced on a switch.
		setLang("c"),
		setLang("cpp"),
		chromedp.Evaluate(doc, &cppDoc),
		// Highlighting: the hello world's tokens are spans coloured apart
		// from their line (the colours come from CodeMirror's style
		// sheets, so this fails too when they are blocked).
		chromedp.Evaluate(`[...`+shadow+`.querySelectorAll(".cm-line span[class]")].filter(s => getComputedStyle(s).color !== getComputedStyle(s.closest(".cm-line")).color).length`, &tokens),
		shot("console-editor-hello.png"),
		highlighted,
		setLang("cpp"),
		// Typed code is kept across a switch.
		typeOver("#include <stdio.h>\nint main(void) { fprintf(stderr, \"log line\\n\"); puts(\"typed\"); return 0; }"),
		setLang("c"),
		chromedp.Evaluate(doc, &keptDoc),
	)
	if err != nil {
		t.Fatalf("editor: %v", err)
	}
	// The tab opens on the first of the console's preferred languages the
	// server offers (python, javascript, go, ...; it once opened on
	// assemblyscript, sorted first, with an empty editor).
	var offered struct {
		Languages []struct{ Name, State string }
	}
	if err := json.Unmarshal(ts.do(t, "GET", "/v1/languages", key, nil).body, &offered); err != nil {
		t.Fatal(err)
	}
	wantFirst := ""
	for _, p := range []string{"python", "javascript", "go", "rust", "c", "cpp", "ruby", "assemblyscript", "bash", "python3-native"} {
		for _, l := range offered.Languages {
			if wantFirst == "" && l.Name == p && l.State != server.LangUnavailable {
				wantFirst = p
			}
		}
	}
	if firstLang != wantFirst || !strings.Contains(firstDoc, "hello from") {
		t.Errorf("the Run tab opened on %q with %q; want %s and its hello world", firstLang, firstDoc, wantFirst)
	}
	if !strings.Contains(cppDoc, "std::cout") {
		t.Errorf("after switching to cpp the editor holds %q; want the C++ hello world", cppDoc)
	}
	if tokens < 3 {
		t.Errorf("%d highlighted tokens in the C++ hello world; want syntax highlighting", tokens)
	}
	for name, n := range langTokens {
		if *n < 1 { // plain text has none; Lua's one-line hello world colours only its string
			t.Errorf("no highlighted token in the %s hello world; want syntax highlighting", name)
		}
	}
	want := "#include <stdio.h>\nint main(void) { fprintf(stderr, \"log line\\n\"); puts(\"typed\"); return 0; }"
	if keptDoc != want {
		t.Errorf("after typing and switching language the editor holds %q; want the typed code %q", keptDoc, want)
	}

	// The first run of c on the server: while the server says c is
	// preparing (the executor is held in its first-time work), the page
	// says so, from the server's state; when the answer comes it stops
	// saying so, and the language reads ready.
	var pill, stdout, logs, preparing, stateBefore, stateDuring, stateAfter string
	var errorShown, preparingAfter bool
	var afterRun string
	var auditRows int
	err = chromedp.Run(ctx,
		chromedp.Evaluate(`document.querySelector("#run-lang-state").textContent`, &stateBefore),
		chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(input.ModifierCtrl)), // runs, from the editor
		chromedp.Poll(`!document.querySelector("#run-preparing").hidden`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text("#run-preparing", &preparing, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#run-lang-state").dataset.state`, &stateDuring),
		shot("console-run-preparing.png"),
		chromedp.ActionFunc(func(context.Context) error { g.open(); return nil }),
		chromedp.Poll(`document.querySelector("#run-status").textContent === "ok" || document.querySelector("#run-status").classList.contains("bad")`, nil, chromedp.WithPollingTimeout(60*time.Second)),
		chromedp.Poll(`document.querySelectorAll("#run-audit tr").length > 0`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("#run-status", &pill, chromedp.ByQuery),
		chromedp.Text("#run-stdout", &stdout, chromedp.ByQuery),
		chromedp.Text("#run-stderr", &logs, chromedp.ByQuery),
		chromedp.Evaluate(`!document.querySelector("#run-error").hidden`, &errorShown),
		chromedp.Evaluate(`document.querySelectorAll("#run-audit tr").length`, &auditRows),
		chromedp.Evaluate(`!document.querySelector("#run-preparing").hidden`, &preparingAfter),
		chromedp.Poll(`document.querySelector("#run-lang-state").dataset.state === "ready"`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("#run-lang-state", &stateAfter, chromedp.ByQuery),
		chromedp.Evaluate(doc, &afterRun),
		shot("console-run-ok.png"),
	)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if afterRun != want {
		t.Errorf("Ctrl+Enter changed the code to %q; want it to run %q unchanged", afterRun, want)
	}
	if !strings.Contains(stateBefore, "cold: the first run") || !strings.HasPrefix(preparing, "Preparing c: the first run") || stateDuring != "preparing" || preparingAfter || !strings.HasSuffix(stateAfter, "ready") {
		t.Errorf("c's state: before the run %q; while held in its first-time work %q (state line %q); after %q (preparing still shown: %v); want cold, preparing from the server's state, then ready",
			stateBefore, preparing, stateDuring, stateAfter, preparingAfter)
	}
	if pill != "ok" || stdout != "typed\n" || logs != "log line\n" || errorShown || auditRows < 1 {
		t.Errorf("run: status %q, output %q, logs %q, error shown %v, %d audit rows; want ok, \"typed\\n\", \"log line\\n\", no error, the run's audit events",
			pill, stdout, logs, errorShown, auditRows)
	}

	// A compile error is an error, not a green "ok", and not output.
	var errTitle, errDetail string
	var violations []string
	var pwned bool
	err = chromedp.Run(ctx,
		chromedp.Click("#run-hello", chromedp.ByQuery),
		typeOver(`int main(void) { oops; } /* <img src=x onerror="window.pwned=1"><script>window.pwned=2</script> */`),
		chromedp.Click("#run", chromedp.ByQuery),
		chromedp.Poll(`!document.querySelector("#run-error").hidden || !document.querySelector("#run-preparing").hidden`, nil, chromedp.WithPollingTimeout(60*time.Second)),
		chromedp.Text("#run-status", &pill, chromedp.ByQuery),
		chromedp.Text("#run-stdout", &stdout, chromedp.ByQuery),
		chromedp.Text("#run-error-title", &errTitle, chromedp.ByQuery),
		chromedp.Text("#run-error-detail", &errDetail, chromedp.ByQuery),
		shot("console-run-error.png"),
		chromedp.Evaluate(`window.violations`, &violations),
		chromedp.Evaluate(`window.pwned !== undefined`, &pwned),
	)
	if err != nil {
		var dump string
		chromedp.Run(ctx, chromedp.Evaluate(`JSON.stringify({status: document.querySelector("#run-status").textContent, err: document.querySelector("#run-error").outerHTML, doc: `+doc+`, out: document.querySelector("#run-stdout").textContent})`, &dump))
		t.Fatalf("compile error: %v; page: %s", err, dump)
	}
	if pill != "compile-error" || stdout != "" || !strings.HasPrefix(errTitle, "Compile error") || !strings.Contains(errDetail, "oops") {
		t.Errorf("compile error: status %q, output %q, error %q: %q; want compile-error, no output, the compiler's message in the error box", pill, stdout, errTitle, errDetail)
	}
	if pwned || !strings.Contains(errDetail, "<img") {
		t.Errorf("the compiler's message quoting markup: ran %v, shown as %q; want it shown as text", pwned, errDetail)
	}
	if len(violations) > 0 {
		t.Errorf("the console breaks its CSP: %v", violations)
	}

	// A reload keeps the draft: the language and the typed code.
	var reloadLang, reloadDoc string
	err = chromedp.Run(ctx,
		chromedp.Reload(),
		chromedp.WaitVisible(`.tab[data-tab="run"]`, chromedp.ByQuery),
		chromedp.Click(`.tab[data-tab="run"]`, chromedp.ByQuery),
		chromedp.Poll(`window.MoatEditor && `+doc+` !== null && `+doc+`.length > 0`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Value("#run-language", &reloadLang, chromedp.ByQuery),
		chromedp.Evaluate(doc, &reloadDoc),
	)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	if reloadLang != "c" || !strings.HasPrefix(reloadDoc, "int main(void) { oops; }") {
		t.Errorf("after a reload the tab shows %s with %q; want c and the typed code", reloadLang, reloadDoc)
	}
}

// TestConsoleHelloWorlds runs the Run code tab's hello world of every
// language the server offers through POST /v1/runs, as the console sends
// it (one file, main plus the language's first extension): each must run
// to a zero exit and print "hello from". Every language moat registers
// must have one, so a new language does not open on an empty editor.
// Languages whose toolchain is missing here are not offered, and are
// reported (CI, with MOAT_REQUIRE_TOOLS and every toolchain, runs them all).
func TestConsoleHelloWorlds(t *testing.T) {
	b, err := fs.ReadFile(console.Files, "hello.json")
	if err != nil {
		t.Fatal(err)
	}
	var hello map[string]string
	if err := json.Unmarshal(b, &hello); err != nil {
		t.Fatalf("hello.json: %v", err)
	}
	for _, l := range languages.All() {
		if name := l.Info().Name; !strings.Contains(hello[name], "hello from") {
			t.Errorf("hello.json has no hello world for %s (%q): the Run code tab would open it empty", name, hello[name])
		}
	}

	ts := start(t, "", withExecutor(t))
	key := ts.key(t, "acme", "ann", "admin")
	var offered struct {
		Languages []struct {
			Name       string
			Extensions []string
			State      string
		}
	}
	if err := json.Unmarshal(ts.do(t, "GET", "/v1/languages", key, nil).body, &offered); err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	// languages/all's TestHelloEveryLanguage is every language's contract;
	// here the route is, which one language shows under -short.
	for _, l := range testenv.ShortLanguages(offered.Languages) {
		t.Run(l.Name, func(t *testing.T) {
			if l.State == server.LangUnavailable {
				testenv.Require(t, fmt.Sprintf("%s is unavailable here: GET /v1/languages says so", l.Name))
			}
			ext := ""
			if len(l.Extensions) > 0 {
				ext = l.Extensions[0]
			}
			body, _ := json.Marshal(server.RunRequest{Language: l.Name, Files: []server.RunFile{{Name: "main" + ext, Content: hello[l.Name]}}})
			r := ts.do(t, "POST", "/v1/runs", key, strings.NewReader(string(body)), "Content-Type", "application/json")
			if r.status == 503 && strings.Contains(string(r.body), "not provisioned") {
				// Listed, yet its toolchain is missing: `moat langs` and
				// /v1/languages are made honest about that elsewhere.
				testenv.Require(t, fmt.Sprintf("%s is offered but its toolchain is missing here: %s", l.Name, r.body))
			}
			var res server.RunResult
			if err := json.Unmarshal(r.body, &res); err != nil || r.status != 200 {
				t.Fatalf("POST /v1/runs: %d %s", r.status, r.body)
			}
			if res.Status != languages.StatusOK || !strings.HasPrefix(res.Stdout, "hello from") {
				t.Errorf("%s's hello world: status %s, stdout %q, stderr %q, message %q, compile output %q", l.Name, res.Status, res.Stdout, res.Stderr, res.Message, res.CompileOutput)
			}
			ran[l.Name] = true
		})
	}
	var missing []string
	for _, l := range languages.All() {
		if !ran[l.Info().Name] {
			missing = append(missing, l.Info().Name)
		}
	}
	if len(missing) > 0 {
		t.Logf("hello worlds not run here (toolchain missing): %s", strings.Join(missing, ", "))
	}
}

// TestConsoleFilesServed checks how the console's files go out: under the
// front door's console CSP (object-src 'none', base-uri 'none' and
// form-action 'self' included: the handler once replaced it with a laxer
// one), gzipped when accepted and not when refused, 304 to a current
// copy, and nothing but the embedded files.
func TestConsoleFilesServed(t *testing.T) {
	ts := start(t, "", nil)
	want, err := fs.ReadFile(console.Files, "editor.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/console/app.js", "/console/editor.js", "/console/hello.json"} {
		r := ts.do(t, "GET", path, "", nil)
		csp := r.header.Get("Content-Security-Policy")
		for _, d := range []string{"script-src 'self'", "style-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'"} {
			if r.status != 200 || !strings.Contains(csp, d) {
				t.Errorf("GET %s: %d, CSP %q; want 200 and %s", path, r.status, csp, d)
			}
		}
	}

	gz := ts.do(t, "GET", "/console/editor.js", "", nil, "Accept-Encoding", "br, gzip;q=0.8")
	etag := gz.header.Get("ETag")
	if gz.status != 200 || gz.header.Get("Content-Encoding") != "gzip" || etag == "" || !strings.Contains(gz.header.Get("Vary"), "Accept-Encoding") {
		t.Fatalf("GET editor.js accepting gzip: %d, Content-Encoding %q, ETag %q, Vary %q", gz.status, gz.header.Get("Content-Encoding"), etag, gz.header.Get("Vary"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz.body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, want) || len(gz.body) > len(want)/2 {
		t.Errorf("the gzipped editor.js (%d bytes) unpacks to %d bytes (err %v); want the embedded %d", len(gz.body), len(got), err, len(want))
	}
	for _, ae := range []string{"gzip;q=0", "identity", "br"} {
		r := ts.do(t, "GET", "/console/editor.js", "", nil, "Accept-Encoding", ae)
		if r.header.Get("Content-Encoding") != "" || !bytes.Equal(r.body, want) {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, %d bytes; want the plain file", ae, r.header.Get("Content-Encoding"), len(r.body))
		}
	}

	for _, tc := range []struct {
		inm    string
		status int
	}{{etag, 304}, {"W/" + etag, 304}, {`"x", ` + etag, 304}, {"*", 304}, {`"0123"`, 200}, {strings.Repeat(",", 1000), 200}} {
		r := ts.do(t, "GET", "/console/editor.js", "", nil, "If-None-Match", tc.inm)
		if r.status != tc.status || (tc.status == 304 && len(r.body) != 0) {
			t.Errorf("If-None-Match %.40q: %d with %d bytes; want %d", tc.inm, r.status, len(r.body), tc.status)
		}
	}

	for _, path := range []string{"/console/editor/package.json", "/console/editor/entry.mjs", "/console/../console.go", "/console/%2e%2e/openapi.go", "/console/index.html", "/console/", "/console/.hidden"} {
		if r := ts.do(t, "GET", path, "", nil); r.status != 404 {
			t.Errorf("GET %s: %d; want 404 (only the embedded files are served, index.html at /)", path, r.status)
		}
	}
}
