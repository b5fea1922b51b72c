package extism_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/egress/egresstest"
)

// counted is a loopback server that counts the requests it gets.
type counted struct {
	*httptest.Server
	hits atomic.Int32
	port int
}

// listen starts h on addr ("127.0.0.1:0", "[::1]:0", "127.0.0.2:PORT").
func listen(t *testing.T, addr string, h http.HandlerFunc) *counted {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &counted{port: l.Addr().(*net.TCPAddr).Port}
	c.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.hits.Add(1)
		h(w, r)
	}))
	c.Listener = l
	c.Start()
	t.Cleanup(c.Close)
	return c
}

// rawCall is the egress plug-in's input: Extism's request object and a
// body.
type rawCall struct {
	Req  map[string]any `json:"req"`
	Body *string        `json:"body,omitempty"`
}

type rawResult struct {
	Status  int32             `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// TestEgressHostile is the hostile egress corpus: every way of writing a
// loopback, private or metadata destination, directly, through DNS and
// through redirects; DNS answers that change between queries; header
// injection; huge and slow bodies. Each refusal is asserted exactly (code,
// reason, the audit event's rule and reason), and the servers a request
// must not reach count what they got.
func TestEgressHostile(t *testing.T) {
	testenv.Slow(t, "the egress table again through Extism; policy/egress and host's TestHTTPFetchHostile keep it")
	testenv.Timing(t)
	ctx := context.Background()
	// Servers that no request may reach: a loopback listener on each
	// family, and the rebinding target.
	v4 := listen(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "loopback v4") })
	v6 := listen(t, "[::1]:0", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "loopback v6") })
	// The rebinding pair: one port on 127.0.0.2 (granted by address) and
	// 127.0.0.1 (not).
	var r2, r1 *counted
	for range 20 {
		r1 = listen(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "rebound to loopback") })
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", r1.port))
		if err != nil {
			continue
		}
		l.Close()
		r2 = listen(t, l.Addr().String(), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close") // the next request dials again
			io.WriteString(w, "granted 127.0.0.2")
		})
		break
	}
	if r2 == nil {
		t.Fatal("no port free on both 127.0.0.1 and 127.0.0.2")
	}
	// g is granted by its address; it redirects, sets cookies, echoes and
	// misbehaves on request.
	g := listen(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			w.Header().Set("Location", r.URL.Query().Get("to"))
			w.WriteHeader(http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/cookie":
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "ann-secret"})
			w.Header().Set("X-Token", "ann-token")
			if to := r.URL.Query().Get("to"); to != "" {
				http.Redirect(w, r, to, http.StatusFound)
				return
			}
			io.WriteString(w, "cookie set")
		case "/echo":
			fmt.Fprintf(w, "host=%s cookie=%q x-a=%q", r.Host, r.Header.Get("Cookie"), r.Header.Get("X-A"))
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(1<<30))
			w.WriteHeader(http.StatusOK)
		case "/endless":
			buf := make([]byte, 32<<10)
			for {
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		case "/slow":
			w.WriteHeader(http.StatusOK)
			for {
				if _, err := w.Write([]byte("x")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		case "/hang":
			<-r.Context().Done()
		case "/headerbomb":
			for i := range 200 {
				w.Header().Set(fmt.Sprintf("X-Bomb-%d", i), strings.Repeat("b", 1000))
			}
			w.WriteHeader(http.StatusOK)
		default:
			io.WriteString(w, "ok")
		}
	})
	P4, P6, PG, PR := v4.port, v6.port, g.port, r1.port
	G := fmt.Sprintf("http://127.0.0.1:%d", PG)

	dns := egresstest.NewDNS(t, func(name string, n int) []netip.Addr {
		switch name {
		case "loopback.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		case "v6only.test":
			return []netip.Addr{netip.MustParseAddr("::1")}
		case "metadata.test":
			return []netip.Addr{netip.MustParseAddr("169.254.169.254")}
		case "rebind.test":
			if n == 1 { // the first answer is the granted address, every later one loopback
				return []netip.Addr{netip.MustParseAddr("127.0.0.2")}
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		return nil
	})

	// The grant: any host on the servers' ports (so that the address check,
	// not the grant, is what refuses), and g and 127.0.0.2 by address.
	targets := fmt.Sprintf(`["http://*:%d", "http://*:%d", "http://127.0.0.1:%d", "http://*:%d", "http://127.0.0.2:%d"]`, P4, P6, PG, PR, PR)
	p := profile(t, "name: egress\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: {targets: "+targets+", allow_any: true}\n")
	h := newHostWith(t, p, nil, func(c *host.Config) { c.Families = map[string]any{"http": &ops.HTTPConfig{Resolver: dns.Resolver()}} })
	m, err := h.Load(ctx, buildPlugin(t, "egress"), host.LoadOptions{Manifest: manifest(t,
		"name: egress\nversion: 1.0.0\nkind: extism\nactions: [{name: raw}, {name: last}]\ncapabilities:\n  http: {targets: "+targets+", allow_any: true}\n")})
	if err != nil {
		t.Fatal(err)
	}

	loop := func(ap string, class string) string {
		return fmt.Sprintf("%s is %s %s address, and no granted target names it (a grant of http://%s would)", ap, map[bool]string{true: "an", false: "a"}[strings.ContainsRune("aeiouAEIOU", rune(class[0]))], class, ap)
	}
	at := func(url, reason string) string { return "http_request GET " + url + ": " + reason }
	v4ap, v6ap := fmt.Sprintf("127.0.0.1:%d", P4), fmt.Sprintf("[::1]:%d", P6)
	zone := func(inside, zone string) string {
		return fmt.Sprintf("[%s]: an IPv6 zone (%%%s) is not allowed in a destination; it names a local interface, and the address with it is no address a grant names", inside, zone)
	}
	const (
		ruleAddr   = "egress: address"
		ruleDest   = "egress: destination"
		ruleHeader = "egress: header"
		ruleMethod = "egress: method"
	)
	type tc struct {
		name    string
		url     string
		method  string
		headers map[string]string
		code    abi.Code // "" : the request is served
		reason  string   // the error's reason, exactly
		rule    string   // the audit event's rule ("": no deny event expected)
		gHits   int32    // requests g receives
		want    string   // the body, when served
	}
	var tests []tc
	// Every way of writing 127.0.0.1 reaches the one address check.
	for _, form := range []string{"127.0.0.1", "2130706433", "0177.0.0.1", "0177.1", "0x7f.1", "0x7f000001", "0X7F.0.0.1", "127.1", "127.0.1", "127.0.0.1.", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "loopback.test", "LoopBack.TEST.", "ｌｏｏｐｂａｃｋ.test"} {
		tests = append(tests, tc{name: "loopback as " + form, url: fmt.Sprintf("http://%s:%d/", form, P4), code: abi.CodeDenied,
			reason: at(fmt.Sprintf("http://127.0.0.1:%d", P4), loop(v4ap, "loopback")), rule: ruleAddr})
	}
	// Names keep their name in the message's URL.
	for i := range tests {
		if n := tests[i].name; strings.HasSuffix(n, ".test") || strings.HasSuffix(n, ".TEST.") {
			tests[i].reason = at(fmt.Sprintf("http://loopback.test:%d", P4), loop(v4ap, "loopback"))
		}
	}
	tests = append(tests, []tc{
		{name: "padded port", url: fmt.Sprintf("http://127.0.0.1:000%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://127.0.0.1:%d", P4), loop(v4ap, "loopback")), rule: ruleAddr},
		{name: "loopback v6", url: fmt.Sprintf("http://[::1]:%d/", P6), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://[::1]:%d", P6), loop(v6ap, "loopback")), rule: ruleAddr},
		{name: "loopback v6 long form", url: fmt.Sprintf("http://[0:0:0:0:0:0:0:1]:%d/", P6), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://[::1]:%d", P6), loop(v6ap, "loopback")), rule: ruleAddr},
		{name: "name resolving to ::1", url: fmt.Sprintf("http://v6only.test:%d/", P6), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://v6only.test:%d", P6), loop(v6ap, "loopback")), rule: ruleAddr},
		{name: "unspecified v4 (reaches this host)", url: fmt.Sprintf("http://0.0.0.0:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://0.0.0.0:%d", P4), loop(fmt.Sprintf("0.0.0.0:%d", P4), "unspecified")), rule: ruleAddr},
		{name: "unspecified as 0", url: fmt.Sprintf("http://0:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://0.0.0.0:%d", P4), loop(fmt.Sprintf("0.0.0.0:%d", P4), "unspecified")), rule: ruleAddr},
		{name: "unspecified v6", url: fmt.Sprintf("http://[::]:%d/", P6), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://[::]:%d", P6), loop(fmt.Sprintf("[::]:%d", P6), "unspecified")), rule: ruleAddr},
		{name: "another loopback address", url: fmt.Sprintf("http://127.0.0.2:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://127.0.0.2:%d", P4), loop(fmt.Sprintf("127.0.0.2:%d", P4), "loopback")), rule: ruleAddr},
		{name: "NAT64 of loopback", url: fmt.Sprintf("http://[64:ff9b::7f00:1]:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://[64:ff9b::7f00:1]:%d", P4), loop(fmt.Sprintf("[64:ff9b::7f00:1]:%d", P4), "NAT64 form of a loopback")), rule: ruleAddr},
		{name: "IPv4-compatible loopback", url: fmt.Sprintf("http://[::7f00:1]:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://[::7f00:1]:%d", P4), loop(fmt.Sprintf("[::7f00:1]:%d", P4), "IPv4-compatible")), rule: ruleAddr},
		{name: "metadata", url: fmt.Sprintf("http://169.254.169.254:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://169.254.169.254:%d", P4), loop(fmt.Sprintf("169.254.169.254:%d", P4), "link-local (cloud metadata)")), rule: ruleAddr},
		{name: "metadata mapped", url: fmt.Sprintf("http://[::ffff:169.254.169.254]:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://169.254.169.254:%d", P4), loop(fmt.Sprintf("169.254.169.254:%d", P4), "link-local (cloud metadata)")), rule: ruleAddr},
		{name: "metadata in hex", url: fmt.Sprintf("http://0xa9fea9fe:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://169.254.169.254:%d", P4), loop(fmt.Sprintf("169.254.169.254:%d", P4), "link-local (cloud metadata)")), rule: ruleAddr},
		{name: "metadata by name", url: fmt.Sprintf("http://metadata.test:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://metadata.test:%d", P4), loop(fmt.Sprintf("169.254.169.254:%d", P4), "link-local (cloud metadata)")), rule: ruleAddr},
		{name: "metadata Alibaba", url: fmt.Sprintf("http://100.100.100.200:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://100.100.100.200:%d", P4), loop(fmt.Sprintf("100.100.100.200:%d", P4), "shared (cloud metadata)")), rule: ruleAddr},
		{name: "metadata IPv6", url: fmt.Sprintf("http://[fd00:ec2::254]:%d/", P6), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://[fd00:ec2::254]:%d", P6), loop(fmt.Sprintf("[fd00:ec2::254]:%d", P6), "unique-local (cloud metadata)")), rule: ruleAddr},
		{name: "private", url: fmt.Sprintf("http://10.0.0.1:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://10.0.0.1:%d", P4), loop(fmt.Sprintf("10.0.0.1:%d", P4), "private")), rule: ruleAddr},
		{name: "link-local v6", url: fmt.Sprintf("http://[fe80::1]:%d/", P6), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://[fe80::1]:%d", P6), loop(fmt.Sprintf("[fe80::1]:%d", P6), "link-local")), rule: ruleAddr},
		{name: "multicast", url: fmt.Sprintf("http://224.0.0.1:%d/", P4), code: abi.CodeDenied, reason: at(fmt.Sprintf("http://224.0.0.1:%d", P4), loop(fmt.Sprintf("224.0.0.1:%d", P4), "multicast")), rule: ruleAddr},

		// Forms with no single meaning are refused before anything is asked.
		{name: "zoned loopback", url: fmt.Sprintf("http://[::1%%25lo]:%d/", P6), code: abi.CodeDenied, reason: fmt.Sprintf("http_request http://[::1%%lo]:%d: ", P6) + zone("::1%lo", "lo"), rule: ruleDest},
		{name: "zoned unspecified", url: fmt.Sprintf("http://[::%%25lo]:%d/", P6), code: abi.CodeDenied, reason: fmt.Sprintf("http_request http://[::%%lo]:%d: ", P6) + zone("::%lo", "lo"), rule: ruleDest},
		{name: "zoned metadata", url: fmt.Sprintf("http://[fd00:ec2::254%%25lo]:%d/", P6), code: abi.CodeDenied, reason: fmt.Sprintf("http_request http://[fd00:ec2::254%%lo]:%d: ", P6) + zone("fd00:ec2::254%lo", "lo"), rule: ruleDest},
		{name: "zoned link-local", url: fmt.Sprintf("http://[fe80::1%%25lo]:%d/", P6), code: abi.CodeDenied, reason: fmt.Sprintf("http_request http://[fe80::1%%lo]:%d: ", P6) + zone("fe80::1%lo", "lo"), rule: ruleDest},
		{name: "zoned mapped", url: fmt.Sprintf("http://[::ffff:127.0.0.1%%25lo]:%d/", P4), code: abi.CodeDenied, reason: fmt.Sprintf("http_request http://[::ffff:127.0.0.1%%lo]:%d: ", P4) + zone("::ffff:127.0.0.1%lo", "lo"), rule: ruleDest},
		{name: "user information", url: G + "/", method: "GET", code: abi.CodeDenied, rule: ruleDest},
		{name: "user information naming a granted host", url: fmt.Sprintf("http://127.0.0.1:%d@127.0.0.1:%d/", PG, P4), code: abi.CodeDenied,
			reason: fmt.Sprintf("http_request http://127.0.0.1:%d: http://…@127.0.0.1:%d: user information (user@) in a URL is not allowed; it makes the URL read as one host while it goes to another, and credentials belong in a header", P4, P4), rule: ruleDest},
		{name: "percent-encoded host", url: fmt.Sprintf("http://%%31%%32%%37.0.0.1:%d/", P4), code: abi.CodeDenied, reason: `http_request (invalid URL): not a URL: invalid URL escape "%31"`, rule: ruleDest},
		{name: "short form out of range", url: fmt.Sprintf("http://127.16777216:%d/", P4), code: abi.CodeDenied,
			reason: fmt.Sprintf(`http_request http://127.16777216:%d: host "127.16777216" ends in a number but is not an IPv4 address`, P4), rule: ruleDest},
		{name: "not http", url: "file:///etc/passwd", code: abi.CodeDenied, reason: `http_request (invalid URL): scheme "file": not an http or https URL`, rule: ruleDest},

		// Redirects are requests of their own.
		{name: "redirect to a zone", url: G + "/redirect?to=" + fmt.Sprintf("http://[::1%%2525lo]:%d/", P6), code: abi.CodeDenied, gHits: 1,
			reason: at(G, fmt.Sprintf("redirect to http://[::1%%lo]:%d: ", P6)+zone("::1%lo", "lo")), rule: ruleDest},
		{name: "redirect to a decimal loopback", url: G + "/redirect?to=" + fmt.Sprintf("http://2130706433:%d/", P4), code: abi.CodeDenied, gHits: 1,
			reason: at(G, loop(v4ap, "loopback")), rule: ruleAddr},
		{name: "redirect to metadata by name", url: G + "/redirect?to=" + fmt.Sprintf("http://metadata.test:%d/", P4), code: abi.CodeDenied, gHits: 1,
			reason: at(G, loop(fmt.Sprintf("169.254.169.254:%d", P4), "link-local (cloud metadata)")), rule: ruleAddr},
		{name: "redirect with user information", url: G + "/redirect?to=" + fmt.Sprintf("http://x@127.0.0.1:%d/", PG), code: abi.CodeDenied, gHits: 1,
			reason: at(G, fmt.Sprintf("redirect to http://127.0.0.1:%d: http://…@127.0.0.1:%d: user information (user@) in a URL is not allowed; it makes the URL read as one host while it goes to another, and credentials belong in a header", PG, PG)), rule: ruleDest},
		{name: "redirect to a file", url: G + "/redirect?to=file:///etc/passwd", code: abi.CodeDenied, gHits: 1,
			reason: at(G, `redirect to file://: scheme "file": not an http or https URL`), rule: ruleDest},
		{name: "redirect to a target not granted", url: G + "/redirect?to=http://example.invalid:81/", code: abi.CodeDenied, gHits: 1,
			reason: "op http.fetch http://example.invalid:81: http http://example.invalid:81 is not among the capabilities the module requests; add http: [http://example.invalid:81] under capabilities in moat.yaml (rule: manifest capabilities)", rule: "manifest capabilities"},
		{name: "redirect loop", url: G + "/loop", code: abi.CodeDenied, gHits: 6,
			reason: at(G, "stopped at a redirect past the limit of 5 redirects"), rule: "egress: redirect"},

		// What the guest adds to a request.
		{name: "CRLF in a header value", url: G + "/echo", headers: map[string]string{"X-A": "1\r\nX-Evil: 1"}, code: abi.CodeDenied,
			reason: "http_request " + G + `: header X-A: the value "1\r\nX-Evil: 1" has a byte a header may not carry; it holds CR and LF, which would end the header (header injection)`, rule: ruleHeader},
		{name: "LF in a header value", url: G + "/echo", headers: map[string]string{"X-A": "1\nX-Evil: 1"}, code: abi.CodeDenied,
			reason: "http_request " + G + `: header X-A: the value "1\nX-Evil: 1" has a byte a header may not carry; it holds LF, which would end the header (header injection)`, rule: ruleHeader},
		{name: "NUL in a header value", url: G + "/echo", headers: map[string]string{"X-A": "a\x00b"}, code: abi.CodeDenied,
			reason: "http_request " + G + `: header X-A: the value "a\x00b" has a byte a header may not carry; it holds NUL, which would end the header (header injection)`, rule: ruleHeader},
		{name: "CRLF in a header name", url: G + "/echo", headers: map[string]string{"X-A\r\nX-Evil": "1"}, code: abi.CodeDenied,
			reason: "http_request " + G + `: header name "X-A\r\nX-Evil" is not a token; it holds CR and LF, which would end the header (header injection)`, rule: ruleHeader},
		{name: "colon in a header name", url: G + "/echo", headers: map[string]string{"X-A: b": "1"}, code: abi.CodeDenied,
			reason: "http_request " + G + `: header name "X-A: b" is not a token`, rule: ruleHeader},
		{name: "Host override", url: G + "/echo", headers: map[string]string{"Host": "evil.test"}, code: abi.CodeDenied,
			reason: "http_request " + G + `: header Host: "evil.test" differs from the URL's host 127.0.0.1:` + strconv.Itoa(PG) + "; a request goes to the host its URL names", rule: ruleHeader},
		{name: "Host header naming the URL's host", url: G + "/echo", headers: map[string]string{"host": "127.0.0.1:" + strconv.Itoa(PG), "X-A": "fine"}, gHits: 1,
			want: fmt.Sprintf(`host=127.0.0.1:%d cookie="" x-a="fine"`, PG)},
		{name: "X-Forwarded-Host (the host an application believes)", url: G + "/echo", headers: map[string]string{"X-Forwarded-Host": "evil.test"}, code: abi.CodeDenied,
			reason: "http_request " + G + ": header X-Forwarded-Host says where a request came from or goes (a proxy's to set, which servers route or trust by); a module may not set it: the request goes to its URL's host and path", rule: ruleHeader},
		{name: "X-Original-URL (the path a front proxy routes by)", url: G + "/echo", headers: map[string]string{"x-original-url": "/admin"}, code: abi.CodeDenied,
			reason: "http_request " + G + ": header X-Original-Url says where a request came from or goes (a proxy's to set, which servers route or trust by); a module may not set it: the request goes to its URL's host and path", rule: ruleHeader},
		{name: "Forwarded", url: G + "/echo", headers: map[string]string{"Forwarded": "for=127.0.0.1;host=evil.test"}, code: abi.CodeDenied,
			reason: "http_request " + G + ": header Forwarded says where a request came from or goes (a proxy's to set, which servers route or trust by); a module may not set it: the request goes to its URL's host and path", rule: ruleHeader},
		{name: "Transfer-Encoding", url: G + "/echo", headers: map[string]string{"Transfer-Encoding": "chunked"}, code: abi.CodeDenied,
			reason: "http_request " + G + ": header Transfer-Encoding is the client's to set (framing, connection or proxy), not the module's", rule: ruleHeader},
		{name: "Content-Length", url: G + "/echo", headers: map[string]string{"content-length": "0"}, code: abi.CodeDenied,
			reason: "http_request " + G + ": header Content-Length is the client's to set (framing, connection or proxy), not the module's", rule: ruleHeader},
		{name: "one header twice", url: G + "/echo", headers: map[string]string{"x-a": "1", "X-A": "2"}, code: abi.CodeDenied,
			reason: "http_request " + G + ": header X-A is given twice (names differ only in case)", rule: ruleHeader},
		{name: "too many headers", url: G + "/echo", headers: manyHeaders(65, 1), code: abi.CodeDenied,
			reason: "http_request " + G + ": 65 headers; the limit is 64", rule: ruleHeader},
		{name: "headers too large", url: G + "/echo", headers: manyHeaders(2, 10<<10), code: abi.CodeDenied,
			reason: "http_request " + G + ": the headers are 20488 bytes; the limit is 16384", rule: ruleHeader},
		{name: "CONNECT", url: G + "/", method: "CONNECT", code: abi.CodeDenied,
			reason: "http_request " + G + `: method "CONNECT" is not allowed; use one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS`, rule: ruleMethod},
		{name: "request line in the method", url: G + "/", method: "GET / HTTP/1.1\r\nHost: evil\r\n\r\nGET", code: abi.CodeDenied,
			reason: "http_request " + G + `: method "GET / HTTP/1.1\r\nHost: evil\r\n\r\nGET" is not allowed; use one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS`, rule: ruleMethod},

		// Bodies.
		{name: "a gigabyte announced", url: G + "/big", code: abi.CodeTooLarge, gHits: 1},
		{name: "an endless body", url: G + "/endless", code: abi.CodeTooLarge, gHits: 1},
		{name: "response header bomb", url: G + "/headerbomb", code: abi.CodeUnavailable, gHits: 1,
			reason: "http_request GET " + G + ": net/http: HTTP/1.x transport connection broken: net/http: server response headers exceeded 65536 bytes; aborted"},
	}...)
	// The user information case: built here to keep the secret out of the
	// expected reason, which must not repeat it.
	for i := range tests {
		if tests[i].name == "user information" {
			tests[i].url = fmt.Sprintf("http://ann:hunter2@127.0.0.1:%d/", PG)
			tests[i].reason = fmt.Sprintf("http_request http://127.0.0.1:%d: http://…@127.0.0.1:%d: user information (user@) in a URL is not allowed; it makes the URL read as one host while it goes to another, and credentials belong in a header", PG, PG)
		}
	}
	if len(tests) < 60 {
		t.Fatalf("only %d cases", len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g0, v40, v60, r10 := g.hits.Load(), v4.hits.Load(), v6.hits.Load(), r1.hits.Load()
			req := map[string]any{"url": tt.url, "method": tt.method, "headers": tt.headers}
			if tt.method == "" {
				req["method"] = "GET"
			}
			in, _ := json.Marshal(rawCall{Req: req})
			corr := fmt.Sprintf("egress-%d", i)
			res, err := m.Invoke(ctx, host.Request{Action: "raw", Input: in, Principal: ann, CorrelationID: corr})
			if v4.hits.Load() != v40 || v6.hits.Load() != v60 || r1.hits.Load() != r10 {
				t.Errorf("a loopback server that no grant names got a request")
			}
			if got := g.hits.Load() - g0; got != tt.gHits {
				t.Errorf("the granted server got %d requests, want %d", got, tt.gHits)
			}
			if tt.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				var out rawResult
				if err := json.Unmarshal(res.Output, &out); err != nil || out.Body != tt.want {
					t.Fatalf("output %s (%v), want body %q", res.Output, err, tt.want)
				}
				return
			}
			var he *host.Error
			if !errors.As(err, &he) || he.Code != tt.code || tt.reason != "" && he.Reason != tt.reason {
				t.Fatalf("err %v\nwant %s: %s", err, tt.code, tt.reason)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the refusal repeats the password: %v", err)
			}
			if tt.rule == "" {
				return
			}
			if err := hosttest.Audit(h).Flush(ctx); err != nil {
				t.Fatal(err)
			}
			evs, err := hosttest.Audit(h).Query(ctx, audit.Filter{CorrelationID: corr, Kind: audit.KindOp, Decision: audit.Deny})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || evs[0].Op != "http.fetch" || evs[0].Rule != tt.rule || !strings.HasSuffix(tt.reason, evs[0].Reason) || evs[0].User != "ann" {
				t.Fatalf("audit: %+v\nwant one http.fetch deny by ann, rule %q, reason %q", evs, tt.rule, tt.reason)
			}
		})
	}

	// DNS rebinding: the name's first answer is the granted 127.0.0.2, every
	// later one 127.0.0.1. Each connection is checked on the address it
	// dials, so the first request is served and the second refused, and
	// 127.0.0.1 gets nothing (a check that resolved once and dialled by
	// name would have sent the first request there).
	t.Run("rebinding", func(t *testing.T) {
		rebind := fmt.Sprintf("http://rebind.test:%d/", PR)
		in, _ := json.Marshal(rawCall{Req: map[string]any{"url": rebind, "method": "GET"}})
		res, err := m.Invoke(ctx, host.Request{Action: "raw", Input: in, Principal: ann})
		if err != nil || !strings.Contains(string(res.Output), "granted 127.0.0.2") {
			t.Fatalf("first answer: %s, %v", res.Output, err)
		}
		_, err = m.Invoke(ctx, host.Request{Action: "raw", Input: in, Principal: ann})
		want := at(fmt.Sprintf("http://rebind.test:%d", PR), loop(fmt.Sprintf("127.0.0.1:%d", PR), "loopback"))
		var he *host.Error
		if !errors.As(err, &he) || he.Code != abi.CodeDenied || he.Reason != want {
			t.Fatalf("rebound: %v\nwant denied: %s", err, want)
		}
		if r2.hits.Load() != 1 || r1.hits.Load() != 0 {
			t.Errorf("127.0.0.2 got %d requests (want 1), 127.0.0.1 got %d (want 0)", r2.hits.Load(), r1.hits.Load())
		}
		if n := dns.Queries("rebind.test", "A"); n < 2 {
			t.Errorf("%d A queries for rebind.test, want one per connection (2)", n)
		}
	})

	// Slow bodies and servers that never answer end at the invocation's
	// deadline, reported as a timeout.
	for _, path := range []string{"/slow", "/hang"} {
		t.Run("deadline "+path, func(t *testing.T) {
			in, _ := json.Marshal(rawCall{Req: map[string]any{"url": G + path, "method": "GET"}})
			start := time.Now()
			_, err := m.Invoke(ctx, host.Request{Action: "raw", Input: in, Principal: ann, Limits: host.Limits{Timeout: 500 * time.Millisecond}})
			if abi.CodeOf(err) != abi.CodeTimeout || !strings.Contains(err.Error(), "did not finish within 500ms") {
				t.Fatalf("err %v, want a timeout", err)
			}
			if took := time.Since(start); took > 500*time.Millisecond+deadlineSlack {
				t.Errorf("took %s", took)
			}
		})
	}
}

func manyHeaders(n, size int) map[string]string {
	h := map[string]string{}
	for i := range n {
		h[fmt.Sprintf("X-H%d", i)] = strings.Repeat("v", size)
	}
	return h
}

// TestHTTPStateIsPerInvocation: what one invocation's requests got back
// (status, headers such as Set-Cookie) is gone when the next invocation
// starts on the same pooled instance, whoever calls it, and no cookie is
// ever sent back: there is no cookie jar, within an invocation either.
func TestHTTPStateIsPerInvocation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := listen(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cookie":
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "ann-secret"})
			if to := r.URL.Query().Get("to"); to != "" {
				http.Redirect(w, r, to, http.StatusFound)
				return
			}
			io.WriteString(w, "cookie set")
		default:
			fmt.Fprintf(w, "cookie=%q", r.Header.Get("Cookie"))
		}
	})
	target := fmt.Sprintf("http://127.0.0.1:%d", g.port)
	p := profile(t, "name: egress\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: ["+target+"]\n")
	h := newHost(t, p, nil)
	m, err := h.Load(ctx, buildPlugin(t, "egress"), host.LoadOptions{Manifest: manifest(t,
		"name: egress\nversion: 1.0.0\nkind: extism\nactions: [{name: raw}, {name: last}]\ncapabilities:\n  http: ["+target+"]\n")})
	if err != nil {
		t.Fatal(err)
	}
	bob := policy.Principal{User: "bob", Org: "acme"}
	call := func(who policy.Principal, action, url string) rawResult {
		t.Helper()
		in := []byte("{}")
		if url != "" {
			in, _ = json.Marshal(rawCall{Req: map[string]any{"url": url, "method": "GET"}})
		}
		res, err := m.Invoke(ctx, host.Request{Action: action, Input: in, Principal: who})
		if err != nil {
			t.Fatal(err)
		}
		var out rawResult
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatalf("%s: %v", res.Output, err)
		}
		return out
	}
	if got := call(ann, "raw", target+"/cookie"); got.Status != 200 || !strings.Contains(got.Headers["set-cookie"], "ann-secret") {
		t.Fatalf("ann's own request: %+v", got)
	}
	if got := call(bob, "last", ""); got.Status != 0 || got.Headers != nil {
		t.Errorf("bob's invocation sees ann's last response: status %d, headers %v", got.Status, got.Headers)
	}
	if got := call(bob, "raw", target+"/echo"); got.Body != `cookie=""` {
		t.Errorf("bob's request carried a cookie: %s", got.Body)
	}
	// A cookie set on the way through a redirect is not sent to the next hop.
	if got := call(ann, "raw", target+"/cookie?to=/echo"); got.Body != `cookie=""` {
		t.Errorf("the redirect's next hop got a cookie: %s", got.Body)
	}
	if got := call(bob, "last", ""); got.Status != 0 || got.Headers != nil {
		t.Errorf("bob's invocation sees ann's last response: status %d, headers %v", got.Status, got.Headers)
	}
}

// TestEgressInjection: Extism's http_request is sent by the same client
// as http.fetch, so a grant's secret is injected into it and scrubbed from
// what the plug-in reads back (body and headers, through http_headers),
// and a redirect to another host does not carry it.
func TestEgressInjection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const tok = "extism-Secret-Value-42"
	var saw atomic.Value
	g := listen(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		saw.Store(r.Header.Get("Authorization"))
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		io.WriteString(w, "got "+r.Header.Get("Authorization"))
	})
	other := listen(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		saw.Store("other:" + r.Header.Get("Authorization"))
	})
	G, O := fmt.Sprintf("http://127.0.0.1:%d", g.port), fmt.Sprintf("http://127.0.0.1:%d", other.port)
	p := profile(t, "name: egress\ndefault:\n  capabilities:\n    http:\n      - url: "+G+"/\n        headers: {Authorization: \"Token ${secret:svc}\"}\n      - "+O+"\n")
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	raw := make([]byte, secrets.KeySize)
	rand.Read(raw)
	key, _ := secrets.ParseKey(base64.StdEncoding.EncodeToString(raw))
	vault := secrets.NewVault(st, key, nil)
	if _, err := vault.Set(ctx, secrets.Actor{Via: "cli", User: "root"}, "acme", "svc", []byte(tok)); err != nil {
		t.Fatal(err)
	}
	h := newHostWith(t, p, nil, func(c *host.Config) {
		c.Store, c.Families = st, map[string]any{"secrets": &ops.SecretsConfig{Source: vault}}
	})
	m, err := h.Load(ctx, buildPlugin(t, "egress"), host.LoadOptions{Manifest: manifest(t,
		"name: egress\nversion: 1.0.0\nkind: extism\nactions: [{name: raw}, {name: last}]\ncapabilities:\n  http: ["+G+"/, "+O+"]\n")})
	if err != nil {
		t.Fatal(err)
	}
	call := func(url string) rawResult {
		in, _ := json.Marshal(rawCall{Req: map[string]any{"url": url, "method": "GET"}})
		res, err := m.Invoke(ctx, host.Request{Action: "raw", Input: in, Principal: ann})
		if err != nil {
			t.Fatal(err)
		}
		var out rawResult
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := call(G + "/echo")
	if saw.Load() != "Token "+tok || out.Body != "got Token [secret]" || out.Headers["x-echo"] != "Token [secret]" {
		t.Errorf("the server saw %q; the plug-in read %+v", saw.Load(), out)
	}
	call(G + "/?to=" + url.QueryEscape(O+"/x"))
	if saw.Load() != "other:" {
		t.Errorf("the redirect's other host saw %q", saw.Load())
	}
	evs, err := hosttest.Audit(h).Query(ctx, audit.Filter{Kind: audit.KindOp, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if b, _ := json.Marshal(e); strings.Contains(string(b), tok) {
			t.Errorf("an audit event holds the secret: %s", b)
		}
	}
}
