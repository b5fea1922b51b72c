package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func resourceURIs(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Resource {
	t.Helper()
	out := map[string]*mcp.Resource{}
	for r, err := range cs.Resources(context.Background(), nil) {
		if err != nil {
			t.Fatalf("resources/list: %v", err)
		}
		out[r.URI] = r
	}
	return out
}

// TestMCPPages: a module's pages are MCP App resources (ui://module/page,
// text/html;profile=mcp-app) of the principals who may open them, linked
// from the module's tools; the document holds the page's own script and
// the MCP bridge in place of their tags, and asks the host for no network;
// a page the principal may not open, of another organization, or a URI
// with .. is not found.
func TestMCPPages(t *testing.T) {
	ts := startPages(t)
	ann := ts.key(t, "acme", "ann", "user")
	root := ts.key(t, "acme", "boss", "admin")
	carol := ts.key(t, "globex", "carol", "admin")
	const notes, admin = "ui://notebook/notes", "ui://notebook/admin"

	annMCP := mcpClient(t, ts, ann, nil)
	if ext := annMCP.InitializeResult().Capabilities.Extensions; ext == nil || ext["io.modelcontextprotocol/ui"] == nil {
		t.Errorf("capabilities.extensions = %v; want io.modelcontextprotocol/ui", ext)
	}
	for _, tc := range []struct {
		who       string
		key       string
		want, not []string
	}{
		{"ann", ann, []string{notes}, []string{admin}},
		{"boss", root, []string{notes, admin}, nil},
		{"carol of globex", carol, nil, []string{notes, admin}},
	} {
		got := resourceURIs(t, mcpClient(t, ts, tc.key, nil))
		for _, w := range tc.want {
			if r := got[w]; r == nil || r.MIMEType != "text/html;profile=mcp-app" {
				t.Errorf("%s's resources lack %s as an MCP App: %v", tc.who, w, got[w])
			}
		}
		for _, n := range tc.not {
			if got[n] != nil {
				t.Errorf("%s's resources hold %s", tc.who, n)
			}
		}
	}

	res, err := annMCP.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if !strings.HasPrefix(tool.Name, "notebook.") {
			continue
		}
		ui, _ := tool.Meta["ui"].(map[string]any)
		if ui == nil || ui["resourceUri"] != notes {
			t.Errorf("%s's _meta = %v; want ui.resourceUri %s", tool.Name, tool.Meta, notes)
		}
	}

	read, err := annMCP.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: notes})
	if err != nil || len(read.Contents) != 1 {
		t.Fatalf("read %s: %+v %v", notes, read, err)
	}
	doc := read.Contents[0]
	if doc.MIMEType != "text/html;profile=mcp-app" || !strings.Contains(doc.Text, notebookPageJS[:40]) ||
		strings.Contains(doc.Text, `src="page.js"`) || strings.Contains(doc.Text, `src="moat-page.js"`) ||
		!strings.Contains(doc.Text, `window.__moatPage={"module":"notebook","page":"notes"}`) || !strings.Contains(doc.Text, "ui/initialize") {
		t.Errorf("the page's document:\n%s", doc.Text)
	}
	ui, _ := doc.Meta["ui"].(map[string]any)
	csp, _ := ui["csp"].(map[string]any)
	if csp == nil || len(csp["connectDomains"].([]any)) != 0 || len(csp["resourceDomains"].([]any)) != 0 {
		t.Errorf("the page's _meta = %v; want a csp with no domains", doc.Meta)
	}

	for _, tc := range []struct {
		who, key, uri string
	}{
		{"ann", ann, admin},
		{"ann", ann, "ui://notebook/notes/../admin"},
		{"ann", ann, "ui://notebook/../notebook/admin"},
		{"ann", ann, "ui://notebook/nothere"},
		{"carol of globex", carol, notes},
		{"carol of globex", carol, "ui://notebook/admin"},
	} {
		if r, err := mcpClient(t, ts, tc.key, nil).ReadResource(context.Background(), &mcp.ReadResourceParams{URI: tc.uri}); err == nil {
			t.Errorf("%s read %s: %+v", tc.who, tc.uri, r)
		} else if !strings.Contains(err.Error(), "not found") {
			t.Errorf("%s read %s: %v; want not found, as a page that does not exist", tc.who, tc.uri, err)
		}
	}
}

// TestMCPPageHostile: a page title holding markup is a title, as text:
// resources/list carries it as it is, and it never enters a document; a
// page's script that closes its own tag stays inside it once inlined; a
// tag naming a file that is not the page's (the plugin's code, its
// manifest, a path out) is left as it is, and nothing of that file is
// inlined.
func TestMCPPageHostile(t *testing.T) {
	ts := start(t, "", func(c *server.Config) { c.Profile = "dev" })
	admin := ts.key(t, "acme", "root", "admin")
	files := map[string]string{}
	for k, v := range notebook {
		files[k] = v
	}
	const title = `<img src=x onerror="alert(1)"></title><script>`
	files["moat.yaml"] = strings.Replace(files["moat.yaml"], "title: Notes,", "title: '"+title+"',", 1)
	files["page.js"] = notebookPageJS + "\n// </script><script>alert(1)</SCRIPT>\n"
	files["index.html"] += `<script src="main.js"></script><img src='moat.yaml'><link rel="stylesheet" href="../../v1/whoami">`
	if r := ts.do(t, "POST", "/v1/modules", admin, pluginArchive(t, files), "Content-Type", "application/gzip"); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	cs := mcpClient(t, ts, admin, nil)
	r := resourceURIs(t, cs)["ui://notebook/notes"]
	if r == nil || r.Title != title {
		t.Fatalf("the page's resource: %+v", r)
	}
	read, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: r.URI})
	if err != nil {
		t.Fatal(err)
	}
	doc := read.Contents[0].Text
	if strings.Contains(doc, "onerror") {
		t.Errorf("the title entered the document:\n%s", doc)
	}
	if !strings.Contains(doc, `// <\/script><script>alert(1)<\/SCRIPT>`) {
		t.Errorf("the page's script closed its own tag once inlined:\n%s", doc)
	}
	for _, want := range []string{`<script src="main.js"></script>`, `<img src='moat.yaml'>`, `href="../../v1/whoami"`} {
		if !strings.Contains(doc, want) {
			t.Errorf("a tag naming a file not the page's was changed (%s):\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "moat.action(") || strings.Contains(doc, "kind: moat") {
		t.Errorf("a file not the page's was inlined:\n%s", doc)
	}
}

// TestMCPMediaList: resources/list lists the organization's media items
// after the pages, a page at a time, each read by its URI; another
// organization's key lists none; a made-up cursor is refused.
func TestMCPMediaList(t *testing.T) {
	ts := start(t, "", nil)
	bob := ts.key(t, "acme", "bob")
	carol := ts.key(t, "globex", "carol")
	var ids []string
	for i := range 55 {
		ids = append(ids, keep(t, ts.Store(), "acme", pngBytes(t, 1+i, 1)).ID)
	}
	got := resourceURIs(t, mcpClient(t, ts, bob, nil))
	for _, id := range ids {
		if r := got["moat://media/"+id]; r == nil || r.MIMEType != "image/png" {
			t.Errorf("bob's resources lack moat://media/%s: %v", id, r)
		}
	}
	if len(got) != len(ids) {
		t.Errorf("bob's resources: %d, want %d", len(got), len(ids))
	}
	if got := resourceURIs(t, mcpClient(t, ts, carol, nil)); len(got) != 0 {
		t.Errorf("carol of globex lists %d resources", len(got))
	}
	if _, err := mcpClient(t, ts, bob, nil).ListResources(context.Background(), &mcp.ListResourcesParams{Cursor: "media:../../v1/modules"}); err == nil {
		t.Error("a made-up media cursor was taken")
	}
	if _, err := mcpClient(t, ts, bob, nil).ListResources(context.Background(), &mcp.ListResourcesParams{Cursor: "junk"}); err == nil {
		t.Error("a made-up cursor was taken")
	}
}

// TestMCPOneRateToken: an MCP request costs its key one rate token,
// however many API requests it makes in process (the tools' listing, the
// pages, the call).
func TestMCPOneRateToken(t *testing.T) {
	ts := start(t, "", func(c *server.Config) { c.Limits.KeyRate, c.Limits.KeyBurst = 0.0001, 12 })
	ann := ts.key(t, "acme", "ann", "admin")
	if r := ts.upload(t, ann, tinyWasm(t), mcpManifest("tools")); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	// left is how many requests the key has left after connecting and
	// making calls tool calls.
	left := func(calls int) int {
		key := ts.key(t, "acme", "bob")
		cs := mcpClient(t, ts, key, nil)
		for range calls {
			if text, isErr := callText(t, cs, "tools.echo", map[string]any{"name": "Bob"}); isErr {
				t.Fatalf("tools.echo: %s", text)
			}
		}
		n := 0
		for ; ts.do(t, "GET", "/v1/whoami", key, nil).status == http.StatusOK; n++ {
		}
		return n
	}
	if a, b := left(0), left(3); a-b != 3 {
		t.Errorf("3 tool calls cost %d rate tokens, want 3 (%d left after connecting, %d after 3 calls)", a-b, a, b)
	}
}

// TestMCPExecRoles: the profile's exec_roles decide both /v1/runs and the
// session routes and whether tools/list shows run_code and the session
// tools; whoami says which.
func TestMCPExecRoles(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "coders.yaml")
	os.WriteFile(prof, []byte("name: coders\nexec_roles: [coder]\n"), 0o644)
	ts := start(t, "", func(c *server.Config) { c.Profiles = map[string]string{"lab": prof} })
	coder := ts.key(t, "lab", "cody", "coder")
	plain := ts.key(t, "lab", "pat", "viewer")
	other := ts.key(t, "acme", "ann") // the default profile: no exec_roles, everyone
	codeTools := []string{"run_code", "session_create", "session_run", "session_fork", "session_kill", "session_write_file", "session_read_file", "session_list_files"}
	for _, tc := range []struct {
		who  string
		key  string
		may  bool
		runs int
	}{
		{"cody (coder)", coder, true, 0},
		{"ann of acme", other, true, 0},
		{"pat (viewer)", plain, false, http.StatusForbidden},
	} {
		names := toolNames(t, mcpClient(t, ts, tc.key, nil))
		for _, n := range codeTools {
			if slices.Contains(names, n) != tc.may {
				t.Errorf("%s's tools %v: %s shown %v, want %v", tc.who, names, n, !tc.may, tc.may)
			}
		}
		if !slices.Contains(names, "task_status") {
			t.Errorf("%s's tools lack task_status", tc.who)
		}
		var who struct {
			MayRunCode bool `json:"may_run_code"`
		}
		json.Unmarshal(ts.do(t, "GET", "/v1/whoami", tc.key, nil).body, &who)
		if who.MayRunCode != tc.may {
			t.Errorf("%s: whoami's may_run_code %v", tc.who, who.MayRunCode)
		}
		if tc.may {
			continue
		}
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/v1/runs", `{"language":"javascript","files":[{"name":"a.js","content":"1"}]}`},
			{"POST", "/v1/sessions", `{}`},
			{"GET", "/v1/sessions", ``},
			{"POST", "/e2b/sandboxes", `{"templateID":"base"}`},
		} {
			r := ts.do(t, req.method, req.path, tc.key, strings.NewReader(req.body), "Content-Type", "application/json")
			if r.status != tc.runs || !strings.Contains(string(r.body), "exec_roles") {
				t.Errorf("%s: %s %s = %d %s; want %d naming exec_roles", tc.who, req.method, req.path, r.status, r.body, tc.runs)
			}
		}
	}
}

// TestMCPSessionFork: session_fork copies a session through the tools,
// and another organization's key cannot fork it.
func TestMCPSessionFork(t *testing.T) {
	testenv.Slow(t, "a Python session and its fork")
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	eve := ts.key(t, "evil", "eve")
	id := newSession(t, ts, ann)
	r, _ := sessionRun(t, ts, ann, id, "python", "x = 41")
	requireInterpreter(t, r)
	if r.status != http.StatusOK {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	cs := mcpClient(t, ts, ann, nil)
	text, isErr := callText(t, cs, "session_fork", map[string]any{"session_id": id})
	var out struct {
		Sessions []struct {
			ID string `json:"id"`
		} `json:"sessions"`
	}
	if isErr || json.Unmarshal([]byte(text), &out) != nil || len(out.Sessions) != 1 || out.Sessions[0].ID == id {
		t.Fatalf("session_fork: %s", text)
	}
	if text, isErr := callText(t, cs, "session_run", map[string]any{"session_id": out.Sessions[0].ID, "language": "python", "code": "print(x + 1)"}); isErr || !strings.Contains(text, "42") {
		t.Errorf("run in the copy: %s", text)
	}
	if text, isErr := callText(t, mcpClient(t, ts, eve, nil), "session_fork", map[string]any{"session_id": id}); !isErr || !strings.Contains(text, "404") {
		t.Errorf("eve of another organization forked it: %s", text)
	}
}

// TestMCPProgressHTTP: over /mcp, a call with a progress token (a
// session's run of 2.5 s) is answered as an event stream that carries
// "running" and a beat while it runs, and outlives the write timeout (1 s
// here) while it sends them; a request without one is one JSON document,
// as before.
func TestMCPProgressHTTP(t *testing.T) {
	testenv.Slow(t, "a Python session's run of 2.5 s; TestMCPProgress covers progress on stdio under -short")
	ts := start(t, "", func(c *server.Config) { c.HTTP.WriteTimeout = policy.Duration(time.Second) })
	ann := ts.key(t, "acme", "ann")
	heard := make(chan string, 64)
	c := mcp.NewClient(&mcp.Implementation{Name: "progress-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { heard <- r.Params.Message }})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{key: ann}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	id := newSession(t, ts, ann)
	r, _ := sessionRun(t, ts, ann, id, "python", "import time")
	requireInterpreter(t, r)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_run",
		Arguments: map[string]any{"session_id": id, "language": "python", "code": "time.sleep(2.5)\nprint('slept')"},
		Meta:      mcp.Meta{"progressToken": "p1"}})
	if err != nil {
		t.Fatalf("session_run: %v", err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if res.IsError || !strings.Contains(text, `slept`) {
		t.Fatalf("session_run: %s", text)
	}
	var msgs []string
	for len(heard) > 0 {
		msgs = append(msgs, <-heard)
	}
	if len(msgs) < 3 || msgs[0] != "running session_run" || !strings.Contains(msgs[len(msgs)-1], "still running") {
		t.Errorf("progress over /mcp: %q; want running and beats", msgs)
	}

	// Without a token: one JSON document.
	r = ts.do(t, "POST", "/mcp", ann, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`),
		"Content-Type", "application/json", "Accept", "application/json, text/event-stream", "Mcp-Protocol-Version", "2025-11-25")
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Errorf("tools/list without a token: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
	}
}
