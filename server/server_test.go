package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// TestEndToEnd drives the API as a client would: upload hello-go, invoke
// greet, follow the correlation id into the audit trail, and hit each
// refusal: 401, 403, 404, 428 (and its confirmation), 413, 422.
func TestEndToEnd(t *testing.T) {
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann", "admin")
	bob := ts.key(t, "acme", "bob")
	eve := ts.key(t, "globex", "eve", "admin")
	wasm := helloWasm(t)

	r := ts.upload(t, ann, wasm, helloManifest(t))
	if r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if m := r.json(t); m["name"] != "hello-go" || m["version"] != "0.1.0" || m["org"] != "acme" || m["uploaded_by"] != "ann" {
		t.Errorf("upload response = %v", m)
	}

	r = ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", bob, strings.NewReader("World"), "X-Request-Id", "e2e-greet-1")
	if r.status != http.StatusOK || string(r.body) != "Hello, World! (call #1)" {
		t.Fatalf("greet: %d %q", r.status, r.body)
	}
	if got := r.header.Get("X-Request-Id"); got != "e2e-greet-1" {
		t.Errorf("X-Request-Id = %q, want the client's e2e-greet-1", got)
	}
	r = ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", bob, strings.NewReader("Bob"))
	if string(r.body) != "Hello, Bob! (call #2)" || len(r.header.Get("X-Request-Id")) != 24 {
		t.Errorf("second greet: %q, generated request id %q", r.body, r.header.Get("X-Request-Id"))
	}

	// The audit trail of the first call: its kv.put and the invocation,
	// both for bob of acme.
	r = ts.do(t, "GET", "/v1/audit?correlation_id=e2e-greet-1", bob, nil)
	events, _ := r.json(t)["events"].([]any)
	kinds := map[string]bool{}
	for _, e := range events {
		e := e.(map[string]any)
		if e["correlation_id"] != "e2e-greet-1" || e["user"] != "bob" || e["org"] != "acme" {
			t.Errorf("audit event %v is not bob's e2e-greet-1", e)
		}
		kinds[e["kind"].(string)+"/"+e["decision"].(string)] = true
	}
	if !kinds["invocation/allow"] || !kinds["op/allow"] {
		t.Errorf("audit kinds = %v, want invocation/allow and op/allow (kv.put)", kinds)
	}
	// Another organization sees none of it.
	r = ts.do(t, "GET", "/v1/audit?correlation_id=e2e-greet-1", eve, nil)
	if ev, _ := r.json(t)["events"].([]any); len(ev) != 0 {
		t.Errorf("globex sees %d of acme's audit events", len(ev))
	}

	// 401: no key, a malformed header, an unknown key.
	for _, h := range [][]string{nil, {"Authorization", "Basic Zm9vOmJhcg=="}, {"Authorization", "Bearer moat_sk_nope"}} {
		r = ts.do(t, "GET", "/v1/modules", "", nil, h...)
		if r.status != http.StatusUnauthorized || r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%v: %d %s %q", h, r.status, r.header.Get("Content-Type"), r.body)
		}
	}

	// 404: another organization's module is as absent as a missing one.
	for _, path := range []string{"/v1/modules/hello-go", "/v1/modules/hello-go/versions"} {
		if r = ts.do(t, "GET", path, eve, nil); r.status != http.StatusNotFound {
			t.Errorf("globex GET %s: %d, want 404", path, r.status)
		}
	}
	r = ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", eve, strings.NewReader("x"))
	if r.status != http.StatusNotFound || r.json(t)["code"] != "not_found" {
		t.Errorf("globex invoke: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/modules/hello-go/actions/nosuch", bob, nil); r.status != http.StatusNotFound || r.json(t)["code"] != "no_such_action" {
		t.Errorf("unknown action: %d %s", r.status, r.body)
	}

	// 403: an action for admins only.
	if r = ts.upload(t, ann, wasm, renamed(t, "hello-admin", "    roles: [admin]\n")); r.status != http.StatusCreated {
		t.Fatalf("upload hello-admin: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/v1/modules/hello-admin/actions/greet", bob, strings.NewReader("x"), "X-Request-Id", "e2e-denied")
	if p := r.json(t); r.status != http.StatusForbidden || p["code"] != "denied" || p["type"] != "urn:moat:problem:denied" || p["correlation_id"] != "e2e-denied" {
		t.Errorf("bob on an admin action: %d %v", r.status, p)
	}
	if r = ts.do(t, "POST", "/v1/modules/hello-admin/actions/greet", ann, strings.NewReader("Ann")); r.status != http.StatusOK {
		t.Errorf("ann (admin): %d %s", r.status, r.body)
	}
	r = ts.do(t, "GET", "/v1/audit?decision=deny&module=hello-admin", ann, nil)
	if ev, _ := r.json(t)["events"].([]any); len(ev) != 1 || ev[0].(map[string]any)["correlation_id"] != "e2e-denied" {
		t.Errorf("deny events of hello-admin = %v", ev)
	}

	// 428: an action that needs confirming, then the confirmation.
	if r = ts.upload(t, ann, wasm, renamed(t, "hello-confirm", "    confirm: true\n")); r.status != http.StatusCreated {
		t.Fatalf("upload hello-confirm: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/v1/modules/hello-confirm/actions/greet", bob, strings.NewReader("Later"))
	p := r.json(t)
	conf, _ := p["confirmation"].(map[string]any)
	if r.status != http.StatusPreconditionRequired || conf == nil || conf["token"] == "" {
		t.Fatalf("confirm-required action: %d %s", r.status, r.body)
	}
	token := conf["token"].(string)
	if r = ts.do(t, "GET", "/v1/confirmations", bob, nil); !strings.Contains(string(r.body), `"module":"hello-confirm"`) {
		t.Errorf("pending confirmations of bob: %s", r.body)
	}
	if r = ts.do(t, "POST", "/v1/confirmations/"+token, ann, nil); r.status != http.StatusForbidden {
		t.Errorf("ann confirming bob's token: %d %s, want 403", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/confirmations/"+token, eve, nil); r.status != http.StatusNotFound {
		t.Errorf("another org confirming: %d, want 404", r.status)
	}
	if r = ts.do(t, "POST", "/v1/confirmations/"+token, bob, nil); r.status != http.StatusOK || string(r.body) != "Hello, Later! (call #1)" {
		t.Errorf("confirm: %d %q", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/confirmations/"+token, bob, nil); r.status != http.StatusNotFound {
		t.Errorf("replayed confirmation: %d, want 404", r.status)
	}

	// 413: an input over limits.max_request_bytes (1 MiB by default).
	r = ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", bob, bytes.NewReader(make([]byte, 1<<20+1)))
	if r.status != http.StatusRequestEntityTooLarge || !strings.Contains(string(r.body), "limits.max_request_bytes") {
		t.Errorf("oversized input: %d %s", r.status, r.body)
	}
	// ... and one over the action's own max_input (1KiB in moat.yaml).
	r = ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", bob, bytes.NewReader(make([]byte, 2048)))
	if r.status != http.StatusRequestEntityTooLarge || r.json(t)["code"] != "input_too_large" {
		t.Errorf("input over max_input: %d %s", r.status, r.body)
	}

	// List, get, versions.
	r = ts.do(t, "GET", "/v1/modules", bob, nil)
	if mods, _ := r.json(t)["modules"].([]any); len(mods) != 3 {
		t.Errorf("acme lists %d modules, want 3: %s", len(mods), r.body)
	}
	if r = ts.do(t, "GET", "/v1/modules", eve, nil); strings.Contains(string(r.body), "hello") {
		t.Errorf("globex lists acme's modules: %s", r.body)
	}
	r = ts.do(t, "GET", "/v1/modules/hello-admin", bob, nil)
	if acts, _ := r.json(t)["actions"].([]any); len(acts) != 1 || !strings.Contains(string(r.body), `"roles":["admin"]`) {
		t.Errorf("get hello-admin: %s", r.body)
	}

	// Bad uploads change nothing.
	bad := []struct {
		name   string
		wasm   []byte
		mf     []byte
		status int
		detail string
	}{
		{"not wasm", []byte("hello"), nil, http.StatusBadRequest, "has no name"},
		{"not wasm, named", []byte("hello"), []byte("name: junk\nversion: 1.0.0\n"), http.StatusUnprocessableEntity, "not a WebAssembly binary"},
		{"bad manifest", wasm, []byte("name: x\nversion: 1.0.0\nactions:\n  - name: greet\n    timeout: soon\n"), http.StatusBadRequest, "moat.yaml:5: actions[0].timeout"},
		{"ungranted capability", wasm, []byte("name: x\nversion: 1.0.0\nactions: [{name: greet}]\ncapabilities: {http: [https://example.com:443]}\n"), http.StatusForbidden, "not granted by profile minimal"},
	}
	for _, b := range bad {
		r := ts.upload(t, ann, b.wasm, b.mf)
		if r.status != b.status || !strings.Contains(string(r.body), b.detail) {
			t.Errorf("%s: %d %s; want %d with %q", b.name, r.status, r.body, b.status, b.detail)
		}
	}

	// Uploads, refused or not, are in the organization's audit trail.
	r = ts.do(t, "GET", "/v1/audit?kind=load", ann, nil)
	loads := map[string]int{}
	for _, e := range r.json(t)["events"].([]any) {
		loads[e.(map[string]any)["decision"].(string)]++
	}
	if loads["allow"] != 3 || loads["deny"] != 2 {
		t.Errorf("load events of acme: %v, want 3 uploads allowed and 2 refused by the loader (the other two failed as bad requests before it)", loads)
	}

	// Delete, then the module is gone.
	if r = ts.do(t, "DELETE", "/v1/modules/hello-admin", ann, nil); r.status != http.StatusNoContent {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/modules/hello-admin/actions/greet", ann, nil); r.status != http.StatusNotFound {
		t.Errorf("invoke after delete: %d", r.status)
	}
}

// TestUploadArchiveAndVersions uploads hello-go as a tar.gz of its plugin
// directory, then a second version, and checks that a restarted server
// serves the current version with its data.
func TestUploadArchiveAndVersions(t *testing.T) {
	dir := t.TempDir()
	ts := start(t, dir, nil)
	key := ts.key(t, "acme", "ann", "admin")
	wasm := helloWasm(t)

	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, b := range map[string][]byte{"hello-go/moat.yaml": helloManifest(t), "hello-go/hello-go.wasm": wasm, "hello-go/main.go": []byte("package main")} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
	}
	tw.Close()
	zw.Close()
	r := ts.do(t, "POST", "/v1/modules", key, &buf, "Content-Type", "application/gzip")
	if r.status != http.StatusCreated {
		t.Fatalf("archive upload: %d %s", r.status, r.body)
	}
	first := r.json(t)["digest"].(string)
	ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", key, strings.NewReader("A"))

	// A second version: the same code with another greeting.
	v2 := bytes.Replace(helloManifest(t), []byte("version: 0.1.0"), []byte("version: 0.2.0"), 1)
	v2 = bytes.Replace(v2, []byte("greeting: Hello"), []byte("greeting: Howdy"), 1)
	if r = ts.upload(t, key, wasm, v2); r.status != http.StatusCreated {
		t.Fatalf("second version: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", key, strings.NewReader("B")); string(r.body) != "Howdy, B! (call #2)" {
		t.Errorf("after the second upload: %q", r.body)
	}
	r = ts.do(t, "GET", "/v1/modules/hello-go/versions", key, nil)
	vs, _ := r.json(t)["versions"].([]any)
	// Same bytes, so the same digest: one version, now with 0.2.0's manifest.
	if len(vs) != 1 || vs[0].(map[string]any)["digest"] != first || vs[0].(map[string]any)["version"] != "0.2.0" {
		t.Errorf("versions = %s", r.body)
	}

	// A bare module: another digest is another version.
	other := testwasm.BuildGo(t, "./testdata/goguest", true)
	r = ts.do(t, "POST", "/v1/modules?name=goguest", key, bytes.NewReader(other), "Content-Type", "application/wasm")
	if r.status != http.StatusCreated {
		t.Fatalf("application/wasm upload: %d %s", r.status, r.body)
	}

	ts.stop(t)
	ts2 := start(t, dir, nil)
	if r = ts2.do(t, "POST", "/v1/modules/hello-go/actions/greet", key, strings.NewReader("C")); string(r.body) != "Howdy, C! (call #3)" {
		t.Errorf("after restart: %d %q", r.status, r.body)
	}
	if r = ts2.do(t, "POST", "/v1/modules/goguest/actions/upper", key, strings.NewReader("abc")); string(r.body) != "ABC" {
		t.Errorf("goguest after restart: %d %q", r.status, r.body)
	}
}

// TestRateLimits: a key's bucket, then the organization's, answer 429 with
// Retry-After once used up.
func TestRateLimits(t *testing.T) {
	ts := start(t, "", func(c *server.Config) {
		c.Limits.KeyRate, c.Limits.KeyBurst = 0.5, 3
		c.Limits.OrgRate, c.Limits.OrgBurst = 0.5, 5
	})
	a := ts.key(t, "acme", "ann", "admin")
	b := ts.key(t, "acme", "bob")
	for i := range 3 {
		if r := ts.do(t, "GET", "/v1/whoami", a, nil); r.status != http.StatusOK {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	r := ts.do(t, "GET", "/v1/whoami", a, nil)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "2" || !strings.Contains(string(r.body), "API key") {
		t.Errorf("4th request of one key: %d Retry-After=%q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	// Bob has his own key bucket but shares acme's, which has 2 left.
	for i := range 2 {
		if r := ts.do(t, "GET", "/v1/whoami", b, nil); r.status != http.StatusOK {
			t.Fatalf("bob's request %d: %d %s", i, r.status, r.body)
		}
	}
	r = ts.do(t, "GET", "/v1/whoami", b, nil)
	if r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "organization") {
		t.Errorf("org bucket used up: %d %s", r.status, r.body)
	}
	// Another organization is not affected.
	if r = ts.do(t, "GET", "/v1/whoami", ts.key(t, "globex", "eve"), nil); r.status != http.StatusOK {
		t.Errorf("globex: %d", r.status)
	}
}

// TestGracefulShutdown: an invocation in flight when Shutdown starts runs
// to its end and its client gets the whole response; new connections are
// refused.
func TestGracefulShutdown(t *testing.T) {
	testenv.Timing(t)
	ts := start(t, "", nil)
	key := ts.key(t, "acme", "ann", "admin")
	mf := []byte("name: spin\nversion: 1.0.0\nactions: [{name: loop, timeout: 1500ms}, {name: echo}]\n")
	if r := ts.upload(t, key, testwasm.BuildGo(t, "./testdata/goguest", true), mf); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	got := make(chan response, 1)
	go func() { got <- ts.do(t, "POST", "/v1/modules/spin/actions/loop", key, nil) }()
	time.Sleep(300 * time.Millisecond) // the request is in the guest's loop
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	waited := time.Since(start)
	r := <-got
	if r.status != http.StatusGatewayTimeout || r.json(t)["code"] != "timeout" {
		t.Errorf("in-flight invocation: %d %s; want its own 504 timeout", r.status, r.body)
	}
	if waited < 800*time.Millisecond {
		t.Errorf("Shutdown returned after %v, before the in-flight invocation's 1.5 s deadline", waited)
	}
	if _, err := client.Get(ts.URL + "/healthz"); err == nil {
		t.Error("the server still accepts connections after Shutdown")
	}
	if err := <-ts.done; err != nil {
		t.Errorf("Serve returned %v after Shutdown, want nil", err)
	}
}

// TestOpsEndpoints: health, readiness, metrics, console.
func TestOpsEndpoints(t *testing.T) {
	ts := start(t, "", withMetricsToken)
	key := ts.key(t, "acme", "ann", "admin")
	if r := ts.upload(t, key, helloWasm(t), helloManifest(t)); r.status != http.StatusCreated {
		t.Fatal(r.status)
	}
	ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", key, nil)
	ts.do(t, "POST", "/v1/modules/hello-go/actions/greet", "moat_sk_bad", nil)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/": 200, "/console/app.js": 200, "/console/nope.js": 404, "/nowhere": 404} {
		if r := ts.do(t, "GET", path, "", nil); r.status != want {
			t.Errorf("GET %s: %d, want %d", path, r.status, want)
		}
	}
	r := ts.do(t, "GET", "/metrics", "", nil, "Authorization", "Bearer "+metricsToken)
	for _, want := range []string{
		`moat_invocations_total{action="greet",module="hello-go",org="acme",outcome="ok"} 1`,
		`moat_invocation_duration_seconds_count{action="greet",module="hello-go",org="acme"} 1`,
		// greet reads its config and logs: one op each, counted by family.
		`moat_ops_total{family="log",op="log.write",outcome="ok"} 1`,
		`moat_op_duration_seconds_count{family="config"} 1`,
		`moat_op_bytes_total{direction="request",family="log"} `,
		`moat_denials_total{code="unauthenticated"} 1`,
		`moat_pool_idle_instances{module="hello-go",org="acme"} 1`,
		`moat_modules_loaded 1`,
		`moat_tasks{state="queued"} 0`,
		`moat_task_queue_oldest_wait_seconds 0`,
		`moat_cache_bytes{cache="compile"} `,
		`moat_http_requests_total{method="POST",route="/v1/modules/:name/actions/:action",status="2xx"} 1`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The pooled hello-go instance holds its linear memory (a Go guest's
	// is megabytes), so the gauge is not zero.
	if m := regexp.MustCompile(`moat_pool_idle_memory_bytes\{module="hello-go",org="acme"\} ([0-9.e+]+)`).FindSubmatch(r.body); m == nil {
		t.Error("metrics lack moat_pool_idle_memory_bytes for hello-go")
	} else if v, _ := strconv.ParseFloat(string(m[1]), 64); v < 1<<20 {
		t.Errorf("moat_pool_idle_memory_bytes for hello-go is %s, want the instance's memory (over 1 MiB)", m[1])
	}
	if r := ts.do(t, "GET", "/", "", nil); !strings.Contains(r.header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("console CSP = %q", r.header.Get("Content-Security-Policy"))
	}
}
