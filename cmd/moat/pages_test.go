package main_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestPagesListed: a plugin moat new makes has a page, which moat policy
// check and moat inspect (text and --json) list with who may open it; a
// page whose entry is missing is refused naming the page and the fix.
func TestPagesListed(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	work := t.TempDir()
	if r := moatIn(t, work, "new", "p", "--lang", "javascript"); r.code != 0 {
		t.Fatalf("new: %+v", r)
	}
	if r := moatIn(t, work, "policy", "check", "p"); r.code != 0 || !strings.Contains(r.stdout, "  main  nothing (any signed-in person)  index.html page.js") {
		t.Errorf("policy check: %+v", r)
	}
	if r := moatIn(t, work, "inspect", "p"); r.code != 0 || !strings.Contains(r.stdout, "pages (shown in moat serve's console):") ||
		!strings.Contains(r.stdout, "main  Greeter  index.html  anyone of the organization") {
		t.Errorf("inspect: %+v", r)
	}
	r := moatIn(t, work, "inspect", "--json", "p")
	var out struct {
		Pages []struct{ Module, Name, Title, Entry string }
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || len(out.Pages) != 1 || out.Pages[0].Name != "main" || out.Pages[0].Module != "p" {
		t.Errorf("inspect --json: %+v", r)
	}
	if err := os.Remove(filepath.Join(work, "p", "index.html")); err != nil {
		t.Fatal(err)
	}
	if r := moatIn(t, work, "inspect", "p"); r.code == 0 || !strings.Contains(r.stderr, "pages[0] (main): its entry index.html is not among the plugin's files; add index.html beside moat.yaml") {
		t.Errorf("inspect without the page's entry: %+v", r)
	}
}

// TestCompiledPluginPage: a compiled plugin moat new makes has a page too:
// moat build puts its files into the .wasm's moat.pages section, moat
// deploy carries them to moat serve (the built binary), which serves them;
// an edit of the page makes moat run rebuild the module.
func TestCompiledPluginPage(t *testing.T) {
	testenv.Slow(t, "a Go plugin's build and moat serve: about 30 s")
	testenv.Require(t, langMissing("go"))
	t.Parallel() // its own data dir and moat serve; no environment, no timing lock
	work := t.TempDir()
	if r := moatIn(t, work, "new", "p", "--lang", "go"); r.code != 0 {
		t.Fatalf("new: %+v", r)
	}
	if r := moatIn(t, work, "build", "p"); r.code != 0 {
		t.Fatalf("build: %+v", r)
	}
	b, err := bundle.Open(filepath.Join(work, "p"))
	if err != nil {
		t.Fatal(err)
	}
	pageJS, _ := os.ReadFile(filepath.Join(work, "p", "page.js"))
	if len(pageJS) == 0 || !bytes.Equal(b.Files["page.js"], pageJS) || b.Files["index.html"] == nil {
		t.Fatalf("the built module's pages' files: %q", b.Files)
	}
	if r := moatIn(t, work, "inspect", "p"); r.code != 0 || !strings.Contains(r.stdout, "main  Greeter  index.html") {
		t.Errorf("inspect: %+v", r)
	}

	data := t.TempDir()
	create := moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin")
	key := strings.TrimSpace(create.stdout)
	if create.code != 0 {
		t.Fatalf("keys create: %+v", create)
	}
	var rest bytes.Buffer
	base := startServeCmd(t, exec.Command(moatBin, "serve", "--data", data, "--listen", "127.0.0.1:0"), &rest)
	if r := moatEnvIn(t, work, []string{"MOAT_API_KEY=" + key}, "deploy", "p", "--server", base); r.code != 0 {
		t.Fatalf("deploy: %+v\n%s", r, rest.String())
	}
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if code, body := get("/v1/modules/p/pages"); code != 200 || !strings.Contains(body, `"name":"main"`) {
		t.Errorf("pages: %d %s", code, body)
	}
	if code, body := get("/v1/modules/p/pages/main/files/page.js"); code != 200 || body != string(pageJS) {
		t.Errorf("page.js: %d %s", code, body)
	}

	// An edited page is a stale module: moat run builds it first.
	time.Sleep(20 * time.Millisecond)
	writeFile(t, filepath.Join(work, "p", "page.js"), string(pageJS)+"\n// edited\n")
	r := moatIn(t, work, "run", "p", "greet", "--input", "World")
	if r.code != 0 || !strings.Contains(r.stderr, "building it first") {
		t.Fatalf("run after a page's edit: %+v", r)
	}
	if b, err := bundle.Open(filepath.Join(work, "p")); err != nil || !strings.HasSuffix(string(b.Files["page.js"]), "// edited\n") {
		t.Errorf("the rebuilt module's page.js: %v", err)
	}
}
