package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPagesListed: a plugin moat new makes has a page, which moat policy
// check and moat inspect (text and --json) list with who may open it; a
// page whose entry is missing is refused naming the page and the fix.
func TestPagesListed(t *testing.T) {
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
