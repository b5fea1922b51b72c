package extism

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
)

// Extism's http_request, as moat runs it. The go-sdk's own sends every
// request with http.DefaultClient after matching the host name against
// allowed_hosts: it follows redirects to any host, goes through
// HTTP_PROXY, and connects to whatever the name resolves to, so a granted
// name that resolves to 127.0.0.1 or 169.254.169.254 reaches the host's
// own services. moat's version:
//
//  1. asks policy about the URL (host.Call.CheckHTTP: scheme, host and
//     port against the module's effective http targets; audited), so with
//     no grant every request is refused;
//  2. re-asks for every redirect before following it;
//  3. checks the address it actually connects to, at dial time (after DNS,
//     so a name that changes its answer between check and use gains
//     nothing): loopback, private, link-local (cloud metadata), CGNAT,
//     multicast and reserved addresses are refused unless a granted target
//     names that address itself (http://127.0.0.1:8080), and a wildcard
//     grant never does;
//  4. uses no proxy from the environment;
//  5. charges the bodies to the invocation's budget (package budget): a
//     request body over budget.Limits.HTTPRequestBytes, or a response body
//     over HTTPResponseBytes or the call's memory limit (it must fit in the
//     plug-in's memory anyway), is refused with too_large before it is
//     read, or as soon as it passes the limit; a response body is read into
//     a buffer of its announced size, never grown by doubling; and at most
//     maxHTTPInFlight requests of one module are in flight at once, the
//     others waiting within their deadline. Six calls can no longer make
//     the host buffer half a gigabyte.
//
// A refused request stops the plug-in (as the go-sdk does for a host not
// in allowed_hosts) and the call fails with code denied.

// httpState is the status and headers of an instance's last request, read
// by http_status_code and http_headers.
type httpState struct {
	status  int32
	headers map[string]string
}

// maxHTTPInFlight bounds the requests of one module in flight at once,
// over all its instances.
const maxHTTPInFlight = 8

// httpClient is one module's HTTP client: one connection pool, shared by
// its instances.
type httpClient struct {
	once      sync.Once
	granted   map[netip.AddrPort]bool // special addresses that a grant names; port 0: any port
	transport *http.Transport
	client    *http.Client
	inFlight  chan struct{}
}

func newHTTPClient() *httpClient {
	c := &httpClient{inFlight: make(chan struct{}, maxHTTPInFlight)}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, ControlContext: c.control}
	c.transport = &http.Transport{
		Proxy:               nil, // never HTTP_PROXY: the proxy would connect on our behalf, unchecked
		DialContext:         dialer.DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        16,
		IdleConnTimeout:     30 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// The headers are kept for http_headers until the next request.
		MaxResponseHeaderBytes: 64 << 10,
	}
	c.client = &http.Client{Transport: c.transport, CheckRedirect: c.redirect}
	return c
}

func (c *httpClient) close() { c.transport.CloseIdleConnections() }

// deniedAddress is a connection refused at dial time.
type deniedAddress struct {
	addr netip.AddrPort
	why  string
}

func (e *deniedAddress) Error() string {
	return fmt.Sprintf("%s is a %s address, and no granted target names it", e.addr, e.why)
}

// control runs before every connect with the address being dialed.
func (c *httpClient) control(ctx context.Context, network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, err)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	why := specialAddress(ap.Addr())
	if why == "" {
		return nil
	}
	c.once.Do(func() { c.granted = grantedAddresses(stateOf(ctx).call.HTTPTargets()) })
	if c.granted[ap] || c.granted[netip.AddrPortFrom(ap.Addr(), 0)] {
		return nil
	}
	return &deniedAddress{addr: ap, why: why}
}

// grantedAddresses are the IP addresses that granted targets name
// literally, with their ports (0 for "*").
func grantedAddresses(targets []string) map[netip.AddrPort]bool {
	out := map[netip.AddrPort]bool{}
	for _, t := range targets {
		_, hostport, ok := strings.Cut(t, "://")
		if !ok {
			continue
		}
		h, p, err := net.SplitHostPort(hostport)
		if err != nil {
			continue
		}
		a, err := netip.ParseAddr(h)
		if err != nil {
			continue // a name (or a wildcard) never grants a special address
		}
		var port uint16
		if p != "*" {
			var n int
			if _, err := fmt.Sscanf(p, "%d", &n); err != nil || n < 1 || n > 65535 {
				continue
			}
			port = uint16(n)
		}
		out[netip.AddrPortFrom(a.Unmap(), port)] = true
	}
	return out
}

// specialNets are the ranges a request may reach only through a grant
// that names the address. Loopback, private and link-local ranges hold
// the host's own services and cloud metadata (169.254.169.254,
// fd00:ec2::254); the rest are shared, reserved or documentation ranges
// with no business on the public internet.
var specialNets = func() []struct {
	p   netip.Prefix
	why string
} {
	var out []struct {
		p   netip.Prefix
		why string
	}
	for _, s := range [][2]string{
		{"0.0.0.0/8", "reserved"}, {"10.0.0.0/8", "private"}, {"100.64.0.0/10", "shared (CGNAT)"},
		{"127.0.0.0/8", "loopback"}, {"169.254.0.0/16", "link-local (cloud metadata)"}, {"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "reserved"}, {"192.0.2.0/24", "documentation"}, {"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"}, {"198.51.100.0/24", "documentation"}, {"203.0.113.0/24", "documentation"},
		{"224.0.0.0/4", "multicast"}, {"240.0.0.0/4", "reserved"},
		{"::/128", "unspecified"}, {"::1/128", "loopback"}, {"64:ff9b::/96", "NAT64"}, {"100::/64", "discard"},
		{"2001:db8::/32", "documentation"}, {"fc00::/7", "private (unique local)"}, {"fe80::/10", "link-local"},
		{"ff00::/8", "multicast"},
	} {
		out = append(out, struct {
			p   netip.Prefix
			why string
		}{netip.MustParsePrefix(s[0]), s[1]})
	}
	return out
}()

// specialAddress says why a is not a public address, or "" when it is.
func specialAddress(a netip.Addr) string {
	for _, n := range specialNets {
		if n.p.Contains(a) {
			return n.why
		}
	}
	return ""
}

// redirect re-asks policy before following a redirect.
func (c *httpClient) redirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return stateOf(req.Context()).call.CheckHTTP(req.Context(), req.URL.String())
}

// request is http_request(req, body) -> response body: req is the Extism
// offset of {"url", "method", "headers"}, body 0 or the offset of the
// request body; the result is 0 for an empty body.
func (c *httpClient) request(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
	st := stateOf(ctx)
	hs := &st.inst.http
	hs.status, hs.headers = 0, nil
	raw, release, err := readBlock(cp, stack[0], abi.MaxRequestBytes, budget.From(ctx), "http_request: the request", func(n uint64) error {
		return abi.Errorf(abi.CodeTooLarge, "http_request: the request is %d bytes; the limit is %d (abi.MaxRequestBytes)", n, abi.MaxRequestBytes)
	})
	if f, ok := err.(*blockFault); ok {
		st.abort(abi.CodeGuestFault, "%s", f.reason)
	} else if err != nil {
		abortWith(st, err)
	}
	_ = cp.Free(stack[0])
	var r extism.HttpRequest
	if err := json.Unmarshal(raw, &r); err != nil {
		st.abort(abi.CodeInvalidArgument, "http_request: the request is not JSON {url, method, headers}: %v", err)
	}
	release()
	method := strings.ToUpper(r.Method)
	if method == "" {
		method = http.MethodGet
	}
	if err := st.call.CheckHTTP(ctx, r.Url); err != nil {
		abortWith(st, err)
	}
	bud := budget.From(ctx)
	what := fmt.Sprintf("http_request %s %s", method, redact(r.Url))
	var body io.Reader
	if stack[1] != 0 {
		n, err := cp.Length(stack[1])
		if err != nil {
			st.abort(abi.CodeGuestFault, "http_request: the body at offset %d is not an Extism memory block: %v", stack[1], err)
		}
		if err := bud.HTTPBody("request", int64(n), what); err != nil {
			abortWith(st, err)
		}
		defer bud.Release(int64(n))
		b, err := cp.ReadBytes(stack[1])
		if err != nil {
			st.abort(abi.CodeGuestFault, "http_request: the body at offset %d is not an Extism memory block: %v", stack[1], err)
		}
		_ = cp.Free(stack[1])
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.Url, body)
	if err != nil {
		st.abort(abi.CodeInvalidArgument, "http_request: %v", err)
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	select {
	case c.inFlight <- struct{}{}:
		defer func() { <-c.inFlight }()
	case <-ctx.Done():
		panic(ctx.Err()) // the deadline: the host reports a timeout
	}
	resp, err := c.client.Do(req)
	if err != nil {
		var denied *deniedAddress
		var ae *abi.Error
		switch {
		case errors.As(err, &denied):
			abortWith(st, st.call.DenyHTTP(ctx, "private addresses", fmt.Sprintf("http_request %s %s: %v", method, redact(r.Url), denied)))
		case errors.As(err, &ae): // a redirect that policy refused (already audited)
			abortWith(st, ae)
		case ctx.Err() != nil:
			panic(err) // the deadline: the host reports a timeout
		}
		st.abort(abi.CodeUnavailable, "http_request %s %s: %v", method, redact(r.Url), unwrapURLError(err))
	}
	defer resp.Body.Close()
	hs.status = int32(resp.StatusCode)
	hs.headers = make(map[string]string, len(resp.Header))
	for k, v := range resp.Header {
		hs.headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	limit := min(bud.Limits().HTTPResponseBytes, int64(st.call.Limits.MemoryLimitPages)*65536)
	b, held, err := readBody(resp.Body, resp.ContentLength, limit, bud, what)
	defer bud.Release(held)
	if err != nil {
		var ae *abi.Error
		switch {
		case errors.As(err, &ae):
			abortWith(st, err)
		case ctx.Err() != nil:
			panic(err)
		}
		st.abort(abi.CodeUnavailable, "%s: reading the response: %v", what, err)
	}
	if len(b) == 0 {
		stack[0] = 0
		return
	}
	off, err := cp.WriteBytes(b)
	if err != nil {
		st.abort(abi.CodeMemoryLimit, "http_request: no room for the %d-byte response in Extism memory: %v", len(b), err)
	}
	stack[0] = off
}

// httpStatusCode is http_status_code() -> i32.
func httpStatusCode(ctx context.Context, _ *extism.CurrentPlugin, stack []uint64) {
	stack[0] = uint64(uint32(stateOf(ctx).inst.http.status))
}

// httpHeaders is http_headers() -> i64: the offset of the last response's
// headers as a JSON object (lower-case names), or 0 before any response.
func httpHeaders(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
	st := stateOf(ctx)
	if st.inst.http.headers == nil {
		stack[0] = 0
		return
	}
	b, err := json.Marshal(st.inst.http.headers)
	if err != nil {
		st.abort(abi.CodeInternal, "http_headers: %v", err)
	}
	off, err := cp.WriteBytes(b)
	if err != nil {
		st.abort(abi.CodeMemoryLimit, "http_headers: no room in Extism memory: %v", err)
	}
	stack[0] = off
}

// abortWith stops the guest with a policy refusal as the call's error.
func abortWith(st *callState, err error) {
	var ae *abi.Error
	if errors.As(err, &ae) {
		st.abort(ae.Code, "%s", ae.Message)
	}
	st.abort(abi.CodeInternal, "%v", err)
}

// redact is a URL without its user information, path and query, which
// may carry secrets, for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid URL)"
	}
	return u.Scheme + "://" + u.Host
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// readBody reads a response body of at most limit bytes, holding what it
// reads in b's budget: the announced length (Content-Length) is refused at
// once when it is over, and otherwise read into a buffer of exactly that
// size; a body of unknown length grows its buffer within the budget. It
// returns the body and the bytes it holds, which the caller releases.
func readBody(r io.Reader, announced, limit int64, b *budget.Budget, what string) ([]byte, int64, error) {
	tooLarge := func(n int64) error {
		if err := b.HTTPBody("response", n, what); err != nil {
			return err
		}
		b.Release(n)
		return abi.Errorf(abi.CodeTooLarge, "%s: the response body is %d bytes or more; the call's memory limit leaves room for %d", what, n, limit)
	}
	if announced > limit {
		return nil, 0, tooLarge(announced)
	}
	var held int64
	grow := func(buf []byte, need int64) ([]byte, error) {
		newCap := min(max(need, 2*int64(cap(buf)), 32<<10), limit)
		if err := b.Hold(newCap-int64(cap(buf)), what+": the response body"); err != nil {
			return buf, err
		}
		held += newCap - int64(cap(buf))
		grown := make([]byte, len(buf), newCap)
		copy(grown, buf)
		return grown, nil
	}
	var buf []byte
	if announced >= 0 {
		var err error
		if buf, err = grow(nil, announced); err != nil {
			return nil, held, err
		}
	}
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= limit {
				// One more byte means the body is over the limit.
				var one [1]byte
				if n, _ := io.ReadFull(r, one[:]); n == 0 {
					return buf, held, nil
				}
				return nil, held, tooLarge(limit + 1)
			}
			var err error
			if buf, err = grow(buf, int64(len(buf))+1); err != nil {
				return nil, held, err
			}
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, held, nil
		}
		if err != nil {
			return nil, held, err
		}
	}
}
