package main_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestThumbnailExample follows examples/thumbnail/README.md, with the
// image server on a port of the test's instead of 8000: moat run has the
// host fetch the example's picture, keep it and a thumbnail of it. Then
// what the grant does not allow: a redirect from the granted server to
// the cloud metadata address and to another loopback port, a port the
// grant does not name, and bytes that are no image.
func TestThumbnailExample(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	root := testwasm.RepoRoot(t)
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(filepath.Join(root, "examples/thumbnail/testdata"))))
	mux.HandleFunc("/metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	other := httptest.NewServer(http.FileServer(http.Dir(filepath.Join(root, "examples/thumbnail/testdata"))))
	defer other.Close()
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/moat.png", http.StatusFound)
	})
	mux.HandleFunc("/page.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png") // a lie: the host sniffs the bytes
		w.Write([]byte("<html><script>alert(1)</script></html>"))
	})
	origin := httptest.NewServer(mux)
	defer origin.Close()

	dir := writeModule(t, "thumbnail", testwasm.BuildGo(t, "./examples/thumbnail", true))
	port := strings.TrimPrefix(origin.URL, "http://127.0.0.1:")
	for _, f := range []string{"moat.yaml", "profile.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, "examples/thumbnail", f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "http://127.0.0.1:8000") {
			t.Fatalf("examples/thumbnail/%s no longer grants http://127.0.0.1:8000", f)
		}
		os.WriteFile(filepath.Join(dir, f), []byte(strings.ReplaceAll(string(b), "127.0.0.1:8000", "127.0.0.1:"+port)), 0o644)
	}
	data := t.TempDir()
	run := func(input string) result {
		return moat(t, "", "run", "--data", data, "--profile", filepath.Join(dir, "profile.yaml"), dir, "make", "--input", input)
	}

	r := run(`{"url":"` + origin.URL + `/moat.png","width":160}`)
	var out struct {
		ID       string
		Original struct {
			ID, Type      string
			Width, Height int
		}
		Thumbnail struct {
			ID, Type      string
			Width, Height int
		}
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
		t.Fatalf("make: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if out.Original.Type != "image/png" || out.Original.Width != 640 || out.Original.Height != 400 ||
		out.Thumbnail.Width != 160 || out.Thumbnail.Height != 100 || out.ID != out.Thumbnail.ID || len(out.ID) != 64 {
		t.Errorf("make: %s", r.stdout)
	}
	// The same picture again is the same items.
	if again := run(`{"url":"` + origin.URL + `/moat.png","width":160}`); again.code != 0 || again.stdout != r.stdout {
		t.Errorf("make again: %d %q, want %q", again.code, again.stdout, r.stdout)
	}

	for _, c := range []struct{ name, url, want string }{
		{"a redirect to the metadata address", origin.URL + "/metadata", "169.254.169.254"},
		{"a redirect to a port not granted", origin.URL + "/elsewhere", other.URL},
		{"a port not granted", other.URL + "/moat.png", other.URL},
	} {
		if r := run(`{"url":"` + c.url + `"}`); r.code != 3 || !strings.Contains(r.stderr, "denied") || !strings.Contains(r.stderr, strings.TrimPrefix(c.want, "http://")) {
			t.Errorf("%s: exit %d, want 3 (denied) naming %s\n%s%s", c.name, r.code, c.want, r.stdout, r.stderr)
		}
	}
	if r := run(`{"url":"` + origin.URL + `/page.html"}`); r.code == 0 || !strings.Contains(r.stderr, "invalid_argument") {
		t.Errorf("HTML claiming to be a PNG: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	audit := moat(t, "", "audit", "--data", data, "--kind", "op")
	for _, want := range []string{"make/media.fetch", "make/http.fetch", "make/media.thumbnail"} {
		if !strings.Contains(audit.stdout, want) {
			t.Errorf("the audit trail lacks %s:\n%s", want, audit.stdout)
		}
	}
}
