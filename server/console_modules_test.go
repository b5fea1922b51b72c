package server_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleModuleManageInChromium: the operator's view of a module in
// the console — its actions with their roles and permissions, the current
// version's manifest, its versions with a roll back that makes an older
// one current, delete — and a script plugin uploaded from the console as
// an archive of its directory.
func TestConsoleModuleManageInChromium(t *testing.T) {
	bin := chromium(t)
	ts := start(t, "", nil)
	admin := ts.key(t, "acme", "ann", "admin")
	var digests []string
	for _, wasm := range [][]byte{tinyWasm(t), withCustomSection(tinyWasm(t), "v2")} {
		r := ts.upload(t, admin, wasm, tinyManifest("flip", "    roles: [dev, admin]\n"))
		var m struct{ Digest string }
		if r.status != http.StatusCreated || json.Unmarshal(r.body, &m) != nil {
			t.Fatalf("upload: %d %s", r.status, r.body)
		}
		digests = append(digests, m.Digest)
	}
	archive := filepath.Join(t.TempDir(), "hello-js.tar.gz")
	if err := os.WriteFile(archive, scriptArchive(t, "hello-js", nil).Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	bctx := browser(t, bin, 180*time.Second, chromedp.WindowSize(1280, 1200))
	var grants, manifest, versions, status, uploaded string
	var png []byte
	err := chromedp.Run(bctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible("#api-key", chromedp.ByQuery),
		chromedp.SendKeys("#api-key", admin, chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.WaitVisible(`#modules li[data-name="flip"]`, chromedp.ByQuery),
		chromedp.Click(`#modules li[data-name="flip"]`, chromedp.ByQuery),
		chromedp.Click(`#module-manage summary`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll("#module-versions tr").length === 2`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("#module-grants", &grants, chromedp.ByQuery),
		chromedp.Text("#module-manifest", &manifest, chromedp.ByQuery),
		chromedp.Text("#module-versions", &versions, chromedp.ByQuery),
		chromedp.FullScreenshot(&png, 100),
		chromedp.Click(`#module-versions button[data-restore="`+digests[0]+`"]`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#module-manage-status").textContent.startsWith("Now at")`, nil, chromedp.WithPollingTimeout(60*time.Second)),
		chromedp.Text("#module-manage-status", &status, chromedp.ByQuery),
		// A script plugin as an archive.
		chromedp.Evaluate(`document.querySelector("#tab-modules details.upload").open = true`, nil),
		chromedp.SetUploadFiles(`#archive-form input[type=file]`, []string{archive}, chromedp.ByQuery),
		chromedp.Click(`#archive-form button`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#archive-status").textContent !== ""`, nil, chromedp.WithPollingTimeout(60*time.Second)),
		chromedp.Text("#archive-status", &uploaded, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	p := filepath.Join(t.ArtifactDir(), "console-module-manage.png")
	os.WriteFile(p, png, 0o644)
	t.Logf("screenshot: %s", p)
	if !strings.Contains(grants, "echo") || !strings.Contains(grants, "dev, admin") {
		t.Errorf("the grants table:\n%s", grants)
	}
	if !strings.Contains(manifest, "name: flip") || !strings.Contains(manifest, "greeting: Hello") {
		t.Errorf("the manifest:\n%s", manifest)
	}
	if !strings.Contains(versions, "current") || !strings.Contains(versions, digests[0][:16]) {
		t.Errorf("the versions:\n%s", versions)
	}
	var m struct{ Digest string }
	json.Unmarshal(ts.do(t, "GET", "/v1/modules/flip", admin, nil).body, &m)
	if m.Digest != digests[0] {
		t.Errorf("after the roll back (%q) the current digest is %s, want %s", status, m.Digest, digests[0])
	}
	if !strings.HasPrefix(uploaded, "Uploaded hello-js") {
		t.Errorf("the archive upload: %q", uploaded)
	}

	// Delete, from the console.
	err = chromedp.Run(bctx,
		chromedp.Click(`#modules li[data-name="flip"]`, chromedp.ByQuery),
		chromedp.Evaluate(`window.confirm = () => true; document.querySelector("#module-manage").open = true; document.querySelector("#module-delete").click()`, nil),
		chromedp.Poll(`!document.querySelector('#modules li[data-name="flip"]')`, nil, chromedp.WithPollingTimeout(10*time.Second)),
	)
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if r := ts.do(t, "GET", "/v1/modules/flip", admin, nil); r.status != 404 {
		t.Errorf("after the delete: %d", r.status)
	}
}
