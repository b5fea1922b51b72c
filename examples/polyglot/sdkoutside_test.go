//go:build !wasip1

package polyglot_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testenv"
	_ "github.com/moat-sandbox/moat/languages/javascript"
	_ "github.com/moat-sandbox/moat/languages/python"
	_ "github.com/moat-sandbox/moat/languages/ruby"
	"github.com/moat-sandbox/moat/policy"
)

// outsideFixtures are the SDKs' fixtures of the ops that reach outside
// the plugin, http.fetch, media.* and ai.*: one small plugin per
// language (testdata/outside-*), with the same three actions.
var outsideFixtures = []guest{
	{"go", "examples/polyglot/testdata/outside-go", buildGo("./examples/polyglot/testdata/outside-go")},
	{"c", "examples/polyglot/testdata/outside-c", buildC("examples/polyglot/testdata/outside-c/outside.c", false)},
	{"cpp", "examples/polyglot/testdata/outside-cpp", buildC("examples/polyglot/testdata/outside-cpp/outside.cpp", true)},
	{"rust", "examples/polyglot/testdata/outside-rust", buildRust("examples/polyglot/testdata/outside-rust", "outside_rust")},
	{"assemblyscript", "examples/polyglot/testdata/outside-as", buildAS("examples/polyglot/testdata/outside-as")},
}

// outsideScripts are the fixtures that run as script plugins. The
// JavaScript fixture catches its MoatError and exits 1, a guest_error
// naming the code (an escaped one would keep its code: TestScriptErrorCodes
// in server); Python's serve() and Ruby's keep it.
var outsideScripts = []struct {
	lang, dir string
	script    bool
}{
	{"javascript", "examples/polyglot/testdata/outside-js", true},
	{"python", "examples/polyglot/testdata/outside-python", false},
	{"ruby", "examples/polyglot/testdata/outside-ruby", false},
}

// providerKey is the key the OpenAI-compatible test server demands: the
// operator's secret, which must never reach a guest or the audit trail.
const providerKey = "sk-moat-test-provider-7c1f"

// withAIProvider configures cfg to call the OpenAI-compatible provider at
// baseURL (its /v1/chat/completions and /v1/embeddings) with the key
// providerKey, an operator's secret (organization "") kept sealed in the
// host's store by a real vault, and the model aliases small-chat (the
// provider's model test-chat) and small-embed (test-embed).
func withAIProvider(t *testing.T, cfg *host.Config, baseURL string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	key, err := secrets.ParseKey(base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		t.Fatal(err)
	}
	vault := secrets.NewVault(st, key, nil)
	if _, err := vault.Set(ctx, secrets.Actor{Via: "cli", User: "operator"}, "", "provider", []byte(providerKey)); err != nil {
		t.Fatal(err)
	}
	svc, err := ai.New(ai.Config{
		Providers: map[string]ai.ProviderConfig{"test": {BaseURL: baseURL + "/v1", APIKeySecret: "provider"}},
		Models: map[string]ai.ModelConfig{
			"small-chat":  {Provider: "test", Model: "test-chat", Kind: ai.KindChat},
			"small-embed": {Provider: "test", Model: "test-embed", Kind: ai.KindEmbed},
		},
	}, st, cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Families = st, map[string]any{"secrets": &ops.SecretsConfig{Source: vault}, "ai": &ai.FamilyConfig{Service: svc}}
}

// origin is the loopback server the plugins fetch from: /sdk/echo
// answers 201 with X-Echo (the request's X-Test and method) and "got:"
// before the request's body; /sdk/image.png is testPNG.
func origin(t *testing.T, img []byte) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/sdk/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", r.Header.Get("X-Test")+" "+r.Method)
		w.WriteHeader(http.StatusCreated)
		w.Write(append([]byte("got:"), body...))
	})
	mux.HandleFunc("/sdk/image.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write(img)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// testPNG is a 64x48 PNG of a gradient.
func testPNG(t *testing.T) []byte {
	m := image.NewNRGBA(image.Rect(0, 0, 64, 48))
	for y := range 48 {
		for x := range 64 {
			m.Set(x, y, color.NRGBA{uint8(x * 4), uint8(y * 5), 128, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// aiServer is an OpenAI-compatible provider in the test process (the one
// stand-in the project allows: a paid external service). A chat
// completion answers "echo: " and the last message's content, or, when
// the request asks for a response format, {"answer": that content}; its
// usage is the bytes of the messages' contents in and of the text out.
// An embedding of s is [len(s), 0.5, -0.25]. Requests without the key
// are refused with 401.
type aiServer struct {
	*httptest.Server
	mu   sync.Mutex
	chat []map[string]any // the chat requests received, decoded
	raw  []string         // and as sent
}

func newAIServer(t *testing.T) *aiServer {
	s := &aiServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+providerKey {
			http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
			ResponseFormat json.RawMessage `json:"response_format"`
		}
		var all map[string]any
		if json.Unmarshal(raw, &req) != nil || json.Unmarshal(raw, &all) != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.chat, s.raw = append(s.chat, all), append(s.raw, string(raw))
		s.mu.Unlock()
		last := req.Messages[len(req.Messages)-1].Content
		text := "echo: " + last
		if req.ResponseFormat != nil {
			b, _ := json.Marshal(map[string]string{"answer": last})
			text = string(b)
		}
		in := 0
		for _, m := range req.Messages {
			in += len(m.Content)
		}
		writeJSON(w, map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]string{"role": "assistant", "content": text}}},
			"usage":   map[string]int{"prompt_tokens": in, "completion_tokens": len(text), "total_tokens": in + len(text)},
		})
	})
	mux.HandleFunc("/v1/embeddings", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+providerKey {
			http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		var data []any
		in := 0
		for i, s := range req.Input {
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": []float64{float64(len(s)), 0.5, -0.25}})
			in += len(s)
		}
		writeJSON(w, map[string]any{"object": "list", "model": req.Model, "data": data, "usage": map[string]int{"prompt_tokens": in, "total_tokens": in}})
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// outsideHost is a host whose profile grants the http target of granted
// (not that of the fixtures' second server), media, and the models
// small-chat and small-embed (not big-chat, which the fixtures also ask
// for), with the provider at ai configured.
func outsideHost(t *testing.T, granted string, ai *aiServer) *host.Host {
	t.Helper()
	p, err := policy.ParseProfile("outside.yaml", []byte(fmt.Sprintf(`
name: outside
on_ungranted: deny_at_call
default:
  capabilities: {http: [%q], media: true, ai: [small-chat, small-embed]}
  limits: {memory: 128MiB, timeout: 60s}
`, granted)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Logger: slog.New(slog.DiscardHandler), Profile: p}
	withAIProvider(t, &cfg, ai.URL)
	ctx := context.Background()
	h := hosttest.New(t, cfg)
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

// TestSDKOutside drives the http, media and ai wrappers of every guest
// SDK through its fixture and a real host, with one script: a POST with
// a header and a binary body to a loopback server the grants name (the
// reply's status, header, bytes and URL read back), and one to a server
// they do not (denied); an image kept from bytes and fetched by URL (the
// same content, so the same id), thumbnailed, described and read back;
// bytes that are no image refused; a completion, one with a JSON schema
// and an embedding through an OpenAI-compatible server, their usage, and
// a model not granted (denied). Each model call's id is in the audit
// trail under the invocation's correlation id, beside the http.fetch;
// the provider's key is in no output and no audit event.
func TestSDKOutside(t *testing.T) {
	testenv.Slow(t, "Rust and AssemblyScript builds outside the tree")
	img := testPNG(t)
	granted := origin(t, img)
	other := origin(t, img) // asked for by the fixtures, not granted by the profile
	ai := newAIServer(t)
	editManifest := func(mf *policy.Manifest) {
		mf.Capabilities.HTTP = policy.HTTPCaps{Targets: []string{granted.URL, other.URL}}
	}
	type fixture struct {
		lang   string
		load   func(t *testing.T, h *host.Host) *host.Module
		script bool
	}
	var fixtures []fixture
	for _, g := range outsideFixtures {
		fixtures = append(fixtures, fixture{lang: g.lang, load: func(t *testing.T, h *host.Host) *host.Module {
			return load(t, h, bundle(t, g), func(o *host.LoadOptions) {
				mf := *o.Manifest
				editManifest(&mf)
				o.Manifest, o.ManifestBytes = &mf, nil
			})
		}})
	}
	for _, s := range outsideScripts {
		fixtures = append(fixtures, fixture{lang: s.lang, load: loadScriptFixture(s.dir, editManifest), script: s.script})
	}
	for _, f := range fixtures {
		t.Run(f.lang, func(t *testing.T) {
			h := outsideHost(t, granted.URL, ai)
			sdkOutside(t, h, f.load(t, h), f.script, granted.URL, other.URL, img, ai)
		})
	}
}

var hexID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// sdkOutside runs TestSDKOutside's script on one fixture.
func sdkOutside(t *testing.T, h *host.Host, m *host.Module, script bool, granted, other string, img []byte, ai *aiServer) {
	ctx := context.Background()
	n := 0
	invoke := func(action string, input []byte) (map[string]any, string, error) {
		t.Helper()
		n++
		cid := fmt.Sprintf("outside-%s-%d", action, n)
		res, err := m.Invoke(ctx, host.Request{Action: action, Input: input, Principal: ann, CorrelationID: cid})
		if err != nil {
			return nil, cid, err
		}
		if bytes.Contains(res.Output, []byte(providerKey)) {
			t.Errorf("%s: the provider's key reached the guest: %s", action, res.Output)
		}
		var out map[string]any
		if err := json.Unmarshal(res.Output, &out); err != nil {
			return nil, cid, fmt.Errorf("%s: output %q is not a JSON object: %w", action, res.Output, err)
		}
		return out, cid, nil
	}
	must := func(action string, input []byte) (map[string]any, string) {
		t.Helper()
		out, cid, err := invoke(action, input)
		if err != nil {
			t.Fatalf("%s %.60q: %v", action, input, err)
		}
		return out, cid
	}
	refused := func(action string, input []byte, code abi.Code) {
		t.Helper()
		out, _, err := invoke(action, input)
		var he *host.Error
		switch {
		case !errors.As(err, &he):
			t.Errorf("%s %.60q = %v, %v; want %s", action, input, out, err, code)
		case script && (he.Code != abi.CodeGuestError || !strings.Contains(he.Reason, string(code)+": ")):
			t.Errorf("%s %.60q: %v; want a guest_error naming %s", action, input, err, code)
		case !script && he.Code != code:
			t.Errorf("%s %.60q: %v; want %s", action, input, err, code)
		}
	}
	// events returns the audit events of one invocation.
	events := func(cid string) []store.AuditEvent {
		t.Helper()
		if err := hosttest.Audit(h).Flush(ctx); err != nil {
			t.Fatal(err)
		}
		evs, err := hosttest.Store(h).AuditQuery(ctx, store.AuditFilter{CorrelationID: cid, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if strings.Contains(fmt.Sprint(e), providerKey) {
				t.Errorf("the provider's key is in an audit event: %+v", e)
			}
		}
		return evs
	}

	// http: the body's bytes both ways, a header, the status, the URL.
	out, cid := must("http", []byte(granted+"/sdk/echo"))
	want := map[string]any{"status": 201.0, "url": granted + "/sdk/echo", "echo": "sdk POST", "body": hex.EncodeToString([]byte("got:\x00\xffhi"))}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("http = %v\nwant %v", out, want)
	}
	fetched := false
	for _, e := range events(cid) {
		fetched = fetched || e.Op == abi.OpHTTPFetch
	}
	if !fetched {
		t.Errorf("no audit event of op %s under the invocation's correlation id %s", abi.OpHTTPFetch, cid)
	}
	refused("http", []byte(other+"/sdk/echo"), abi.CodeDenied)

	// media: kept from bytes, then fetched by URL: the same content in
	// the same organization is the same item.
	checkMedia := func(out map[string]any, fromBytes string) string {
		t.Helper()
		item, _ := out["item"].(map[string]any)
		thumb, _ := out["thumb"].(map[string]any)
		got, _ := out["got"].(map[string]any)
		id, _ := item["id"].(string)
		if !hexID.MatchString(id) || item["type"] != "image/png" || item["width"] != 64.0 || item["height"] != 48.0 {
			t.Errorf("item = %v; want a 64x48 image/png with a SHA-256 id", item)
		}
		if fromBytes != "" && id != fromBytes {
			t.Errorf("the item fetched by URL is %s, the one kept from the same bytes %s", id, fromBytes)
		}
		if tid, _ := thumb["id"].(string); !hexID.MatchString(tid) || tid == id || thumb["width"] != 16.0 || thumb["height"] != 16.0 ||
			!strings.HasPrefix(fmt.Sprint(thumb["type"]), "image/") {
			t.Errorf("thumb = %v; want a 16x16 image (cover) of its own id", thumb)
		}
		if !reflect.DeepEqual(out["info"], out["thumb"]) {
			t.Errorf("info %v describes the thumbnail %v otherwise", out["info"], out["thumb"])
		}
		if got["id"] != id || got["len"] != item["size"] || got["head"] != "89504e470d0a1a0a" {
			t.Errorf("got = %v; want the item's %v bytes, a PNG", got, item["size"])
		}
		return id
	}
	out, _ = must("media", img)
	id := checkMedia(out, "")
	out, _ = must("media", []byte("fetch "+granted+"/sdk/image.png"))
	checkMedia(out, id)
	refused("media", []byte("plain text, no image"), abi.CodeInvalidArgument)
	refused("media", []byte("fetch "+other+"/sdk/image.png"), abi.CodeDenied)

	// ai: the request reached the provider as the fixture built it, the
	// reply and its usage came back, and the model call is in the trail.
	prompt := "Say \"hi\" ü 😀"
	out, cid = must("ai", []byte("complete small-chat "+prompt))
	text := "echo: " + prompt
	if out["text"] != text || out["input_tokens"] != float64(len("Answer briefly.")+len(prompt)) || out["output_tokens"] != float64(len(text)) {
		t.Errorf("complete = %v; want %q and its usage", out, text)
	}
	callID, _ := out["model_call_id"].(string)
	ai.mu.Lock()
	last := map[string]any{}
	if len(ai.chat) > 0 {
		last = ai.chat[len(ai.chat)-1]
	}
	ai.mu.Unlock()
	wantMsgs := []any{map[string]any{"role": "system", "content": "Answer briefly."}, map[string]any{"role": "user", "content": prompt}}
	if last["model"] != "test-chat" || !reflect.DeepEqual(last["messages"], wantMsgs) || last["temperature"] != 0.25 ||
		last["max_tokens"] != 64.0 && last["max_completion_tokens"] != 64.0 {
		t.Errorf("the provider got %v; want test-chat, the two messages, temperature 0.25 and 64 tokens", last)
	}
	called := false
	for _, e := range events(cid) {
		called = called || callID != "" && e.ModelCallID == callID
	}
	if !called {
		t.Errorf("no audit event holds the model call id %q under the invocation's correlation id %s", callID, cid)
	}
	out, _ = must("ai", []byte("json small-chat What is six times seven?"))
	var answer map[string]string
	if s, _ := out["text"].(string); json.Unmarshal([]byte(s), &answer) != nil || answer["answer"] != "What is six times seven?" {
		t.Errorf("json = %v; want the provider's JSON answer", out)
	}
	ai.mu.Lock()
	if len(ai.raw) == 0 || !strings.Contains(ai.raw[len(ai.raw)-1], `"answer"`) {
		t.Errorf("the schema did not reach the provider: %v", ai.raw)
	}
	ai.mu.Unlock()
	out, _ = must("ai", []byte("embed small-embed héllo"))
	wantVec := []any{[]any{float64(len("héllo")), 0.5, -0.25}, []any{4.0, 0.5, -0.25}}
	if !reflect.DeepEqual(out["vectors"], wantVec) || out["input_tokens"] != float64(len("héllo")+4) || out["model_call_id"] == "" {
		t.Errorf("embed = %v; want vectors %v and their usage", out, wantVec)
	}
	refused("ai", []byte("complete big-chat hi"), abi.CodeDenied)
}
