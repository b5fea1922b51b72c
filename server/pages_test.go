package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// notebook is an interpreted plugin with pages: each user's notes (a
// user-scoped model), an action that needs a confirmation, one only
// admins may call, and two pages, one of them for admins only.
var notebook = map[string]string{
	"moat.yaml": `name: notebook
version: 0.1.0
language: javascript
kind: moat
actions:
  - {name: add, max_input: 4KiB}
  - {name: list}
  - {name: wipe, confirm: true}
  - {name: secret, roles: [admin]}
  - {name: pic}
capabilities:
  db: [notes]
  media: true
models:
  notes:
    scope: user
    fields:
      title: {type: string, required: true, max: 200}
pages:
  - {name: notes, title: Notes, entry: index.html, files: [page.js]}
  - {name: admin, entry: admin.html, roles: [admin]}
`,
	"main.js": `import * as moat from "./moat.js";
moat.action("add", (input) => JSON.stringify(moat.db.insert("notes", { title: JSON.parse(input).title })));
moat.action("list", () => JSON.stringify({ notes: moat.db.query("notes", {}).docs.map((d) => d.doc.title) }));
moat.action("wipe", () => "wiped");
moat.action("secret", () => "secret");
moat.action("pic", () => JSON.stringify(moat.media.put(new Uint8Array([137,80,78,71,13,10,26,10,0,0,0,13,73,72,68,82,0,0,0,1,0,0,0,1,8,2,0,0,0,144,119,83,222,0,0,0,12,73,68,65,84,120,156,99,248,207,192,0,0,3,1,1,0,201,254,146,239,0,0,0,0,73,69,78,68,174,66,96,130]), "image/png")));
`,
	"index.html": `<!doctype html><title>notes</title><ul id="list"></ul>
<input id="title"><button id="add">Add</button><button id="wipe">Wipe</button>
<p id="status"></p><pre id="probe"></pre>
<script src="moat-page.js"></script><script src="page.js"></script>`,
	"page.js":    notebookPageJS,
	"admin.html": `<!doctype html><p>admins only</p>`,
}

// notebookPageJS is the page's script: it lists and adds the user's
// notes, asks for the wipe (which needs a confirmation), and probes what
// a hostile page would try, writing each outcome into #probe.
const notebookPageJS = `"use strict";
const $ = (s) => document.querySelector(s);
async function refresh() {
  const r = await moat.call("list", {});
  $("#list").replaceChildren(...r.notes.map((t) => { const li = document.createElement("li"); li.textContent = t; return li; }));
}
$("#add").addEventListener("click", async () => { await moat.call("add", { title: $("#title").value }); $("#title").value = ""; await refresh(); });
$("#wipe").addEventListener("click", async () => {
  try { $("#status").textContent = await moat.call("wipe", {}); } catch (e) { $("#status").textContent = "error " + e.code; }
});
async function probe() {
  const out = {};
  const tryIt = (name, f) => { try { out[name] = String(f()); } catch (e) { out[name] = "blocked"; } };
  tryIt("storage", () => sessionStorage.getItem("moat.key"));
  tryIt("parentStorage", () => parent.sessionStorage.getItem("moat.key"));
  tryIt("parentDocument", () => parent.document.title);
  tryIt("cookie", () => document.cookie);
  tryIt("popup", () => window.open("/v1/whoami") === null ? "null" : "opened");
  try { await fetch("/v1/whoami"); out.fetch = "fetched"; } catch (e) { out.fetch = "blocked"; }
  try { await moat.call("greet", ""); out.otherAction = "ran"; } catch (e) { out.otherAction = e.code; }
  try { await moat.call("../list", ""); out.badAction = "ran"; } catch (e) { out.badAction = e.code; }
  const flood = await Promise.allSettled(Array.from({ length: 30 }, () => moat.call("list", {})));
  out.flood = flood.some((r) => r.status === "rejected" && r.reason.code === "resource_exhausted") ? "bounded" : "unbounded";
  try {
    const img = new Image();
    img.src = await moat.mediaURL((await moat.call("pic", {})).id);
    await img.decode();
    out.media = img.naturalWidth === 1 ? "shown" : "size " + img.naturalWidth;
  } catch (e) { out.media = "failed " + (e.code || e.message); }
  // A raw message naming another module: the console uses the page's own.
  parent.postMessage({ moat: "moat.page/1", id: 99, type: "call", module: "other", action: "greet", input: "" }, "*");
  tryIt("top", () => { top.location.href = "/v1/whoami"; return "tried"; });
  $("#probe").textContent = JSON.stringify(out);
}
moat.ready.then(async () => { await refresh(); await probe(); });
`

// pluginArchive packs files as a tar.gz of a plugin directory.
func pluginArchive(t testing.TB, files map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, b := range files {
		if err := tw.WriteHeader(&tar.Header{Name: "plugin/" + name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(b))
	}
	tw.Close()
	zw.Close()
	return &buf
}

func startPages(t *testing.T) *testServer {
	t.Helper()
	ts := start(t, "", func(c *server.Config) { c.Profile = "dev" })
	admin := ts.key(t, "acme", "root", "admin")
	if r := ts.do(t, "POST", "/v1/modules", admin, pluginArchive(t, notebook), "Content-Type", "application/gzip"); r.status != http.StatusCreated {
		t.Fatalf("upload notebook: %d %s", r.status, r.body)
	}
	return ts
}

func pageNames(t *testing.T, r response) []string {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("pages: %d %s", r.status, r.body)
	}
	var out struct{ Pages []server.PageJSON }
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range out.Pages {
		names = append(names, p.Module+"/"+p.Name)
	}
	return names
}

// TestPagesAPI: the pages a principal may open are listed to it alone; a
// page it may not open, of another organization, or a file that is not
// the page's is a 404; a page's files carry the page's sandboxing policy;
// an action called from a page is audited with the page's name.
func TestPagesAPI(t *testing.T) {
	ts := startPages(t)
	ann := ts.key(t, "acme", "ann", "user")
	root := ts.key(t, "acme", "boss", "admin")
	eve := ts.key(t, "globex", "eve", "admin")

	if got := strings.Join(pageNames(t, ts.do(t, "GET", "/v1/pages", ann, nil)), " "); got != "notebook/notes" {
		t.Errorf("ann's pages = %s; want notebook/notes only", got)
	}
	if got := strings.Join(pageNames(t, ts.do(t, "GET", "/v1/modules/notebook/pages", root, nil)), " "); got != "notebook/notes notebook/admin" {
		t.Errorf("an admin's pages = %s", got)
	}
	if got := pageNames(t, ts.do(t, "GET", "/v1/pages", eve, nil)); len(got) != 0 {
		t.Errorf("another organization lists %v", got)
	}

	for _, tt := range []struct{ who, key, method, path string }{
		{"ann, an admin page", ann, "POST", "/v1/modules/notebook/pages/admin/url"},
		{"ann, an admin page's file", ann, "GET", "/v1/modules/notebook/pages/admin/files/admin.html"},
		{"ann, an undeclared page", ann, "POST", "/v1/modules/notebook/pages/nope/url"},
		{"ann, the module's code", ann, "GET", "/v1/modules/notebook/pages/notes/files/main.js"},
		{"ann, the manifest", ann, "GET", "/v1/modules/notebook/pages/notes/files/moat.yaml"},
		{"ann, an action from an admin page", ann, "POST", "/v1/modules/notebook/pages/admin/actions/list"},
		{"another org, a page", eve, "POST", "/v1/modules/notebook/pages/notes/url"},
		{"another org, its list", eve, "GET", "/v1/modules/notebook/pages"},
		{"another org, an action", eve, "POST", "/v1/modules/notebook/pages/notes/actions/list"},
		{"no page URL", "", "GET", "/v1/pages/x.y/index.html"},
	} {
		if r := ts.do(t, tt.method, tt.path, tt.key, strings.NewReader("{}")); r.status != http.StatusNotFound {
			t.Errorf("%s: %d %s; want 404", tt.who, r.status, r.body)
		}
	}

	r := ts.do(t, "POST", "/v1/modules/notebook/pages/notes/url", ann, nil)
	if r.status != http.StatusOK {
		t.Fatalf("page url: %d %s", r.status, r.body)
	}
	url, _ := r.json(t)["url"].(string)
	entry := ts.do(t, "GET", url, "", nil)
	csp := entry.header.Get("Content-Security-Policy")
	if entry.status != http.StatusOK || !strings.HasPrefix(entry.header.Get("Content-Type"), "text/html") || !strings.Contains(string(entry.body), `id="list"`) {
		t.Fatalf("entry: %d %s %s", entry.status, entry.header.Get("Content-Type"), entry.body)
	}
	for _, want := range []string{"sandbox allow-scripts", "connect-src 'none'", "default-src 'none'", "frame-ancestors 'self'", "form-action 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("the page's CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "allow-same-origin") || strings.Contains(csp, "allow-top-navigation") || strings.Contains(csp, "allow-popups") {
		t.Errorf("the page's CSP %q gives the page its origin, the top window or popups", csp)
	}
	if entry.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("no nosniff on a page file")
	}
	base := url[:strings.LastIndex(url, "/")+1]
	if r := ts.do(t, "GET", base+"page.js", "", nil); r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/javascript") ||
		r.header.Get("Content-Security-Policy") != csp {
		t.Errorf("page.js: %d %s %s", r.status, r.header.Get("Content-Type"), r.header.Get("Content-Security-Policy"))
	}
	if r := ts.do(t, "GET", base+"moat-page.js", "", nil); r.status != http.StatusOK || !strings.Contains(string(r.body), "moat.page/1") {
		t.Errorf("the bridge: %d", r.status)
	}
	for _, p := range []string{base + "main.js", base + "admin.html", strings.Replace(url, ".", "x", 1), url[:len(url)-20] + "AAAA/index.html"} {
		if r := ts.do(t, "GET", p, "", nil); r.status != http.StatusNotFound {
			t.Errorf("%s: %d; want 404", p, r.status)
		}
	}
	// A page URL is the page's, from any origin it is framed in (its
	// own is opaque): the front door's origin check does not refuse it.
	if r := ts.do(t, "GET", base+"page.js", "", nil, "Sec-Fetch-Site", "cross-site"); r.status != http.StatusOK {
		t.Errorf("page.js from the page's opaque origin: %d %s", r.status, r.body)
	}

	// An action called from a page: the invocation, and a decision
	// naming the page under the same correlation id; the invocation's own
	// event (and each op's) names the page too.
	r = ts.do(t, "POST", "/v1/modules/notebook/pages/notes/actions/add", ann, strings.NewReader(`{"title":"from the page"}`), "X-Request-Id", "page-call-1")
	if r.status != http.StatusOK {
		t.Fatalf("page call: %d %s", r.status, r.body)
	}
	r = ts.do(t, "GET", "/v1/audit?correlation_id=page-call-1", ann, nil)
	var trail struct{ Events []server.AuditEventJSON }
	json.Unmarshal(r.body, &trail)
	var page, invocation bool
	for _, e := range trail.Events {
		page = page || e.Kind == "decision" && e.Attrs["page"] == "notes" && e.Action == "add" && e.User == "ann"
		invocation = invocation || e.Kind == "invocation" && e.Action == "add" && e.User == "ann" && e.Code == "ok" && e.Attrs["page"] == "notes"
		if e.Kind == "op" && e.Attrs["page"] != "notes" {
			t.Errorf("an op of the page's call does not name the page: %+v", e)
		}
	}
	if !page || !invocation {
		t.Errorf("the audit trail of a page's call lacks the page (%v) or the invocation (%v): %s", page, invocation, r.body)
	}
	// Refused: audited with the page's name.
	ts.do(t, "POST", "/v1/modules/notebook/pages/admin/actions/list", ann, nil, "X-Request-Id", "page-call-2")
	r = ts.do(t, "GET", "/v1/audit?correlation_id=page-call-2&decision=deny", ann, nil)
	if !strings.Contains(string(r.body), `"page":"admin"`) || !strings.Contains(string(r.body), "manifest pages[1].roles") {
		t.Errorf("a refused page call's trail: %s", r.body)
	}
	// The page's own module's action still checks its own requirements.
	if r := ts.do(t, "POST", "/v1/modules/notebook/pages/notes/actions/secret", ann, nil); r.status != http.StatusForbidden {
		t.Errorf("an admin action from a page, as ann: %d %s; want 403", r.status, r.body)
	}
}

// TestPagesOfCompiledModule: a compiled module carries its pages' files
// in its moat.pages section (bundle.EmbedPages, what `moat build` does),
// so an upload of the .wasm and its manifest serves them, by key and by
// signed URL; a module built without them is refused with the fix.
func TestPagesOfCompiledModule(t *testing.T) {
	ts := start(t, "", nil)
	key := ts.key(t, "acme", "ann", "admin")
	mfText := string(helloManifest(t)) + "pages: [{name: main, title: Hello, entry: index.html, files: [page.js]}]\n"
	r := ts.upload(t, key, helloWasm(t), []byte(mfText))
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "holds no pages' files") || !strings.Contains(string(r.body), "moat build") {
		t.Errorf("upload of a module built without its pages: %d %s", r.status, r.body)
	}

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte(`<!doctype html><p id="hi">hello page</p><script src="page.js"></script>`), 0o644)
	os.WriteFile(filepath.Join(dir, "page.js"), []byte(`"use strict";`), 0o644)
	mf, err := policy.ParseManifest("moat.yaml", []byte(mfText))
	if err != nil {
		t.Fatal(err)
	}
	wasm, err := bundle.EmbedPages(helloWasm(t), mf, dir)
	if err != nil {
		t.Fatal(err)
	}
	// A section holding a file no page of the uploaded manifest names (a
	// module built for another manifest) is refused, naming the file.
	other := strings.Replace(mfText, "files: [page.js]", "files: [page.js, secret.txt]", 1)
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("not a page's"), 0o644)
	omf, err := policy.ParseManifest("moat.yaml", []byte(other))
	if err != nil {
		t.Fatal(err)
	}
	stray, err := bundle.EmbedPages(helloWasm(t), omf, dir)
	if err != nil {
		t.Fatal(err)
	}
	if r := ts.upload(t, key, stray, []byte(mfText)); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `\"secret.txt\", which no page of the manifest names`) {
		t.Errorf("upload of a module whose section holds a file no page names: %d %s", r.status, r.body)
	}
	if r := ts.upload(t, key, wasm, []byte(mfText)); r.status != http.StatusCreated {
		t.Fatalf("upload of a module with its pages: %d %s", r.status, r.body)
	}
	name := mf.Name
	if got := strings.Join(pageNames(t, ts.do(t, "GET", "/v1/modules/"+name+"/pages", key, nil)), " "); got != name+"/main" {
		t.Errorf("pages = %s", got)
	}
	if r := ts.do(t, "GET", "/v1/modules/"+name+"/pages/main/files/page.js", key, nil); r.status != http.StatusOK || string(r.body) != `"use strict";` {
		t.Errorf("page.js by key: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/v1/modules/"+name+"/pages/main/url", key, nil)
	if r.status != http.StatusOK {
		t.Fatalf("page url: %d %s", r.status, r.body)
	}
	url, _ := r.json(t)["url"].(string)
	if e := ts.do(t, "GET", url, "", nil); e.status != http.StatusOK || !strings.Contains(string(e.body), "hello page") || !strings.HasPrefix(e.header.Get("Content-Type"), "text/html") {
		t.Errorf("entry by signed URL: %d %s", e.status, e.body)
	}
}

// TestPageBridgeShipped: the bridge the server serves is the one the
// SDKs ship (guests/pages), embedded once.
func TestPageBridgeShipped(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "guests", "pages", "moat-page.js"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(server.PageBridge(), b) {
		t.Error("the server does not serve guests/pages/moat-page.js")
	}
}
