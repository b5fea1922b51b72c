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
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// TestConsoleMediaInChromium: the console's Media tab shows the
// organization's images inline, loaded from signed URLs (an <img> carries
// no API key), and other types as links; another organization's items are
// not there; an invocation whose output names an item shows it under the
// output.
func TestConsoleMediaInChromium(t *testing.T) {
	bin := chromium(t)
	ts := start(t, "", func(c *server.Config) { c.Profile = "dev" })
	key := ts.key(t, "acme", "ann", "admin")
	if r := ts.upload(t, key, testwasm.BuildGo(t, "./testdata/mediaguest", true),
		[]byte("name: gallery\nversion: 1.0.0\nactions: [{name: media}]\ncapabilities: {media: true}\n")); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	pic := keep(t, ts.Store(), "acme", pngBytes(t, 64, 48))
	pdf := keep(t, ts.Store(), "acme", []byte("%PDF-1.7\n%%EOF\n"))
	theirs := keep(t, ts.Store(), "globex", pngBytes(t, 50, 50))
	in, _ := json.Marshal(map[string]any{"op": "media.put", "req": map[string]any{"data": pngBytes(t, 20, 10)}})

	bctx := browser(t, bin, 90*time.Second, chromedp.WindowSize(1280, 900))
	var grid, links, outputIDs string
	var loaded, outputLoaded bool
	var png []byte
	const allLoaded = `(() => { const im = [...document.querySelectorAll("#media-all img")]; return im.length > 0 && im.every(i => i.complete && i.naturalWidth > 0); })()`
	err := chromedp.Run(bctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible("#api-key", chromedp.ByQuery),
		chromedp.SendKeys("#api-key", key, chromedp.ByQuery),
		chromedp.Click("#sign-in", chromedp.ByQuery),
		chromedp.WaitVisible(`#modules li[data-name="gallery"]`, chromedp.ByQuery),
		chromedp.Click(`button[data-tab="media"]`, chromedp.ByQuery),
		chromedp.Poll(allLoaded, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate(allLoaded, &loaded),
		chromedp.Evaluate(`[...document.querySelectorAll("#media-all figure")].map(f => f.dataset.id).join(" ")`, &grid),
		chromedp.Evaluate(`[...document.querySelectorAll("#media-all a")].map(a => a.getAttribute("href")).join(" ")`, &links),
		chromedp.FullScreenshot(&png, 100),
		chromedp.Click(`button[data-tab="modules"]`, chromedp.ByQuery),
		chromedp.SetValue("#input", string(in), chromedp.ByQuery),
		chromedp.Click("#invoke", chromedp.ByQuery),
		chromedp.Poll(`(() => { const i = document.querySelector("#output-media img"); return !!i && i.complete && i.naturalWidth === 20; })()`, nil,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate(`!document.querySelector("#output-media").hidden`, &outputLoaded),
		chromedp.Evaluate(`[...document.querySelectorAll("#output-media figure")].map(f => f.dataset.id).join(" ")`, &outputIDs),
	)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	p := filepath.Join(t.ArtifactDir(), "console-media.png")
	os.WriteFile(p, png, 0o644)
	t.Logf("screenshot: %s", p)
	if !loaded || !strings.Contains(grid, pic.ID) || !strings.Contains(grid, pdf.ID) || strings.Contains(grid, theirs.ID) {
		t.Errorf("the media grid: loaded %v, items %s", loaded, grid)
	}
	if !strings.Contains(links, "/v1/media/"+pdf.ID+"?") || !strings.Contains(links, "sig=") {
		t.Errorf("the PDF's link: %s", links)
	}
	if !outputLoaded || len(outputIDs) != 64 {
		t.Errorf("the invocation's item under its output: shown %v, %q", outputLoaded, outputIDs)
	}
}
