package server_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// routeGuest is testdata/routeguest: its wasm and its manifest.
func routeGuest(t testing.TB) (wasm, manifest []byte) {
	t.Helper()
	m, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "testdata/routeguest/moat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return testwasm.BuildGo(t, "./testdata/routeguest", true), m
}

// routeServer starts a server with a secrets key and the route guest
// uploaded as acme's module routes, and sets the webhooks' secrets.
func routeServer(t *testing.T, key *secrets.Key, edit func(*server.Config)) (*testServer, string) {
	t.Helper()
	ts := start(t, "", func(c *server.Config) {
		c.SecretsKey = key
		if edit != nil {
			edit(c)
		}
	})
	admin := ts.key(t, "acme", "ann", "admin")
	wasm, manifest := routeGuest(t)
	if r := ts.upload(t, admin, wasm, manifest); r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	for name, v := range map[string]string{"gh-hook": "gh-secret", "stripe-hook": "whsec_stripe", "std-hook": "whsec_" + base64.StdEncoding.EncodeToString([]byte("standard-secret-bytes"))} {
		b, _ := json.Marshal(map[string]string{"value": v})
		if r := ts.do(t, "PUT", "/v1/admin/secrets/acme/"+name, admin, strings.NewReader(string(b))); r.status/100 != 2 {
			t.Fatalf("secret %s: %d %s", name, r.status, r.body)
		}
	}
	return ts, admin
}

func hmacHex(key string, parts ...string) string {
	m := hmac.New(sha256.New, []byte(key))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// TestRoutes: a module's routes under /m/{org}/{module}/: a GET with a
// JSON response as the key's principal, a POST answering 201 with a
// Location, a public route as the service user, another organization's
// key and an unknown route 404, a wrong method 405, oversized bodies
// refused before the action runs, the header rules (no Authorization or
// Cookie in, no Set-Cookie out, CSP on HTML), plain output as text, and
// each call audited with its route and principal.
func TestRoutes(t *testing.T) {
	ts, ann := routeServer(t, secretsKey(t), nil)
	eve := ts.key(t, "globex", "eve", "admin")

	r := ts.do(t, "GET", "/m/acme/routes/items/42?q=hi", ann, nil, "Accept", "application/json")
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET item: %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	if j := r.json(t); j["id"] != "42" || j["q"] != "hi" || j["accept"] != "application/json" || j["user"] != "ann" || j["auth"] != "key" || j["remote"] != "" {
		t.Errorf("GET item = %v", j)
	}

	r = ts.do(t, "POST", "/m/acme/routes/items", ann, strings.NewReader(`{"id": "7"}`), "Content-Type", "application/json")
	if r.status != 201 || r.header.Get("Location") != "items/7" || r.json(t)["id"] != "7" {
		t.Errorf("POST item: %d Location %q %s", r.status, r.header.Get("Location"), r.body)
	}

	r = ts.do(t, "GET", "/m/acme/routes/public/9", "", nil)
	if j := r.json(t); r.status != 200 || j["user"] != "moat.service" || fmt.Sprint(j["roles"]) != "[public]" || j["auth"] != "public" || j["remote"] != "127.0.0.1" {
		t.Errorf("public GET: %d %s", r.status, r.body)
	}

	for _, tt := range []struct {
		name, method, path, key string
		status                  int
		code                    string
	}{
		{"no key", "GET", "/m/acme/routes/items/1", "", 401, "unauthenticated"},
		{"another organization's key", "GET", "/m/acme/routes/items/1", eve, 404, "not_found"},
		{"another organization's module", "GET", "/m/globex/routes/public/1", "", 404, "not_found"},
		{"no such route", "GET", "/m/acme/routes/nothing", "", 404, "not_found"},
		{"wrong method", "DELETE", "/m/acme/routes/items/1", ann, 405, "method_not_allowed"},
		{"dot dot", "GET", "/m/acme/routes/public/%2e%2e", "", 404, "not_found"},
		{"bad org", "GET", "/m/ac%20me/routes/public/1", "", 404, "not_found"},
	} {
		r := ts.do(t, tt.method, tt.path, tt.key, nil)
		if r.status != tt.status || r.json(t)["code"] != tt.code || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: %d %q %s; want %d %s", tt.name, r.status, r.header.Get("Content-Type"), r.body, tt.status, tt.code)
		}
	}
	if r := ts.do(t, "DELETE", "/m/acme/routes/items/1", ann, nil); r.header.Get("Allow") != "GET" {
		t.Errorf("405 Allow = %q", r.header.Get("Allow"))
	}

	// Oversized bodies: a declared length over max_body is refused
	// unread, a chunked body growing past it as it does; the action
	// never runs (the audit has no invocation of create_item for them).
	big := strings.Repeat("x", 2<<10)
	r = ts.do(t, "POST", "/m/acme/routes/items", ann, strings.NewReader(big))
	if r.status != 413 || r.json(t)["code"] != "too_large" || !strings.Contains(string(r.body), "max_body") {
		t.Errorf("oversized POST: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/m/acme/routes/items", ann, io.MultiReader(strings.NewReader(big))) // no length: chunked
	if r.status != 413 {
		t.Errorf("oversized chunked POST: %d %s", r.status, r.body)
	}

	// Headers in: never Authorization or Cookie.
	r = ts.do(t, "POST", "/m/acme/routes/echo", "", strings.NewReader("\xff\xfe"), "Cookie", "c=1", "X-Hub-Signature-256", "sha256=00", "User-Agent", "ua/1", "Authorization", "")
	var echo map[string]any
	if err := json.Unmarshal(r.body, &echo); err != nil || r.status != 200 {
		t.Fatalf("echo: %d %s", r.status, r.body)
	}
	hdrs := echo["headers"].(map[string]any)
	if hdrs["user-agent"] != "ua/1" || hdrs["cookie"] != nil || hdrs["x-hub-signature-256"] != nil || echo["body_base64"] != "//4=" || echo["moat"] != "http.request" {
		t.Errorf("echo = %s", r.body)
	}
	req, _ := http.NewRequest("POST", ts.URL+"/m/acme/routes/echo", strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer "+ann) // a key on a public route: the route's auth decides, the key is not passed on
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.Contains(string(b), ann) || strings.Contains(strings.ToLower(string(b)), "authorization") {
		t.Errorf("the action saw the key: %s", b)
	}

	// Headers out: Set-Cookie refused (502, the module's fault); HTML
	// sandboxed; plain output as text.
	r = ts.do(t, "GET", "/m/acme/routes/cookie", "", nil)
	if r.status != 502 || r.header.Get("Set-Cookie") != "" || !strings.Contains(string(r.body), "Set-Cookie never is") {
		t.Errorf("Set-Cookie: %d %v %s", r.status, r.header, r.body)
	}
	r = ts.do(t, "GET", "/m/acme/routes/page", "", nil)
	csp := r.header.Get("Content-Security-Policy")
	if r.status != 200 || r.header.Get("Content-Type") != "text/html; charset=utf-8" || !strings.HasPrefix(csp, "sandbox allow-scripts allow-forms;") ||
		strings.Contains(csp, "allow-same-origin") || r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("HTML: %d %v", r.status, r.header)
	}
	r = ts.do(t, "GET", "/m/acme/routes/plain", "", nil)
	if r.status != 200 || string(r.body) != "plain output" || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("plain: %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
	}

	// The module's description lists its routes.
	r = ts.do(t, "GET", "/v1/modules/routes", ann, nil)
	if !strings.Contains(string(r.body), `{"route":"POST /hooks/github","action":"hook","auth":"webhook","scheme":"github"}`) {
		t.Errorf("GET /v1/modules/routes: %s", r.body)
	}

	// The action ran for the one POST that fit.
	r = ts.do(t, "GET", "/v1/audit?kind=invocation&module=routes&limit=100", ann, nil)
	if n := strings.Count(string(r.body), `"action":"create_item"`); n != 1 {
		t.Errorf("create_item ran %d times; want 1 (oversized bodies never reach it):\n%s", n, r.body)
	}
	// Its invocation event names the route it came through.
	if !strings.Contains(string(r.body), `"route":"POST /items"`) {
		t.Errorf("the invocation event of a route call does not name the route:\n%s", r.body)
	}

	// The audit trail: each call with its route and principal.
	r = ts.do(t, "GET", "/v1/audit?kind=route&limit=100", ann, nil)
	var trail struct {
		Events []server.AuditEventJSON `json:"events"`
	}
	if err := json.Unmarshal(r.body, &trail); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range trail.Events {
		seen[e.Decision+" "+e.User+" "+e.Attrs["route"]+" "+e.Attrs["status"]+" "+e.Attrs["remote"]] = true
	}
	for _, want := range []string{
		"allow ann GET /items/{id} 200 127.0.0.1",
		"allow ann POST /items 201 127.0.0.1",
		"allow moat.service GET /public/{id} 200 127.0.0.1",
		"deny  GET /items/{id} 401 127.0.0.1",
		"deny ann POST /items 413 127.0.0.1",
		"deny moat.service GET /cookie 502 127.0.0.1",
	} {
		if !seen[want] {
			t.Errorf("no audit event %q in %v", want, seen)
		}
	}
}

// TestRoutePublicFlood: a public route under a flood from one address is
// refused there (429) while another address is served; a made-up
// Authorization header does not lift the address's bound.
func TestRoutePublicFlood(t *testing.T) {
	ts, _ := routeServer(t, secretsKey(t), func(c *server.Config) { c.Routes.AddressRate, c.Routes.AddressBurst = 0.01, 3 })
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	}
	get := func(c *http.Client) int {
		req, _ := http.NewRequest("GET", ts.URL+"/m/acme/routes/public/1", nil)
		req.Header.Set("Authorization", "Bearer made-up") // buys nothing
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	flood := from("127.0.0.1")
	codes := map[int]int{}
	for range 10 {
		codes[get(flood)]++
	}
	if codes[200] != 3 || codes[429] != 7 {
		t.Errorf("the flood got %v; want 3 served and 7 refused", codes)
	}
	if c := get(from("127.0.0.2")); c != 200 {
		t.Errorf("another address during the flood: %d; want 200", c)
	}
}

// TestRoutePublicFloodBehindProxy: with the proxy's network in
// http.trusted_proxies, the per-address bucket counts the client the
// proxy names in X-Forwarded-For, so one flooding client behind the
// ingress does not take every other client's turn; a peer outside the
// list cannot choose its address by sending the header.
func TestRoutePublicFloodBehindProxy(t *testing.T) {
	ts, _ := routeServer(t, secretsKey(t), func(c *server.Config) {
		c.Routes.AddressRate, c.Routes.AddressBurst = 0.01, 3
		c.HTTP.TrustedProxies = []string{"127.0.0.1"}
	})
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	}
	get := func(c *http.Client, xff ...string) int {
		req, _ := http.NewRequest("GET", ts.URL+"/m/acme/routes/public/1", nil)
		for _, v := range xff {
			req.Header.Add("X-Forwarded-For", v)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	proxy, other := from("127.0.0.1"), from("127.0.0.2")
	codes := map[int]int{}
	for i := range 10 {
		// What the client wrote left of the proxy's entry changes nothing.
		codes[get(proxy, fmt.Sprintf("10.9.9.%d, 198.51.100.1", i))]++
	}
	if codes[200] != 3 || codes[429] != 7 {
		t.Errorf("one client behind the proxy got %v; want 3 served and 7 refused", codes)
	}
	for _, tt := range []struct {
		name   string
		client *http.Client
		xff    []string
		want   int
	}{
		{"another client behind the proxy", proxy, []string{"198.51.100.2"}, 200},
		{"the flooding client in a second header", proxy, []string{"203.0.113.9", "198.51.100.1"}, 429},
		{"the flooding client with a port", proxy, []string{"198.51.100.1:4711"}, 429},
		{"a trusted hop right of the client", proxy, []string{"198.51.100.1, 127.0.0.1"}, 429},
		{"garbage ends the walk at the proxy", proxy, []string{"198.51.100.1, not-an-address"}, 200},
	} {
		if got := get(tt.client, tt.xff...); got != tt.want {
			t.Errorf("%s: %d; want %d", tt.name, got, tt.want)
		}
	}
	// An untrusted peer naming the flooding client is counted as itself:
	// its own bucket, three turns, then refused.
	codes = map[int]int{}
	for range 4 {
		codes[get(other, "198.51.100.2")]++
	}
	if codes[200] != 3 || codes[429] != 1 {
		t.Errorf("an untrusted peer sending X-Forwarded-For got %v; want its own bucket (3 served, 1 refused)", codes)
	}
}

// TestRouteWebhooks: each scheme's good signature runs the action as the
// service user with the role webhook; a bad one is 401, a stale
// timestamp too, a replay 409, and the action never runs for them.
func TestRouteWebhooks(t *testing.T) {
	ts, ann := routeServer(t, secretsKey(t), nil)
	body := `{"action":"opened"}`
	now := strconv.FormatInt(time.Now().Unix(), 10)
	stale := strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10)
	stdKey := "standard-secret-bytes"
	stdSig := func(id, ts string) string {
		m := hmac.New(sha256.New, []byte(stdKey))
		m.Write([]byte(id + "." + ts + "." + body))
		return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	post := func(path string, headers ...string) response {
		return ts.do(t, "POST", path, "", strings.NewReader(body), append(headers, "X-GitHub-Event", "push")...)
	}
	for _, tt := range []struct {
		name    string
		path    string
		headers []string
		status  int
	}{
		{"github good", "/m/acme/routes/hooks/github", []string{"X-Hub-Signature-256", "sha256=" + hmacHex("gh-secret", body)}, 200},
		{"github replayed", "/m/acme/routes/hooks/github", []string{"X-Hub-Signature-256", "sha256=" + hmacHex("gh-secret", body)}, 409},
		{"github bad", "/m/acme/routes/hooks/github", []string{"X-Hub-Signature-256", "sha256=" + hmacHex("wrong", body)}, 401},
		{"github none", "/m/acme/routes/hooks/github", nil, 401},
		{"github not hex", "/m/acme/routes/hooks/github", []string{"X-Hub-Signature-256", "sha256=zz"}, 401},
		{"stripe good", "/m/acme/routes/hooks/stripe", []string{"Stripe-Signature", "t=" + now + ",v1=" + hmacHex("whsec_stripe", now+"."+body)}, 200},
		{"stripe replayed", "/m/acme/routes/hooks/stripe", []string{"Stripe-Signature", "t=" + now + ",v1=" + hmacHex("whsec_stripe", now+"."+body)}, 409},
		{"stripe stale", "/m/acme/routes/hooks/stripe", []string{"Stripe-Signature", "t=" + stale + ",v1=" + hmacHex("whsec_stripe", stale+"."+body)}, 401},
		{"stripe other body", "/m/acme/routes/hooks/stripe", []string{"Stripe-Signature", "t=" + now + ",v1=" + hmacHex("whsec_stripe", now+".{}")}, 401},
		{"standard good", "/m/acme/routes/hooks/standard", []string{"Webhook-Id", "msg_1", "Webhook-Timestamp", now, "Webhook-Signature", "v1,bm90IGl0 " + stdSig("msg_1", now)}, 200},
		{"standard replayed", "/m/acme/routes/hooks/standard", []string{"Webhook-Id", "msg_1", "Webhook-Timestamp", now, "Webhook-Signature", stdSig("msg_1", now)}, 409},
		{"standard other id", "/m/acme/routes/hooks/standard", []string{"Webhook-Id", "msg_2", "Webhook-Timestamp", now, "Webhook-Signature", stdSig("msg_1", now)}, 401},
		{"standard huge header", "/m/acme/routes/hooks/standard", []string{"Webhook-Id", strings.Repeat("a", 2000), "Webhook-Timestamp", now, "Webhook-Signature", stdSig("msg_1", now)}, 401},
	} {
		r := post(tt.path, tt.headers...)
		if r.status != tt.status {
			t.Errorf("%s: %d %s; want %d", tt.name, r.status, r.body, tt.status)
			continue
		}
		if tt.status == 200 {
			if j := r.json(t); j["event"] != "push" || j["user"] != "moat.service" || fmt.Sprint(j["roles"]) != "[webhook]" {
				t.Errorf("%s: %s", tt.name, r.body)
			}
		}
	}
	// An oversized delivery is refused before it is hashed or run.
	big := strings.Repeat("x", 5<<10)
	r := ts.do(t, "POST", "/m/acme/routes/hooks/github", "", strings.NewReader(big), "X-Hub-Signature-256", "sha256="+hmacHex("gh-secret", big))
	if r.status != 413 {
		t.Errorf("oversized delivery: %d %s", r.status, r.body)
	}
	// A webhook whose secret is not set: 503 without naming it; the
	// trail names it and the fix.
	if r := ts.do(t, "DELETE", "/v1/admin/secrets/acme/gh-hook", ann, nil); r.status/100 != 2 {
		t.Fatalf("DELETE secret: %d %s", r.status, r.body)
	}
	r = post("/m/acme/routes/hooks/github", "X-Hub-Signature-256", "sha256="+hmacHex("gh-secret", body))
	if r.status != 503 || strings.Contains(string(r.body), "gh-hook") {
		t.Errorf("no secret: %d %s", r.status, r.body)
	}
	// The trail says why each refusal was refused; the caller was told less.
	r = ts.do(t, "GET", "/v1/audit?kind=route&decision=deny&limit=100", ann, nil)
	for _, want := range []string{"does not match the body", "a replay", "from the server's clock", "moat secrets set --org acme gh-hook"} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("the trail lacks %q:\n%s", want, r.body)
		}
	}
}

// TestRouteWebhookReplicas: a delivery replayed to a second replica on
// the same PostgreSQL database is refused there too.
func TestRouteWebhookReplicas(t *testing.T) {
	testenv.Slow(t, "two servers on a PostgreSQL database: about 6 s")
	db := pgtest.Database(t)
	key := secretsKey(t)
	a, _ := routeServer(t, key, func(c *server.Config) { c.DatabaseURL = db })
	b := start(t, "", func(c *server.Config) { c.DatabaseURL = db; c.SecretsKey = key })
	body := `{"n":1}`
	sig := "sha256=" + hmacHex("gh-secret", body)
	if r := a.do(t, "POST", "/m/acme/routes/hooks/github", "", strings.NewReader(body), "X-Hub-Signature-256", sig); r.status != 200 {
		t.Fatalf("first delivery: %d %s", r.status, r.body)
	}
	var r response
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if r = b.do(t, "POST", "/m/acme/routes/hooks/github", "", strings.NewReader(body), "X-Hub-Signature-256", sig); r.status != 503 {
			break // not still loading on b
		}
	}
	if r.status != 409 || r.json(t)["code"] != "replayed" {
		t.Errorf("the replay on the second replica: %d %s; want 409 replayed", r.status, r.body)
	}
}

// TestRouteModuleHost: a host name routes.hosts gives a module serves its
// routes at the root, passes the front door's Host check, and serves
// nothing else of the server (no API, no other module).
func TestRouteModuleHost(t *testing.T) {
	ts, ann := routeServer(t, secretsKey(t), func(c *server.Config) {
		c.Routes.Hosts = map[string]string{"hooks.example.com": "acme/routes"}
	})
	get := func(host, path, key string) (int, string) {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Host = host
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, tt := range []struct {
		host, path, key string
		status          int
		want            string
	}{
		{"hooks.example.com", "/public/5", "", 200, `"id":"5"`},
		{"HOOKS.example.com:443", "/items/6", ann, 200, `"user":"ann"`},
		{"hooks.example.com", "/v1/whoami", ann, 404, "no route"},
		{"hooks.example.com", "/m/acme/routes/public/5", "", 404, "no route"},
		{"other.example.com", "/m/acme/routes/public/5", "", 403, "forbidden_host"},
	} {
		if status, body := get(tt.host, tt.path, tt.key); status != tt.status || !strings.Contains(body, tt.want) {
			t.Errorf("Host %s GET %s: %d %s; want %d with %s", tt.host, tt.path, status, body, tt.status, tt.want)
		}
	}
	if _, err := server.ParseConfig("c.yaml", []byte("routes:\n  hosts:\n    \"*.example.com\": acme/routes\n")); err == nil || !strings.Contains(err.Error(), "routes.hosts.*.example.com") {
		t.Errorf("a wildcard module host: %v", err)
	}
	if _, err := server.ParseConfig("c.yaml", []byte("routes:\n  hosts:\n    a.example.com: routes\n")); err == nil || !strings.Contains(err.Error(), "like acme/hooks") {
		t.Errorf("a module host without its organization: %v", err)
	}
}
