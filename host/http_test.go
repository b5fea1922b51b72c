package host_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/egress/egresstest"
)

// loopback is a test server on a loopback address of our choosing
// ("127.0.0.1:0", "127.0.0.2:0", "[::1]:0"), counting what it gets.
type loopback struct {
	*httptest.Server
	hits atomic.Int32
	port int
	url  string // http://host:port
}

func serveOn(t *testing.T, addr string, h http.HandlerFunc) *loopback {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	s := &loopback{port: l.Addr().(*net.TCPAddr).Port}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	s.Listener = l
	s.Start()
	s.url = "http://" + l.Addr().String()
	t.Cleanup(s.Close)
	return s
}

// httpHost is a host under profileYAML whose secrets are sealed under a
// fresh key in its own store, resolving names with dns (nil: the
// system's), logging to logs.
func httpHost(t *testing.T, profileYAML string, dns *net.Resolver, logs io.Writer) (*host.Host, *secrets.Vault) {
	t.Helper()
	ctx := context.Background()
	p, err := policy.ParseProfile("egress.yaml", []byte(profileYAML))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, secrets.KeySize)
	rand.Read(raw)
	key, _ := secrets.ParseKey(base64.StdEncoding.EncodeToString(raw))
	vault := secrets.NewVault(st, key, nil)
	if logs == nil {
		logs = io.Discard
	}
	h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Store: st, Profile: p,
		Families: map[string]any{"secrets": &ops.SecretsConfig{Source: vault}, "http": &ops.HTTPConfig{Resolver: dns}},
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx); st.Close() })
	return h, vault
}

// fetcher loads the Go SDK fixture, whose action call runs any op, asking
// for the http targets given.
func fetcher(t *testing.T, h *host.Host, targets string) *host.Module {
	t.Helper()
	m, err := loadWithManifest(t, h, "name: fetcher\nversion: 1.0.0\nactions: [{name: call}]\ncapabilities:\n  http: {targets: "+targets+", allow_any: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fetch runs http.fetch through the import transport as who, with a
// correlation id of its own.
func fetch(t *testing.T, m *host.Module, who policy.Principal, corr string, req abi.HTTPFetchRequest) (*abi.HTTPFetchResponse, error) {
	t.Helper()
	b, _ := json.Marshal(req)
	res, err := m.Invoke(context.Background(), host.Request{Action: "call", Input: append([]byte(abi.OpHTTPFetch+" "), b...), Principal: who, CorrelationID: corr,
		Limits: host.Limits{MaxInputBytes: 8 << 20, MaxOutputBytes: 8 << 20}})
	if err != nil {
		return nil, err
	}
	var out abi.HTTPFetchResponse
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("reply %s: %v", res.Output, err)
	}
	return &out, nil
}

func httpEvents(t *testing.T, h *host.Host, corr string) []audit.Event {
	t.Helper()
	return auditEvents(t, h, audit.Filter{CorrelationID: corr, Kind: audit.KindOp, Limit: 100})
}

// TestHTTPFetch: http.fetch for a compiled guest against real loopback
// servers: methods, bodies and headers both ways, statuses as results,
// redirects followed and each hop audited with its method, host, path
// (never the query), status and bytes under the invocation's correlation
// id; the guest's bounds checked; no grant, no request.
func TestHTTPFetch(t *testing.T) {
	t.Parallel()
	srv := serveOn(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Method", r.Method)
			w.Header().Add("X-Twice", "a")
			w.Header().Add("X-Twice", "b")
			fmt.Fprintf(w, "%s %s x-a=%s body=%s", r.Method, r.URL.RequestURI(), r.Header.Get("X-A"), b)
		case "/missing":
			http.NotFound(w, r)
		case "/hop":
			http.Redirect(w, r, "/echo?after=hop", http.StatusSeeOther)
		case "/big":
			w.Write(bytes.Repeat([]byte("b"), 5000))
		default:
			io.WriteString(w, "ok")
		}
	})
	h, _ := httpHost(t, "name: p\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: [\""+srv.url+"\"]\n", nil, nil)
	m := fetcher(t, h, "[\""+srv.url+"\", \"http://127.0.0.1:1\"]")

	res, err := fetch(t, m, ann, "f-post", abi.HTTPFetchRequest{Method: "post", URL: srv.url + "/echo?token=q-secret", Headers: map[string]string{"x-a": "1"}, Body: []byte("payload\x00\xff")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || string(res.Body) != "POST /echo?token=q-secret x-a=1 body=payload\x00\xff" || res.Headers["x-method"] != "POST" || res.Headers["x-twice"] != "a, b" || res.URL != srv.url+"/echo?token=q-secret" {
		t.Fatalf("response %+v (%q)", res, res.Body)
	}
	if res, err := fetch(t, m, ann, "f-404", abi.HTTPFetchRequest{URL: srv.url + "/missing"}); err != nil || res.Status != 404 {
		t.Fatalf("a 404 is a result, not an error: %+v, %v", res, err)
	}
	res, err = fetch(t, m, ann, "f-hop", abi.HTTPFetchRequest{Method: "POST", URL: srv.url + "/hop", Body: []byte("dropped")})
	if err != nil || res.Status != 200 || string(res.Body) != "GET /echo?after=hop x-a= body=" || !strings.HasSuffix(res.URL, "/echo?after=hop") {
		t.Fatalf("a 303 is followed with a GET and no body: %+v %v", res, err)
	}
	evs := httpEvents(t, h, "f-hop")
	if len(evs) != 2 || evs[0].Attrs["status"] != "303" || evs[0].Attrs["path"] != "/hop" || evs[0].Attrs["bytes_out"] != "7" ||
		evs[1].Attrs["hop"] != "1" || evs[1].Attrs["path"] != "/echo" || evs[1].Attrs["method"] != "GET" || evs[1].Attrs["target"] != srv.url {
		t.Errorf("the hops' audit events: %+v", evs)
	}
	for _, e := range append(evs, httpEvents(t, h, "f-post")...) {
		if e.Op != abi.OpHTTPFetch || e.Decision != audit.Allow || e.User != "ann" || e.Org != "acme" || e.MutationID == "" || e.Module != "fetcher" {
			t.Errorf("audit event %+v", e)
		}
		if b, _ := json.Marshal(e); bytes.Contains(b, []byte("q-secret")) || bytes.Contains(b, []byte("after=hop")) {
			t.Errorf("the query reached the audit trail: %s", b)
		}
	}
	if evs := httpEvents(t, h, "f-post"); len(evs) != 1 || evs[0].Attrs["bytes_in"] == "" || evs[0].Attrs["bytes_out"] != "9" || evs[0].DurationNS <= 0 {
		t.Errorf("one event for one request, with its bytes and duration: %+v", evs)
	}

	for _, tt := range []struct {
		name string
		req  abi.HTTPFetchRequest
		code abi.Code
		msg  string
		rule string // the deny event's rule, "" for none
	}{
		{"max_bytes", abi.HTTPFetchRequest{URL: srv.url + "/big", MaxBytes: 4999}, abi.CodeTooLarge, "the response body is 5000 bytes or more; the limit is 4999 (max_bytes)", "max_bytes"},
		{"max_bytes too high", abi.HTTPFetchRequest{URL: srv.url, MaxBytes: abi.MaxHTTPResponseBytes + 1}, abi.CodeInvalidArgument, "max_bytes 2097153 is outside", ""},
		{"timeout too high", abi.HTTPFetchRequest{URL: srv.url, TimeoutMS: abi.MaxHTTPTimeoutMS + 1}, abi.CodeInvalidArgument, "timeout_ms 60001 is outside", ""},
		{"negative timeout", abi.HTTPFetchRequest{URL: srv.url, TimeoutMS: -1}, abi.CodeInvalidArgument, "timeout_ms -1", ""},
		{"body too large", abi.HTTPFetchRequest{Method: "PUT", URL: srv.url, Body: make([]byte, abi.MaxHTTPRequestBody+1)}, abi.CodeTooLarge, "the body is 2097153 bytes", ""},
		{"not granted", abi.HTTPFetchRequest{URL: "http://127.0.0.1:2/"}, abi.CodeDenied, "http http://127.0.0.1:2 is not among the capabilities the module requests", "manifest capabilities"},
		{"asked, not granted", abi.HTTPFetchRequest{URL: "http://127.0.0.1:1/"}, abi.CodeDenied, "was requested but not granted", "profile p: default grant"},
	} {
		corr := "f-" + strings.ReplaceAll(tt.name, " ", "-")
		_, err := fetch(t, m, ann, corr, tt.req)
		if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v; want %s with %q", tt.name, err, tt.code, tt.msg)
		}
		if tt.rule != "" {
			evs := httpEvents(t, h, corr)
			if len(evs) != 1 || evs[0].Decision != audit.Deny || evs[0].Rule != tt.rule || evs[0].Op != abi.OpHTTPFetch {
				t.Errorf("%s: audit %+v; want one http.fetch deny with rule %s", tt.name, evs, tt.rule)
			}
		}
	}
}

// TestHTTPFetchHostile is the hostile corpus of http.fetch for a
// compiled guest: loopback, metadata and private addresses reached
// directly, through names, through DNS answers that change, through
// redirects and through every IPv4 and IPv6 spelling; bodies that lie
// about their length or never end; bodies that drip past timeout_ms;
// header bombs; header injection and method smuggling; paths that try to
// climb out of a granted prefix, directly and through a redirect. Each is
// refused with its code, audited with its rule, and the servers no grant
// names get nothing.
func TestHTTPFetchHostile(t *testing.T) {
	t.Parallel()
	forbidden := serveOn(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "loopback") })
	forbidden6 := serveOn(t, "[::1]:0", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "loopback v6") })
	PF, PF6 := forbidden.port, forbidden6.port
	g := serveOn(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/redirect"):
			w.Header().Set("Location", r.URL.Query().Get("to"))
			w.WriteHeader(http.StatusFound)
		case r.URL.Path == "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case r.URL.Path == "/close": // the next request dials again
			w.Header().Set("Connection", "close")
			io.WriteString(w, "closed")
		case r.URL.Path == "/lies-long": // says 1 GiB, sends 10 bytes and closes
			conn, bw, _ := http.NewResponseController(w).Hijack()
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n0123456789")
			bw.Flush()
			conn.Close()
		case r.URL.Path == "/lies-short": // says 10, sends 1 MiB
			conn, bw, _ := http.NewResponseController(w).Hijack()
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\n")
			bw.Write(bytes.Repeat([]byte("x"), 1<<20))
			bw.Flush()
			conn.Close()
		case r.URL.Path == "/endless":
			buf := make([]byte, 32<<10)
			for {
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		case r.URL.Path == "/drip":
			w.WriteHeader(200)
			for {
				if _, err := w.Write([]byte("x")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		case r.URL.Path == "/many-headers":
			for i := range abi.MaxHTTPHeaders + 1 {
				w.Header().Set("X-H"+strconv.Itoa(i), "v")
			}
		case r.URL.Path == "/huge-header":
			w.Header().Set("X-Huge", strings.Repeat("h", abi.MaxHTTPHeaderBytes))
		case r.URL.Path == "/header-bomb":
			for i := range 200 {
				w.Header().Set(fmt.Sprintf("X-Bomb-%d", i), strings.Repeat("b", 1000))
			}
		default:
			fmt.Fprintf(w, "ok %s %s", r.Method, r.URL.Path)
		}
	})
	G := g.url
	dns := egresstest.NewDNS(t, func(name string, n int) []netip.Addr {
		switch name {
		case "loopback.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		case "metadata.test":
			return []netip.Addr{netip.MustParseAddr("169.254.169.254")}
		case "rebind.test":
			if n == 1 {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")} // granted through g's address, at g's port
			}
			return []netip.Addr{netip.MustParseAddr("10.0.0.1")}
		}
		return nil
	})
	targets := fmt.Sprintf(`["%s/", "http://*:%d", "http://*:%d", "http://*:%d", "%s/api/"]`, G, PF, PF6, g.port, G)
	h, _ := httpHost(t, "name: p\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: {targets: "+targets+", allow_any: true}\n", dns.Resolver(), nil)
	m := fetcher(t, h, targets)
	// A second module, granted only g's /api/ prefix.
	api, err := loadWithManifest(t, h, "name: api\nversion: 1.0.0\nactions: [{name: call}]\ncapabilities:\n  http: [\""+G+"/api/\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	addr := func(ap, class string) string {
		art := "a"
		if strings.ContainsRune("aeiou", rune(class[0])) {
			art = "an"
		}
		return fmt.Sprintf("%s is %s %s address, and no granted target names it", ap, art, class)
	}
	lo, lo6 := fmt.Sprintf("127.0.0.1:%d", PF), fmt.Sprintf("[::1]:%d", PF6)
	type tc struct {
		name   string
		mod    *host.Module
		req    abi.HTTPFetchRequest
		code   abi.Code
		msg    string
		rule   string
		gHits  int32
		maxDur time.Duration
		body   string // the body of a request that is served
	}
	var tests []tc
	for _, form := range []string{"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.1", "127.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "loopback.test", "LOOPBACK.test."} {
		tests = append(tests, tc{name: "loopback as " + form, req: abi.HTTPFetchRequest{URL: fmt.Sprintf("http://%s:%d/", form, PF)}, code: abi.CodeDenied, msg: addr(lo, "loopback"), rule: "egress: address"})
	}
	tests = append(tests, []tc{
		{name: "loopback v6", req: abi.HTTPFetchRequest{URL: fmt.Sprintf("http://[::1]:%d/", PF6)}, code: abi.CodeDenied, msg: addr(lo6, "loopback"), rule: "egress: address"},
		{name: "metadata", req: abi.HTTPFetchRequest{URL: fmt.Sprintf("http://169.254.169.254:%d/", PF)}, code: abi.CodeDenied, msg: "link-local (cloud metadata)", rule: "egress: address"},
		{name: "metadata by name", req: abi.HTTPFetchRequest{URL: fmt.Sprintf("http://metadata.test:%d/", PF)}, code: abi.CodeDenied, msg: "link-local (cloud metadata)", rule: "egress: address"},
		{name: "redirect to loopback", req: abi.HTTPFetchRequest{URL: G + "/redirect?to=" + fmt.Sprintf("http://127.0.0.1:%d/", PF)}, code: abi.CodeDenied, msg: addr(lo, "loopback"), rule: "egress: address", gHits: 1},
		{name: "redirect to metadata", req: abi.HTTPFetchRequest{URL: G + "/redirect?to=" + fmt.Sprintf("http://169.254.169.254:%d/latest/meta-data/", PF)}, code: abi.CodeDenied, msg: "link-local (cloud metadata)", rule: "egress: address", gHits: 1},
		{name: "redirect to [::1]", req: abi.HTTPFetchRequest{URL: G + "/redirect?to=" + fmt.Sprintf("http://[::1]:%d/", PF6)}, code: abi.CodeDenied, msg: addr(lo6, "loopback"), rule: "egress: address", gHits: 1},
		{name: "redirect to the mapped form", req: abi.HTTPFetchRequest{URL: G + "/redirect?to=" + fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/", PF)}, code: abi.CodeDenied, msg: addr(lo, "loopback"), rule: "egress: address", gHits: 1},
		{name: "redirect to an ungranted port", req: abi.HTTPFetchRequest{URL: G + "/redirect?to=http://127.0.0.1:9/"}, code: abi.CodeDenied, msg: "is not among the capabilities", rule: "manifest capabilities", gHits: 1},
		{name: "redirect loop", req: abi.HTTPFetchRequest{URL: G + "/loop"}, code: abi.CodeDenied, msg: "stopped at a redirect past the limit of 5 redirects", rule: "egress: redirect", gHits: 6},
		{name: "a Content-Length that lies short is all that is read", req: abi.HTTPFetchRequest{URL: G + "/lies-short"}, gHits: 1, body: "xxxxxxxxxx"},
		{name: "a Content-Length that lies long", req: abi.HTTPFetchRequest{URL: G + "/lies-long"}, code: abi.CodeTooLarge, msg: "the response body is 1073741824 bytes or more; the limit is 1048576 (max_bytes)", rule: "max_bytes", gHits: 1},
		{name: "a Content-Length that lies long, within max_bytes", req: abi.HTTPFetchRequest{URL: G + "/lies-long", MaxBytes: abi.MaxHTTPResponseBytes}, code: abi.CodeTooLarge, rule: "max_bytes", gHits: 1},
		{name: "an endless chunked body", req: abi.HTTPFetchRequest{URL: G + "/endless", MaxBytes: 100000}, code: abi.CodeTooLarge, msg: "the response body is 100001 bytes or more; the limit is 100000 (max_bytes)", rule: "max_bytes", gHits: 1},
		{name: "a body dripping past timeout_ms", req: abi.HTTPFetchRequest{URL: G + "/drip", TimeoutMS: 300}, code: abi.CodeTimeout, msg: "no complete response within 300ms (timeout_ms) while reading the response body", rule: "timeout_ms", gHits: 1, maxDur: 2 * time.Second},
		{name: "too many response headers", req: abi.HTTPFetchRequest{URL: G + "/many-headers"}, code: abi.CodeTooLarge, msg: "headers; the limit is 64 (abi.MaxHTTPHeaders)", rule: "response headers", gHits: 1},
		{name: "a huge response header", req: abi.HTTPFetchRequest{URL: G + "/huge-header"}, code: abi.CodeTooLarge, msg: "the limit is 16384 (abi.MaxHTTPHeaderBytes)", rule: "response headers", gHits: 1},
		{name: "a response header bomb", req: abi.HTTPFetchRequest{URL: G + "/header-bomb"}, code: abi.CodeUnavailable, msg: "server response headers exceeded 65536 bytes", gHits: 1},
		{name: "CRLF in a header value", req: abi.HTTPFetchRequest{URL: G, Headers: map[string]string{"X-A": "1\r\nX-Evil: 1"}}, code: abi.CodeDenied, msg: "header injection", rule: "egress: header"},
		{name: "CRLF in a header name", req: abi.HTTPFetchRequest{URL: G, Headers: map[string]string{"X-A\r\nX-Evil": "1"}}, code: abi.CodeDenied, msg: "is not a token", rule: "egress: header"},
		{name: "Host override", req: abi.HTTPFetchRequest{URL: G, Headers: map[string]string{"Host": "metadata.test"}}, code: abi.CodeDenied, msg: "differs from the URL's host", rule: "egress: header"},
		{name: "framing", req: abi.HTTPFetchRequest{URL: G, Headers: map[string]string{"Transfer-Encoding": "chunked"}}, code: abi.CodeDenied, msg: "the client's to set", rule: "egress: header"},
		{name: "too many headers", req: abi.HTTPFetchRequest{URL: G, Headers: manyHeaders(abi.MaxHTTPHeaders + 1)}, code: abi.CodeDenied, msg: "65 headers; the limit is 64", rule: "egress: header"},
		{name: "headers too large", req: abi.HTTPFetchRequest{URL: G, Headers: map[string]string{"X-A": strings.Repeat("a", abi.MaxHTTPHeaderBytes)}}, code: abi.CodeDenied, msg: "the headers are 16387 bytes; the limit is 16384", rule: "egress: header"},
		{name: "a request line in the method", req: abi.HTTPFetchRequest{Method: "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET", URL: G}, code: abi.CodeDenied, msg: "is not allowed; use one of GET", rule: "egress: method"},
		{name: "CONNECT", req: abi.HTTPFetchRequest{Method: "CONNECT", URL: G}, code: abi.CodeDenied, msg: "is not allowed", rule: "egress: method"},
		{name: "TRACE", req: abi.HTTPFetchRequest{Method: "TRACE", URL: G}, code: abi.CodeDenied, msg: "is not allowed", rule: "egress: method"},

		// The api module may use g's /api/ only.
		{name: "prefix: inside", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/users"}, gHits: 1, body: "ok GET /api/users"},
		{name: "prefix: a sibling", mod: api, req: abi.HTTPFetchRequest{URL: G + "/apix"}, code: abi.CodeDenied, msg: "the path /apix is not under the granted prefix", rule: "grant path prefix"},
		{name: "prefix: ..", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/../admin"}, code: abi.CodeDenied, msg: "dot segment", rule: "grant path prefix"},
		{name: "prefix: %2e%2e", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/%2e%2e/admin"}, code: abi.CodeDenied, msg: "dot segment", rule: "grant path prefix"},
		{name: "prefix: %2f", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/..%2fadmin"}, code: abi.CodeDenied, msg: "encoded /", rule: "grant path prefix"},
		{name: "prefix: //", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api//admin"}, code: abi.CodeDenied, msg: "empty segment", rule: "grant path prefix"},
		{name: "prefix: ;", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/..;/admin"}, code: abi.CodeDenied, msg: "dot segment", rule: "grant path prefix"},
		{name: "prefix: a redirect out of it", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/redirect?to=/admin"}, gHits: 1, code: abi.CodeDenied, msg: "the path /admin is not under the granted prefix", rule: "grant path prefix"},
		// A Location's plain dot segments are resolved by the URL
		// reference rules before the hop is asked about (what is checked,
		// and would be sent, is /admin); encoded ones are kept, and refused.
		{name: "prefix: a redirect climbing out of it", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/redirect?to=" + url.QueryEscape("/api/../admin")}, gHits: 1, code: abi.CodeDenied, msg: "the path /admin is not under the granted prefix", rule: "grant path prefix"},
		{name: "prefix: a relative redirect with encoded dots", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/redirect?to=" + url.QueryEscape("/api/%2e%2e/admin")}, gHits: 1, code: abi.CodeDenied, msg: "dot segment", rule: "grant path prefix"},
		{name: "prefix: an absolute redirect with encoded dots", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/redirect?to=" + url.QueryEscape(G+"/api/%2E%2e/admin")}, gHits: 1, code: abi.CodeDenied, msg: "dot segment", rule: "grant path prefix"},
		{name: "prefix: a redirect with an encoded slash", mod: api, req: abi.HTTPFetchRequest{URL: G + "/api/redirect?to=" + url.QueryEscape("/api/..%2fadmin")}, gHits: 1, code: abi.CodeDenied, msg: "encoded /", rule: "grant path prefix"},
	}...)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mod := tt.mod
			if mod == nil {
				mod = m
			}
			corr := fmt.Sprintf("hostile-%d", i)
			f0, f60, g0 := forbidden.hits.Load(), forbidden6.hits.Load(), g.hits.Load()
			start := time.Now()
			res, err := fetch(t, mod, ann, corr, tt.req)
			if forbidden.hits.Load() != f0 || forbidden6.hits.Load() != f60 {
				t.Errorf("a server no grant names by address got a request")
			}
			if got := g.hits.Load() - g0; got != tt.gHits {
				t.Errorf("the granted server got %d requests, want %d", got, tt.gHits)
			}
			if tt.maxDur > 0 && time.Since(start) > tt.maxDur {
				t.Errorf("took %s", time.Since(start))
			}
			if tt.code == "" {
				if err != nil || res.Status != 200 || string(res.Body) != tt.body {
					t.Fatalf("%+v, %v; want 200 with %q", res, err, tt.body)
				}
				return
			}
			if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("%v\nwant %s with %q", err, tt.code, tt.msg)
			}
			if tt.rule == "" {
				return
			}
			var denies []audit.Event
			for _, e := range httpEvents(t, h, corr) {
				if e.Decision == audit.Deny {
					denies = append(denies, e)
				}
			}
			if len(denies) != 1 || denies[0].Rule != tt.rule || denies[0].Op != abi.OpHTTPFetch || denies[0].User != "ann" {
				t.Errorf("audit: %+v\nwant one http.fetch deny with rule %q", denies, tt.rule)
			}
		})
	}

	// DNS rebinding: the first answer is g's granted address, the next a
	// private one. Each connection is checked on the address it dials,
	// so the second request is refused, whatever the first answer was.
	t.Run("rebinding", func(t *testing.T) {
		u := fmt.Sprintf("http://rebind.test:%d/close", g.port)
		if res, err := fetch(t, m, ann, "rebind-1", abi.HTTPFetchRequest{URL: u}); err != nil || res.Status != 200 {
			t.Fatalf("the first answer: %+v %v", res, err)
		}
		_, err := fetch(t, m, ann, "rebind-2", abi.HTTPFetchRequest{URL: u})
		if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), addr(fmt.Sprintf("10.0.0.1:%d", g.port), "private")) {
			t.Fatalf("the rebound answer: %v", err)
		}
		if n := dns.Queries("rebind.test", "A"); n < 2 {
			t.Errorf("%d A queries, want one per connection", n)
		}
		if evs := httpEvents(t, h, "rebind-2"); len(evs) != 1 || evs[0].Rule != "egress: address" {
			t.Errorf("audit: %+v", evs)
		}
	})
}

func manyHeaders(n int) map[string]string {
	h := map[string]string{}
	for i := range n {
		h["X-H"+strconv.Itoa(i)] = "v"
	}
	return h
}

// TestHTTPSecretInjection: a grant's ${secret:NAME} is read in the
// calling organization and sent only to the hops the grant covers; the
// guest never sees it: not in a reflected body or header (names
// included, whatever their case), not through a redirect built from it,
// not in an error; the audit trail and the host's log never hold it. A
// guest header of the injected name, or one that would let it take the
// reply in pieces or compressed, is refused. What scrubbing cannot see (a
// server that transforms the value, base64 here) is shown too, as the
// promise's edge.
func TestHTTPSecretInjection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const acmeTok, globexTok = "s3cr3t-Token-ACME-0001", "globex-Token-value-0002"
	var bSaw atomic.Value
	b := serveOn(t, "127.0.0.2:0", func(w http.ResponseWriter, r *http.Request) {
		bSaw.Store(r.Header.Get("Authorization") + "|" + r.Header.Get("X-Static") + "|" + r.Header.Get("X-Mine"))
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		io.WriteString(w, "b saw "+r.Header.Get("Authorization"))
	})
	var aSaw atomic.Value
	a := serveOn(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		aSaw.Store(auth + "|" + r.Header.Get("X-Static"))
		tok := strings.TrimPrefix(auth, "Bearer ")
		switch path := r.URL.Path; {
		case strings.HasSuffix(path, "/echo"):
			w.Header().Set("X-Echo", auth)
			w.Header().Set("X-"+tok, "a header named after it")
			http.SetCookie(w, &http.Cookie{Name: "session", Value: tok})
			var hs []string
			for k, v := range r.Header {
				hs = append(hs, k+": "+strings.Join(v, ","))
			}
			fmt.Fprintf(w, "you sent %s; lower %s; upper %s", strings.Join(hs, "; "), strings.ToLower(tok), strings.ToUpper(tok))
		case strings.HasSuffix(path, "/redirect"):
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		case strings.HasSuffix(path, "/leak-query"):
			http.Redirect(w, r, b.url+"/x?t="+url.QueryEscape(tok), http.StatusFound)
		case strings.HasSuffix(path, "/leak-host"):
			http.Redirect(w, r, fmt.Sprintf("http://%s.evil.test:%d/", strings.ToLower(tok), b.port), http.StatusFound)
		case strings.HasSuffix(path, "/leak-scheme"):
			http.Redirect(w, r, "file://"+tok+"/etc", http.StatusFound)
		case strings.HasSuffix(path, "/leak-path"):
			http.Redirect(w, r, "/other/"+tok, http.StatusFound)
		case strings.HasSuffix(path, "/base64"):
			io.WriteString(w, base64.StdEncoding.EncodeToString([]byte(tok)))
		case strings.HasSuffix(path, "/deflate"):
			// Compressed though nobody asked: the token inside, unseen.
			w.Header().Set("Content-Encoding", "deflate")
			zw, _ := flate.NewWriter(w, flate.BestCompression)
			io.WriteString(zw, "you sent "+auth)
			zw.Close()
		case strings.Contains(path, "/ce/"):
			// Gzip the client did not decode: the codings are spread over
			// several values or listed after identity (the transport
			// decodes only when the first value is exactly gzip).
			codings := map[string][]string{
				"dup":      {"identity", "gzip"},
				"list":     {"identity, gzip"},
				"empty":    {"", "gzip"},
				"spaced":   {" identity ,  GZIP "},
				"identity": {"identity", "IDENTITY"},
			}[path[strings.LastIndex(path, "/")+1:]]
			w.Header()["Content-Encoding"] = codings
			if codings[len(codings)-1] == "IDENTITY" {
				io.WriteString(w, "you sent "+auth)
				return
			}
			zw := gzip.NewWriter(w)
			io.WriteString(zw, "you sent "+auth)
			zw.Close()
		default:
			io.WriteString(w, "a saw "+auth)
		}
	})
	A, B := a.url, b.url
	profile := fmt.Sprintf(`name: p
on_ungranted: deny_at_call
default:
  capabilities:
    http:
      - %s/
      - url: %s/api/
        headers: {Authorization: "Bearer ${secret:tok}", X-Static: plain-value}
      - %s
`, A, A, B)
	var logs bytes.Buffer
	dns := egresstest.NewDNS(t, func(string, int) []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.2")} })
	h, vault := httpHost(t, profile, dns.Resolver(), &logs)
	root := secrets.Actor{Via: "cli", User: "root"}
	if _, err := vault.Set(ctx, root, "acme", "tok", []byte(acmeTok)); err != nil {
		t.Fatal(err)
	}
	if _, err := vault.Set(ctx, root, "globex", "tok", []byte(globexTok)); err != nil {
		t.Fatal(err)
	}
	m := fetcher(t, h, fmt.Sprintf(`["%s/", "%s", "http://*:%d"]`, A, B, b.port))
	globex := policy.Principal{User: "gus", Org: "globex"}
	initech := policy.Principal{User: "ivy", Org: "initech"}

	clean := func(what string, s string) {
		t.Helper()
		for _, tok := range []string{acmeTok, globexTok} {
			if strings.Contains(strings.ToLower(s), strings.ToLower(tok)) {
				t.Errorf("%s holds a secret: %s", what, s)
			}
		}
	}
	show := func(res *abi.HTTPFetchResponse) string {
		b, _ := json.Marshal(res.Headers)
		return string(b) + " " + string(res.Body) + " " + res.URL
	}

	// The caller's organization's value reaches the server, and nothing of
	// it comes back.
	for _, who := range []policy.Principal{ann, globex} {
		tok := map[string]string{"acme": acmeTok, "globex": globexTok}[who.Org]
		res, err := fetch(t, m, who, "inject-"+who.Org, abi.HTTPFetchRequest{URL: A + "/api/echo"})
		if err != nil {
			t.Fatal(err)
		}
		if got := aSaw.Load(); got != "Bearer "+tok+"|plain-value" {
			t.Fatalf("%s: the server saw %q", who.Org, got)
		}
		clean("the response", show(res))
		if res.Headers["x-echo"] != "Bearer [secret]" || !strings.Contains(res.Headers["set-cookie"], "session=[secret]") ||
			res.Headers["x-[secret]"] != "a header named after it" || !strings.Contains(string(res.Body), "Authorization: Bearer [secret]") ||
			!strings.Contains(string(res.Body), "lower [secret]; upper [secret]") || !strings.Contains(string(res.Body), "X-Static: plain-value") {
			t.Errorf("%s: not scrubbed as expected: %s", who.Org, show(res))
		}
		evs := httpEvents(t, h, "inject-"+who.Org)
		if len(evs) != 1 || evs[0].Attrs["injected"] != "Authorization,X-Static" {
			t.Errorf("audit: %+v", evs)
		}
	}
	// Outside the prefix nothing is injected.
	if res, err := fetch(t, m, ann, "no-inject", abi.HTTPFetchRequest{URL: A + "/other/echo"}); err != nil || aSaw.Load() != "|" || !strings.Contains(string(res.Body), "you sent") {
		t.Errorf("outside the prefix: %v, the server saw %q", err, aSaw.Load())
	}
	// A path encoded twice is not under the prefix (a server that decodes
	// twice would read /api/../echo): it is refused there, and what the
	// grant of the whole server allows carries no secret.
	for _, p := range []string{"/api/%252e%252e/echo", "/api/%25%32%65%25%32%65/echo", "/api/x%252f..%252f..%252fecho"} {
		res, err := fetch(t, m, ann, "double-encoded", abi.HTTPFetchRequest{URL: A + p})
		if err != nil || aSaw.Load() != "|" {
			t.Errorf("%s: %v; the server saw %q, want no injected header", p, err, aSaw.Load())
		} else {
			clean(p, show(res))
		}
	}
	// A redirect to another granted host carries nothing injected; the
	// guest's own header goes on.
	res, err := fetch(t, m, ann, "to-b", abi.HTTPFetchRequest{URL: A + "/api/redirect?to=" + url.QueryEscape(B+"/echo"), Headers: map[string]string{"X-Mine": "guest"}})
	if err != nil || string(res.Body) != "b saw " || bSaw.Load() != "||guest" {
		t.Fatalf("a redirect to b: %v %q; b saw %q", err, res.Body, bSaw.Load())
	}
	if evs := httpEvents(t, h, "to-b"); len(evs) != 2 || evs[0].Attrs["injected"] != "Authorization,X-Static" || evs[1].Attrs["injected"] != "" {
		t.Errorf("audit of the hops: %+v", evs)
	}
	// A redirect into the prefix gets the header on that hop only.
	res, err = fetch(t, m, ann, "from-b", abi.HTTPFetchRequest{URL: B + "/?to=" + url.QueryEscape(A+"/api/echo")})
	if err != nil || aSaw.Load() != "Bearer "+acmeTok+"|plain-value" || bSaw.Load() != "||" {
		t.Fatalf("a redirect into the prefix: %v; a saw %q, b %q", err, aSaw.Load(), bSaw.Load())
	}
	clean("the response after a redirect", show(res))

	for _, tt := range []struct {
		name string
		who  policy.Principal
		req  abi.HTTPFetchRequest
		code abi.Code
		msg  string
		rule string
	}{
		{"the guest sets the injected header", ann, abi.HTTPFetchRequest{URL: A + "/api/echo", Headers: map[string]string{"authorization": "Bearer mine"}}, abi.CodeDenied,
			"header Authorization is injected by the grant " + A + "/api/; the module may not set it", "egress: header"},
		{"Range", ann, abi.HTTPFetchRequest{URL: A + "/api/echo", Headers: map[string]string{"Range": "bytes=10-12"}}, abi.CodeDenied, "header Range may not be set on a request the grant", "egress: header"},
		{"Accept-Encoding", ann, abi.HTTPFetchRequest{URL: A + "/api/echo", Headers: map[string]string{"Accept-Encoding": "br"}}, abi.CodeDenied, "whole and decoded", "egress: header"},
		{"a secret the organization lacks", initech, abi.HTTPFetchRequest{URL: A + "/api/echo"}, abi.CodeDenied,
			"organization initech has no secret tok; the operator sets it with `moat secrets set --org initech tok`", "secret"},
		{"a redirect carrying it in the query", ann, abi.HTTPFetchRequest{URL: A + "/api/leak-query"}, abi.CodeDenied, "a redirect to a URL that holds the value of a secret", "secret"},
		{"a redirect carrying it in the host", ann, abi.HTTPFetchRequest{URL: A + "/api/leak-host"}, abi.CodeDenied, "a redirect to a URL that holds the value of a secret", "secret"},
		{"a redirect carrying it in the path", ann, abi.HTTPFetchRequest{URL: A + "/api/leak-path"}, abi.CodeDenied, "a redirect to a URL that holds the value of a secret", "secret"},
		{"an error quoting it", ann, abi.HTTPFetchRequest{URL: A + "/api/leak-scheme"}, abi.CodeDenied, `redirect to file://[secret]: scheme "file"`, "egress: destination"},
	} {
		a0 := a.hits.Load()
		corr := "inj-" + strings.ReplaceAll(tt.name, " ", "-")
		_, err := fetch(t, m, tt.who, corr, tt.req)
		if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v\nwant %s with %q", tt.name, err, tt.code, tt.msg)
		}
		if err != nil {
			clean(tt.name+": the error", err.Error())
		}
		var denies int
		for _, e := range httpEvents(t, h, corr) {
			if e.Decision == audit.Deny {
				denies++
				if e.Rule != tt.rule {
					t.Errorf("%s: deny rule %q, want %q", tt.name, e.Rule, tt.rule)
				}
			}
		}
		if denies != 1 {
			t.Errorf("%s: %d deny events, want 1", tt.name, denies)
		}
		if strings.HasPrefix(tt.name, "the guest") || tt.name == "Range" || tt.name == "Accept-Encoding" || strings.HasPrefix(tt.name, "a secret") {
			if a.hits.Load() != a0 {
				t.Errorf("%s: the server got the refused request", tt.name)
			}
		}
	}
	// Range and Accept-Encoding are the guest's outside the prefix.
	if _, err := fetch(t, m, ann, "range-ok", abi.HTTPFetchRequest{URL: A + "/other/x", Headers: map[string]string{"Range": "bytes=0-1"}}); err != nil {
		t.Errorf("Range outside the prefix: %v", err)
	}
	// The edge of the promise: a server that transforms the value (here
	// base64) is not scrubbed. SECURITY.md says so.
	res, err = fetch(t, m, ann, "base64", abi.HTTPFetchRequest{URL: A + "/api/base64"})
	if err != nil || string(res.Body) != base64.StdEncoding.EncodeToString([]byte(acmeTok)) {
		t.Errorf("base64 of the secret: %q %v", res.Body, err)
	}

	// A body the server compressed unasked would hide the value from
	// scrubbing: refused and audited, where a secret was injected; the
	// same body without one is the guest's as it came.
	_, err = fetch(t, m, ann, "deflate", abi.HTTPFetchRequest{URL: A + "/api/deflate"})
	if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), `Content-Encoding "deflate"`) {
		t.Errorf("an encoded body where a secret is injected: %v", err)
	}
	if evs := httpEvents(t, h, "deflate"); len(evs) != 1 || evs[0].Decision != audit.Deny || evs[0].Rule != "secret" {
		t.Errorf("the encoded body's audit: %+v", evs)
	}
	if res, err := fetch(t, m, ann, "deflate-plain", abi.HTTPFetchRequest{URL: A + "/deflate"}); err != nil || res.Headers["content-encoding"] != "deflate" {
		t.Errorf("an encoded body, no secret injected: %+v %v", res, err)
	}
	// Every value of Content-Encoding and every coding in each counts:
	// identity first hides a gzip after it from a reader of the first.
	for _, c := range []string{"dup", "list", "empty", "spaced"} {
		corr := "ce-" + c
		_, err := fetch(t, m, ann, corr, abi.HTTPFetchRequest{URL: A + "/api/ce/" + c})
		if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "the response body is encoded (Content-Encoding") ||
			!strings.Contains(strings.ToLower(err.Error()), `"gzip"`) {
			t.Errorf("Content-Encoding %s where a secret is injected: %v", c, err)
		}
		if evs := httpEvents(t, h, corr); len(evs) != 1 || evs[0].Decision != audit.Deny || evs[0].Rule != "secret" {
			t.Errorf("Content-Encoding %s: audit %+v", c, evs)
		}
	}
	if res, err := fetch(t, m, ann, "ce-identity", abi.HTTPFetchRequest{URL: A + "/api/ce/identity"}); err != nil || string(res.Body) != "you sent Bearer [secret]" {
		t.Errorf("identity twice: %v %q", err, res.Body)
	}

	// Nothing in the audit trail or the host's log holds a value.
	all, err := host.AuditOf(h).Query(ctx, audit.Filter{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		b, _ := json.Marshal(e)
		clean("an audit event", string(b))
	}
	clean("the host's log", logs.String())

	// A host with no secrets, and a vault with no key: refused, saying how
	// to configure one.
	p, _ := policy.ParseProfile("p.yaml", []byte(profile))
	for name, src := range map[string]host.Config{
		"no secrets":     {Profile: p},
		"a vault no key": {Profile: p, Families: map[string]any{"secrets": &ops.SecretsConfig{Source: secrets.NewVault(host.StoreOf(h), nil, nil)}}},
	} {
		src.DataDir, src.CacheDir = t.TempDir(), compileCache
		src.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		h2, err := host.New(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h2.Close(ctx) })
		m2 := fetcher(t, h2, fmt.Sprintf(`["%s/", "%s"]`, A, B))
		_, err = fetch(t, m2, ann, "nokey", abi.HTTPFetchRequest{URL: A + "/api/echo"})
		if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "MOAT_SECRETS_KEY") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// An op of another family that downloads through ops.OutboundOf, as
// media.fetch does: its request follows the http family's grants, not its
// own capability's.
func init() {
	ops.Register(ops.Op{Name: "e2ehttp.download", Capability: "media", LeavesSandbox: true,
		Func: ops.Typed(func(env *ops.Env, req *abi.MediaFetchRequest) (*abi.HTTPFetchResponse, error) {
			return ops.OutboundOf(env).Fetch(env, &abi.HTTPFetchRequest{URL: req.URL}, 64)
		})})
}

// TestOutboundForAnotherOp: an op that is not http.fetch sends through the
// same client: the URL needs an http grant (a media grant is not enough),
// every hop is asked as http.fetch and audited with the op that sent it,
// and its own bound applies.
func TestOutboundForAnotherOp(t *testing.T) {
	t.Parallel()
	srv := serveOn(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/big") {
			w.Write(make([]byte, 65))
			return
		}
		io.WriteString(w, "image bytes")
	})
	h, _ := httpHost(t, "name: p\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    media: true\n    http: [\""+srv.url+"/img/\"]\n", nil, nil)
	m, err := loadWithManifest(t, h, "name: dl\nversion: 1.0.0\nactions: [{name: call}]\ncapabilities:\n  media: true\n  http: [\""+srv.url+"/img/\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	call := func(corr, url string) (string, error) {
		res, err := m.Invoke(context.Background(), host.Request{Action: "call", Input: []byte(`e2ehttp.download {"url": "` + url + `"}`), Principal: ann, CorrelationID: corr})
		if err != nil {
			return "", err
		}
		var out abi.HTTPFetchResponse
		json.Unmarshal(res.Output, &out)
		return string(out.Body), nil
	}
	if body, err := call("via-ok", srv.url+"/img/a.png"); err != nil || body != "image bytes" {
		t.Fatalf("%q %v", body, err)
	}
	if evs := httpEvents(t, h, "via-ok"); len(evs) != 2 || evs[0].Op != abi.OpHTTPFetch || evs[0].Attrs["via"] != "e2ehttp.download" || evs[1].Op != "e2ehttp.download" {
		t.Errorf("audit: %+v; want the hop as http.fetch via e2ehttp.download, then the op", evs)
	}
	if _, err := call("via-path", srv.url+"/secret/a.png"); abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "not under the granted prefix") {
		t.Errorf("a path outside the http grant: %v", err)
	}
	if evs := httpEvents(t, h, "via-path"); len(evs) != 1 || evs[0].Op != abi.OpHTTPFetch || evs[0].Decision != audit.Deny {
		t.Errorf("audit: %+v", evs)
	}
	if _, err := call("via-big", srv.url+"/img/big"); abi.CodeOf(err) != abi.CodeTooLarge || !strings.Contains(err.Error(), "e2ehttp.download GET") {
		t.Errorf("the op's own bound: %v", err)
	}
}
