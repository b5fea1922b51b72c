package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpHostPage is a minimal MCP Apps host: it renders the app's document
// in a sandboxed frame (an opaque origin, scripts only) and answers its
// JSON-RPC: ui/initialize itself, tools/call and resources/read through
// the host's MCP client (POST /rpc).
const mcpHostPage = `<!doctype html><body><iframe id="f" sandbox="allow-scripts" width="800" height="600"></iframe><script>
const f = document.getElementById("f");
window.seen = [];
window.addEventListener("message", async (ev) => {
  if (ev.source !== f.contentWindow) return;
  const m = ev.data;
  if (!m || m.jsonrpc !== "2.0") return;
  window.seen.push(m.method + (m.params && m.params.name ? " " + m.params.name : ""));
  if (!("id" in m)) return;
  let reply;
  if (m.method === "ui/initialize") {
    reply = { jsonrpc: "2.0", id: m.id, result: { protocolVersion: "2026-01-26", hostInfo: { name: "test-host", version: "1" }, hostCapabilities: {}, hostContext: {} } };
  } else {
    reply = await (await fetch("/rpc", { method: "POST", body: JSON.stringify(m) })).json();
  }
  f.contentWindow.postMessage(reply, "*");
});
fetch("/doc").then((r) => r.text()).then((t) => { f.srcdoc = t; });
</script>`

// TestMCPAppInChromium renders a module's page as an MCP host would (the
// resource's document in a sandboxed frame of the host, which proxies the
// app's calls to its MCP client holding ann's key): the inlined page runs
// with the MCP bridge, lists ann's notes by tools/call notebook.list, and
// shows a media item it made, read as a resource into a data: URL.
func TestMCPAppInChromium(t *testing.T) {
	testenv.Slow(t, "headless Chromium")
	bin := chromium(t)
	ts := startPages(t)
	ann := ts.key(t, "acme", "ann", "user")
	if r := ts.do(t, "POST", "/v1/modules/notebook/actions/add", ann, strings.NewReader(`{"title":"from the API"}`)); r.status != http.StatusOK {
		t.Fatalf("add: %d %s", r.status, r.body)
	}
	cs := mcpClient(t, ts, ann, nil)
	read, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "ui://notebook/notes"})
	if err != nil {
		t.Fatal(err)
	}
	doc := read.Contents[0].Text

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(mcpHostPage))
	})
	mux.HandleFunc("GET /doc", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(doc)) })
	mux.HandleFunc("POST /rpc", func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		json.NewDecoder(r.Body).Decode(&m)
		reply := map[string]any{"jsonrpc": "2.0", "id": m.ID}
		var res any
		var err error
		switch m.Method {
		case "tools/call":
			var p mcp.CallToolParams
			if err = json.Unmarshal(m.Params, &p); err == nil {
				res, err = cs.CallTool(r.Context(), &p)
			}
		case "resources/read":
			var p mcp.ReadResourceParams
			if err = json.Unmarshal(m.Params, &p); err == nil {
				res, err = cs.ReadResource(r.Context(), &p)
			}
		default:
			reply["error"] = map[string]any{"code": -32601, "message": "not offered by this host"}
		}
		if err != nil {
			reply["error"] = map[string]any{"code": -32603, "message": err.Error()}
		} else if res != nil {
			reply["result"] = res
		}
		json.NewEncoder(w).Encode(reply)
	})
	host := httptest.NewServer(mux)
	defer host.Close()

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true), chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(profileDir(t)),
		chromedp.Flag("disable-features", "IsolateSandboxedIframes,site-per-process"), chromedp.Flag("disable-site-isolation-trials", true),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	tab, tcancel := chromedp.NewContext(actx)
	defer tcancel()
	if err := chromedp.Run(tab, chromedp.Navigate(host.URL)); err != nil {
		t.Fatal(err)
	}

	// The app's frame, read through an isolated world.
	inApp := func(expr string, out any) error {
		return chromedp.Run(tab, chromedp.ActionFunc(func(ctx context.Context) error {
			tree, err := page.GetFrameTree().Do(ctx)
			if err != nil {
				return err
			}
			if len(tree.ChildFrames) == 0 {
				return errNoPageFrame
			}
			world, err := page.CreateIsolatedWorld(tree.ChildFrames[0].Frame.ID).Do(ctx)
			if err != nil {
				return err
			}
			res, exc, err := runtime.Evaluate(expr).WithContextID(world).WithReturnByValue(true).Do(ctx)
			if err != nil || exc != nil {
				return errNoPageFrame
			}
			return json.Unmarshal(res.Value, out)
		}))
	}
	var probe string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if inApp(`(document.querySelector("#probe") || {}).textContent || ""`, &probe) == nil && probe != "" {
			break
		}
	}
	var seen []string
	chromedp.Run(tab, chromedp.Evaluate(`window.seen`, &seen))
	if probe == "" {
		t.Fatalf("the app never finished its probe; the host saw %q", seen)
	}
	t.Logf("the app's probe %s; the host saw %q", probe, seen)
	var out map[string]string
	json.Unmarshal([]byte(probe), &out)
	var notes []string
	inApp(`[...document.querySelectorAll("#list li")].map((li) => li.textContent)`, &notes)
	if len(notes) != 1 || notes[0] != "from the API" {
		t.Errorf("the app lists %q; want ann's note", notes)
	}
	if out["otherAction"] != "failed" || out["badAction"] != "failed" {
		t.Errorf("an action the module lacks, and ../list, from the app: %q, %q; want failed", out["otherAction"], out["badAction"])
	}
	if out["media"] != "shown" {
		t.Errorf("the media item in the app: %q (probe %s)", out["media"], probe)
	}
	for _, want := range []string{"ui/initialize", "ui/notifications/initialized", "tools/call notebook.list", "tools/call notebook.pic", "resources/read"} {
		found := false
		for _, s := range seen {
			found = found || s == want
		}
		if !found {
			t.Errorf("the host saw %q; want %s", seen, want)
		}
	}
}
