package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// metricsToken is the operator's /metrics token of the servers that
// metricsServer starts.
const metricsToken = "test-metrics-token-0123456789"

// withMetricsToken configures the operator's metrics token.
func withMetricsToken(c *server.Config) { c.Metrics.Token = metricsToken }

// scrape reads /metrics with the operator's token.
func (ts *testServer) scrape(t testing.TB) string {
	t.Helper()
	r := ts.do(t, "GET", "/metrics", "", nil, "Authorization", "Bearer "+metricsToken)
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics with the operator's token: %d %s", r.status, r.body)
	}
	return string(r.body)
}

// send is do with a Host header of its own choosing (host "" keeps the
// URL's).
func (ts *testServer) send(t testing.TB, method, path, host, key string, body io.Reader, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// spinModule uploads testdata/goguest as module name for key: loop spins
// until its timeout, echo answers at once.
func spinModule(t testing.TB, ts *testServer, key, name string, wasm []byte) {
	t.Helper()
	mf := fmt.Sprintf("name: %s\nversion: 1.0.0\nactions: [{name: loop, timeout: 1500ms}, {name: echo}, {name: kv}]\n", name)
	if r := ts.upload(t, key, wasm, []byte(mf)); r.status != http.StatusCreated {
		t.Fatalf("upload %s: %d %s", name, r.status, r.body)
	}
}

// TestFrontDoorHostile sends what a hostile web page in a local browser
// (a cross-site "simple" request, a DNS-rebound page) and hostile clients
// send, and checks each exact answer: refused with 403 and the problem
// naming the header and the setting, or served with the browser policies.
func TestFrontDoorHostile(t *testing.T) {
	ts := start(t, "", func(c *server.Config) {
		c.Piston.Enabled = true // no executor: an admitted execute is a 501
		c.HTTP.AllowedHosts = []string{"moat.internal", "*.moat.example"}
		c.HTTP.AllowedOrigins = []string{"http://app.example:3000"}
		withMetricsToken(c)
	})
	key := ts.key(t, "acme", "ann", "admin")
	spinModule(t, ts, key, "spin", testwasm.BuildGo(t, "./testdata/goguest", true))
	self := strings.TrimPrefix(ts.URL, "http://")
	_, port, _ := net.SplitHostPort(self)
	piston := `{"language":"c","version":"*","files":[{"content":"int main(){return 0;}"}]}`
	const (
		origin = "forbidden_origin"
		host   = "forbidden_host"
	)
	tests := []struct {
		name    string
		method  string
		path    string
		host    string // Host header; "" is the listen address
		key     bool
		body    string
		headers []string
		status  int
		code    string // problem code; "" when not a problem
		detail  string // in the problem's detail
	}{
		// Piston needs no key: any page could run code with a text/plain POST.
		{name: "piston execute from another site's page", method: "POST", path: "/api/v2/execute", body: piston,
			headers: []string{"Content-Type", "text/plain;charset=UTF-8", "Origin", "http://evil.example"}, status: 403, code: origin,
			detail: `the Origin header "http://evil.example" is not this server's origin`},
		{name: "piston execute from a DNS-rebound page", method: "POST", path: "/api/v2/execute", host: "rebind.evil.example:" + port, body: piston,
			headers: []string{"Content-Type", "text/plain"}, status: 403, code: host, detail: "http.allowed_hosts"},
		{name: "rebound page sending its own origin", method: "POST", path: "/api/v2/execute", host: "rebind.evil.example:" + port, body: piston,
			headers: []string{"Origin", "http://rebind.evil.example:" + port}, status: 403, code: host, detail: `"rebind.evil.example:` + port + `"`},
		{name: "piston runtimes from another site", method: "GET", path: "/api/v2/runtimes", headers: []string{"Origin", "https://evil.example"}, status: 403, code: origin},
		{name: "Origin null (sandboxed frame, file:)", method: "POST", path: "/api/v2/execute", body: piston, headers: []string{"Origin", "null"}, status: 403, code: origin,
			detail: "http.allowed_origins"},
		{name: "Sec-Fetch-Site cross-site without Origin", method: "POST", path: "/api/v2/execute", body: piston,
			headers: []string{"Sec-Fetch-Site", "cross-site"}, status: 403, code: origin, detail: `Sec-Fetch-Site header is "cross-site"`},
		{name: "Sec-Fetch-Site same-site (a sibling subdomain)", method: "POST", path: "/api/v2/execute", body: piston,
			headers: []string{"Sec-Fetch-Site", "same-site"}, status: 403, code: origin},
		{name: "same host, default port", method: "POST", path: "/api/v2/execute", body: piston,
			headers: []string{"Origin", "http://127.0.0.1"}, status: 403, code: origin},
		{name: "same host and port, other scheme", method: "POST", path: "/api/v2/execute", body: piston,
			headers: []string{"Origin", "https://" + self}, status: 403, code: origin},
		{name: "origin with a path is no origin", method: "POST", path: "/api/v2/execute", body: piston,
			headers: []string{"Origin", "http://" + self + "/x"}, status: 403, code: origin},
		{name: "a name ending in an allowed wildcard's base", method: "GET", path: "/api/v2/runtimes", host: "evilmoat.example", status: 403, code: host},
		{name: "an allowed name as a prefix", method: "GET", path: "/api/v2/runtimes", host: "moat.internal.evil.example", status: 403, code: host},
		{name: "loopback address as a name's prefix", method: "GET", path: "/api/v2/runtimes", host: "127.0.0.1.evil.example:" + port, status: 403, code: host},
		{name: "the console from a rebound name", method: "GET", path: "/", host: "rebind.evil.example", status: 403, code: host},
		{name: "metrics from a rebound name", method: "GET", path: "/metrics", host: "rebind.evil.example", headers: []string{"Authorization", "Bearer " + metricsToken}, status: 403, code: host},
		// Authenticated routes too: the key travels in a header a page
		// could hold (the console keeps it in sessionStorage).
		{name: "invoke with a key from another site's page", method: "POST", path: "/v1/modules/spin/actions/echo", key: true, body: "x",
			headers: []string{"Origin", "http://evil.example"}, status: 403, code: origin},
		{name: "upload list from a rebound page", method: "GET", path: "/v1/modules", key: true, host: "rebind.evil.example", status: 403, code: host},
		{name: "cross-site without a key still 403 before 401", method: "GET", path: "/v1/modules", headers: []string{"Sec-Fetch-Site", "cross-site"}, status: 403, code: origin},
		// What is let through.
		{name: "same origin", method: "POST", path: "/api/v2/execute", body: piston, headers: []string{"Origin", "http://" + self, "Sec-Fetch-Site", "same-origin"},
			status: 501},
		{name: "an allowed origin", method: "POST", path: "/api/v2/execute", body: piston, headers: []string{"Origin", "http://app.example:3000"}, status: 501},
		{name: "typed into the address bar", method: "GET", path: "/api/v2/runtimes", headers: []string{"Sec-Fetch-Site", "none"}, status: 200},
		{name: "localhost", method: "GET", path: "/api/v2/runtimes", host: "localhost:" + port, status: 200},
		{name: "localhost in capitals with a trailing dot", method: "GET", path: "/api/v2/runtimes", host: "LOCALHOST.:" + port, status: 200},
		{name: "IPv6 loopback", method: "GET", path: "/api/v2/runtimes", host: "[::1]:" + port, status: 200},
		{name: "another IP address (cannot be rebound)", method: "GET", path: "/api/v2/runtimes", host: "10.1.2.3:" + port, status: 200},
		{name: "an allowed name", method: "GET", path: "/api/v2/runtimes", host: "moat.internal", status: 200},
		{name: "an allowed wildcard name", method: "GET", path: "/api/v2/runtimes", host: "eu.Moat.Example.", status: 200},
		{name: "health probe under a name of its own", method: "GET", path: "/healthz", host: "moat.default.svc:" + port, status: 200},
		{name: "health probe from another site", method: "GET", path: "/healthz", headers: []string{"Origin", "http://evil.example"}, status: 403, code: origin},
		// /metrics: the operator's only.
		{name: "metrics without a token", method: "GET", path: "/metrics", status: 401, code: "unauthenticated", detail: "metrics.token_file"},
		{name: "metrics with an API key", method: "GET", path: "/metrics", key: true, status: 401, code: "unauthenticated", detail: "API keys do not open it"},
		{name: "metrics with a wrong token", method: "GET", path: "/metrics", headers: []string{"Authorization", "Bearer " + metricsToken + "x"}, status: 401, code: "unauthenticated"},
		{name: "metrics with a token prefix", method: "GET", path: "/metrics", headers: []string{"Authorization", "Bearer " + metricsToken[:8]}, status: 401, code: "unauthenticated"},
		{name: "metrics with the token", method: "GET", path: "/metrics", headers: []string{"Authorization", "Bearer " + metricsToken}, status: 200},
		// Headers past http.max_header_bytes (64 KiB).
		{name: "a 100 KiB header", method: "GET", path: "/healthz", headers: []string{"X-Pad", strings.Repeat("a", 100<<10)}, status: 431},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := ""
			if tt.key {
				k = key
			}
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			r := ts.send(t, tt.method, tt.path, tt.host, k, body, tt.headers...)
			if r.status != tt.status {
				t.Fatalf("%d %s; want %d", r.status, r.body, tt.status)
			}
			if tt.code != "" {
				p := r.json(t)
				if p["code"] != tt.code || p["type"] != "urn:moat:problem:"+tt.code || r.header.Get("Content-Type") != "application/problem+json" ||
					!strings.Contains(fmt.Sprint(p["detail"]), tt.detail) {
					t.Fatalf("problem %s (%s); want code %s, detail containing %q", r.body, r.header.Get("Content-Type"), tt.code, tt.detail)
				}
			}
			if r.status != 431 {
				for _, h := range []string{"X-Content-Type-Options", "X-Frame-Options", "Content-Security-Policy", "Referrer-Policy", "Cross-Origin-Resource-Policy"} {
					if r.header.Get(h) == "" {
						t.Errorf("no %s on a %d", h, r.status)
					}
				}
			}
		})
	}
	// The refused invocation did not run: acme's audit trail holds no
	// invocation at all.
	r := ts.do(t, "GET", "/v1/audit?kind=invocation", key, nil)
	if ev, _ := r.json(t)["events"].([]any); len(ev) != 0 {
		t.Errorf("a cross-origin invocation ran: %s", r.body)
	}
	if m := ts.scrape(t); !strings.Contains(m, `moat_denials_total{code="forbidden_origin"}`) || !strings.Contains(m, `moat_denials_total{code="forbidden_host"}`) {
		t.Errorf("front-door refusals are not counted:\n%s", grepLines(m, "moat_denials_total"))
	}
}

// TestMetricsWithoutToken: with no metrics.token_file, /metrics answers
// nobody, not even a valid API key.
func TestMetricsWithoutToken(t *testing.T) {
	ts := start(t, "", nil)
	key := ts.key(t, "acme", "ann", "admin")
	for _, k := range []string{"", key} {
		r := ts.do(t, "GET", "/metrics", k, nil)
		if p := r.json(t); r.status != 403 || p["code"] != "denied" || !strings.Contains(fmt.Sprint(p["detail"]), "set metrics.token_file") {
			t.Errorf("GET /metrics (key %v) without a configured token: %d %s", k != "", r.status, r.body)
		}
	}
	dir := t.TempDir()
	for _, c := range []struct{ file, content, want string }{
		{"short", "tooshort\n", "metrics.token_file: the token is 8 characters; use at least 16"},
		{"absent", "", "metrics.token_file: open"},
	} {
		path := filepath.Join(dir, c.file)
		if c.content != "" {
			os.WriteFile(path, []byte(c.content), 0o600)
		}
		_, err := server.ParseConfig("moat-server.yaml", []byte("metrics:\n  token_file: "+path+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("token file %s: %v; want %q", c.file, err, c.want)
		}
	}
}

// TestResponseHardening: module output is never served as a page (HTML,
// SVG, XML sniffed or not), every response carries nosniff, a CSP, a
// frame policy, a referrer policy and a resource policy; the console's
// CSP allows only its own files.
func TestResponseHardening(t *testing.T) {
	ts := start(t, "", nil)
	key := ts.key(t, "acme", "ann", "admin")
	spinModule(t, ts, key, "spin", testwasm.BuildGo(t, "./testdata/goguest", true))
	tests := []struct {
		name, input string
		ctype, file string
	}{
		{"HTML with a script", "<!DOCTYPE html><html><script>fetch('/v1/modules')</script></html>", "text/plain; charset=utf-8", "output.txt"},
		{"HTML after whitespace", "  \n<html><body onload=alert(1)>", "text/plain; charset=utf-8", "output.txt"},
		{"SVG", `<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`, "text/plain; charset=utf-8", "output.txt"},
		{"PDF magic", "%PDF-1.4\n", "text/plain; charset=utf-8", "output.txt"},
		{"PNG magic", "\x89PNG\r\n\x1a\n\x00\x00", "application/octet-stream", "output.bin"},
		{"binary", "\x00\x01\x02\xff", "application/octet-stream", "output.bin"},
		{"plain text", "hello", "text/plain; charset=utf-8", "output.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/modules/spin/actions/echo", key, strings.NewReader(tt.input))
			if r.status != 200 || string(r.body) != tt.input {
				t.Fatalf("%d %q", r.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != tt.ctype {
				t.Errorf("Content-Type %q; want %q", ct, tt.ctype)
			}
			if got, want := r.header.Get("Content-Disposition"), `attachment; filename="`+tt.file+`"`; got != want {
				t.Errorf("Content-Disposition %q; want %q", got, want)
			}
			checkPolicies(t, r, "default-src 'none'")
		})
	}
	for path, csp := range map[string]string{"/": "script-src 'self'", "/console/app.js": "script-src 'self'", "/nowhere": "default-src 'none'",
		"/v1/openapi.json": "default-src 'none'", "/healthz": "default-src 'none'"} {
		r := ts.do(t, "GET", path, "", nil)
		checkPolicies(t, r, csp)
		if strings.Contains(r.header.Get("Content-Security-Policy"), "unsafe-inline") {
			t.Errorf("%s: CSP allows inline code: %s", path, r.header.Get("Content-Security-Policy"))
		}
	}
}

func checkPolicies(t *testing.T, r response, csp string) {
	t.Helper()
	want := map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
		"Cross-Origin-Resource-Policy": "same-origin"}
	for h, v := range want {
		if got := r.header.Get(h); got != v {
			t.Errorf("%s = %q; want %q", h, got, v)
		}
	}
	if got := r.header.Get("Content-Security-Policy"); !strings.Contains(got, csp) || !strings.Contains(got, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy = %q; want it with %q and frame-ancestors 'none'", got, csp)
	}
}

// TestSlowClients: a body that stalls is a 408 after http.body_timeout
// (authenticated: the key opens no exemption), headers that stall close
// the connection after http.read_header_timeout, and an invocation that
// outlasts the body timeout once its body is in is not cut short.
func TestSlowClients(t *testing.T) {
	testenv.Timing(t)
	ts := start(t, "", func(c *server.Config) {
		c.HTTP.BodyTimeout = 1_000_000_000     // 1s
		c.HTTP.ReadHeaderTimeout = 500_000_000 // 0.5s
	})
	key := ts.key(t, "acme", "ann", "admin")
	spinModule(t, ts, key, "spin", testwasm.BuildGo(t, "./testdata/goguest", true))
	addr := strings.TrimPrefix(ts.URL, "http://")

	t.Run("a stalled body", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/modules/spin/actions/echo HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n0123456789", addr, key)
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no response to a stalled body: %v", err)
		}
		b, _ := io.ReadAll(res.Body)
		took := time.Since(start)
		if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"code":"request_timeout"`) || !strings.Contains(string(b), "http.body_timeout") {
			t.Errorf("%d %s; want 408 request_timeout naming http.body_timeout", res.StatusCode, b)
		}
		if took < 900*time.Millisecond || took > 3*time.Second {
			t.Errorf("answered after %v; want about the 1 s body timeout", took)
		}
	})
	t.Run("stalled headers", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\nX-Slow: ", addr)
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadAll(c)
		if took := time.Since(start); err != nil || took > 3*time.Second {
			t.Errorf("connection with stalled headers: closed after %v (%v); want within about 0.5 s", took, err)
		}
	})
	t.Run("a long invocation after its body", func(t *testing.T) {
		start := time.Now()
		r := ts.do(t, "POST", "/v1/modules/spin/actions/loop", key, strings.NewReader("spin"))
		if took := time.Since(start); r.status != http.StatusGatewayTimeout || r.json(t)["code"] != "timeout" || took < 1400*time.Millisecond {
			t.Errorf("%d %s after %v; want the action's own 504 timeout after 1.5 s", r.status, r.body, took)
		}
	})
}

// TestIdleConnectionsCapped: clients holding keep-alive connections idle
// cannot use up the server's connections (or its descriptors): at
// http.max_connections the longest idle one is closed for a new client.
func TestIdleConnectionsCapped(t *testing.T) {
	testenv.Timing(t)
	const max = 8
	ts := start(t, "", func(c *server.Config) { c.HTTP.MaxConnections = max; withMetricsToken(c) })
	addr := strings.TrimPrefix(ts.URL, "http://")
	var idle []net.Conn
	for range 3 * max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", len(idle), err)
		}
		res.Body.Close()
		idle = append(idle, c) // kept open, idle
	}
	for i := range 5 {
		start := time.Now()
		r := ts.do(t, "GET", "/healthz", "", nil)
		if took := time.Since(start); r.status != 200 || took > 2*time.Second {
			t.Errorf("new client %d behind %d idle connections: %d after %v", i, len(idle), r.status, took)
		}
	}
	// The server closed the idle connections it made room with: reading
	// one gives EOF at once.
	closed := 0
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed < len(idle)-max {
		t.Errorf("%d of %d idle connections closed by the server; want at least %d", closed, len(idle), len(idle)-max)
	}
	m := ts.scrape(t)
	open := regexp.MustCompile(`(?m)^moat_http_connections_open (\d+)`).FindStringSubmatch(m)
	if open == nil {
		t.Fatalf("no moat_http_connections_open in the metrics")
	}
	if n, _ := strconv.Atoi(open[1]); n < 1 || n > max {
		t.Errorf("%d connections open; want 1 to %d", n, max)
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMetricsCardinality: made-up action names (1 500 once made 27 000
// series) and names with control bytes make no series of their own, the
// method label takes no made-up methods, and the exposition holds no
// control byte.
func TestMetricsCardinality(t *testing.T) {
	ts := start(t, "", func(c *server.Config) { withMetricsToken(c); c.Metrics.MaxSeries = 5; c.Limits.KeyBurst = 1000 })
	key := ts.key(t, "acme", "ann", "admin")
	spinModule(t, ts, key, "spin", testwasm.BuildGo(t, "./testdata/goguest", true))
	for i := range 300 {
		name := fmt.Sprintf("made-up-%d", i)
		if i%3 == 0 {
			name = url.PathEscape(fmt.Sprintf("\x1b[31m%d\n", i))
		}
		if r := ts.do(t, "POST", "/v1/modules/spin/actions/"+name, key, strings.NewReader("x")); r.status != http.StatusNotFound {
			t.Fatalf("made-up action %q: %d %s", name, r.status, r.body)
		}
	}
	for _, a := range []string{"echo", "kv", "loop"} {
		ts.do(t, "POST", "/v1/modules/spin/actions/"+a, key, strings.NewReader("get k"))
	}
	for _, m := range []string{"FOO1", "BAR2", "BAZ3"} {
		ts.do(t, m, "/v1/modules", key, nil)
	}
	m := ts.scrape(t)
	series := grepLines(m, "moat_invocations_total{")
	t.Logf("moat_invocations_total:\n%s", series)
	if n := strings.Count(series, "\n") + 1; n > 6 {
		t.Errorf("%d series of moat_invocations_total after 300 made-up actions and 3 real ones; want at most 6", n)
	}
	if !strings.Contains(series, `action="_unknown",module="spin",org="acme",outcome="no_such_action"} 300`) {
		t.Errorf("the made-up actions are not counted under _unknown")
	}
	if strings.Contains(m, "made-up") || strings.Contains(m, "FOO1") || strings.ContainsAny(m, "\x1b\x00\r") {
		t.Errorf("a made-up name or a control byte reached the metrics")
	}
	if !strings.Contains(m, `method="other"`) {
		t.Errorf("made-up methods are not counted as other:\n%s", grepLines(m, "moat_http_requests_total"))
	}
}

// TestFrontDoorConfig: the front door's, admission's and metrics' settings
// parse with their defaults, and each bad value is refused naming the
// file, the line and the field.
func TestFrontDoorConfig(t *testing.T) {
	c, err := server.ParseConfig("moat-server.yaml", []byte("http:\n  allowed_hosts: [moat.example.com]\n  max_connections: 100\nadmission:\n  org_runs: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.MaxConnections != 100 || time.Duration(c.HTTP.IdleTimeout) != 30*time.Second || time.Duration(c.HTTP.ReadHeaderTimeout) != 5*time.Second ||
		c.HTTP.MaxHeaderBytes != 64<<10 || c.Admission.OrgRuns != 1 || c.Admission.MaxInvocations < 8 || c.Admission.Queue != 64 || c.Metrics.MaxSeries != 200 {
		t.Errorf("parsed: %+v %+v %+v", c.HTTP, c.Admission, c.Metrics)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"http:\n  allowed_hosts: [https://moat.example.com]\n", "moat-server.yaml:2: http.allowed_hosts[0]: \"https://moat.example.com\" is not a host name"},
		{"http:\n  allowed_origins: [app.example.com]\n", "http.allowed_origins[0]: \"app.example.com\" is not a web origin"},
		{"http:\n  allowed_origins: [\"https://app.example.com/path\"]\n", "is not a web origin"},
		{"http:\n  max_connections: -1\n", "http.max_connections: -1 is outside 1 to 1000000"},
		{"http:\n  max_connections: 100\n  max_connections_per_source: 101\n", "http.max_connections_per_source: 101 is outside 1 to 100 (http.max_connections); leave it out for the default 16"},
		{"http:\n  max_connections_per_source: -1\n", "http.max_connections_per_source: -1 is outside 1 to 512"},
		{"http:\n  idle_timeout: 10ms\n", "http.idle_timeout: 10ms is outside 1s to 1h0m0s"},
		{"http:\n  max_header_bytes: 1KiB\n", "http.max_header_bytes"},
		{"http:\n  trusted_proxies: [ingress]\n", "http.trusted_proxies[0]: \"ingress\" is not a network or an address"},
		{"http:\n  trusted_proxies: [10.0.0.0/8, 0.0.0.0/0]\n", "http.trusted_proxies[1]: \"0.0.0.0/0\" trusts every address"},
		{"http:\n  trusted_proxies: [\"::/0\"]\n", "trusts every address"},
		{"http:\n  trusted_proxies: [\"fe80::1%eth0\"]\n", "is not a network or an address"},
		{"admission:\n  max_invocations: 2\n  org_invocations: 3\n", "admission.org_invocations: 3 is more than admission.max_invocations (2)"},
		{"admission:\n  org_runs: -4\n", "admission.org_runs: -4 is outside 1 to 100000"},
		{"admission:\n  wait: 1h\n", "admission.wait"},
		{"metrics:\n  max_series: -1\n", "metrics.max_series"},
		{"metrics:\n  tokn_file: x\n", "unknown field; did you mean token_file?"},
	} {
		_, err := server.ParseConfig("moat-server.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v; want %q", tt.yaml, err, tt.want)
		}
	}
}
