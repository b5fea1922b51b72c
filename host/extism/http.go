package extism

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	extism "github.com/extism/go-sdk"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/policy/egress"
)

// Extism's http_request, as moat runs it. The go-sdk's own sends every
// request with http.DefaultClient after matching the host name against
// allowed_hosts: it follows redirects to any host, goes through
// HTTP_PROXY, and connects to whatever the name resolves to, so a granted
// name that resolves to 127.0.0.1 or 169.254.169.254 reaches the host's
// own services. moat's version sends through package egress, the one
// egress decision every outbound path shares:
//
//  1. the request is normalized and checked before anything is sent
//     (egress.Client.Prepare): the URL's host in its one canonical form
//     (zones, user information, odd IPv4 and IPv6 forms, IDNA), the method
//     and the headers (no CR, LF or NUL, no framing or Host override,
//     bounded);
//  2. policy is asked about the normalized URL (host.Call.CheckHTTP:
//     scheme, host and port against the module's effective http targets;
//     audited), so with no grant every request is refused, and again for
//     every redirect, of which at most egress.DefaultMaxRedirects are
//     followed;
//  3. the address each connection actually goes to is checked when it is
//     dialled (after DNS: a name whose answer changes between check and
//     use gains nothing): loopback, private, link-local (cloud metadata),
//     CGNAT, multicast, reserved and the IPv6 forms of those are refused
//     unless the profile's grant names that address itself
//     (http://127.0.0.1:8080; host.Call.AddressTargets), and a wildcard or
//     a name never does;
//  4. no proxy from the environment, no cookie jar, and nothing of one
//     invocation's requests (status, headers) is seen by the next;
//  5. the bodies are charged to the invocation's budget (package budget): a
//     request body over budget.Limits.HTTPRequestBytes, or a response body
//     over HTTPResponseBytes or the call's memory limit (it must fit in the
//     plug-in's memory anyway), is refused with too_large before it is
//     read, or as soon as it passes the limit; a response body is read into
//     a buffer of its announced size, never grown by doubling; and at most
//     maxHTTPInFlight requests of one module are in flight at once, the
//     others waiting within their deadline.
//
// A refused request stops the plug-in (as the go-sdk does for a host not
// in allowed_hosts) and the call fails with code denied; every refusal is
// in the audit trail (op http.fetch, decision deny).

// httpState is the status and headers of the current invocation's last
// request, read by http_status_code and http_headers. It is reset when an
// invocation starts: a pooled instance serves other principals next.
type httpState struct {
	status  int32
	headers map[string]string
}

// maxHTTPInFlight bounds the requests of one module in flight at once,
// over all its instances.
const maxHTTPInFlight = 8

// testResolver, when set, is the resolver of clients made from then on:
// tests point it at their own DNS server.
var testResolver atomic.Pointer[net.Resolver]

// httpClient is one module's HTTP client: one connection pool, shared by
// its instances, made at the first request (when the module's grants are
// known).
type httpClient struct {
	once     sync.Once
	eg       *egress.Client
	inFlight chan struct{}
}

func newHTTPClient() *httpClient {
	return &httpClient{inFlight: make(chan struct{}, maxHTTPInFlight)}
}

func (c *httpClient) close() {
	c.once.Do(func() {}) // no client is made after this
	if c.eg != nil {
		c.eg.CloseIdleConnections()
	}
}

// client is the module's egress client.
func (c *httpClient) client(call *host.Call) *egress.Client {
	c.once.Do(func() {
		c.eg = egress.NewClient(egress.Config{
			Guard: egress.NewGuard(call.AddressTargets()),
			Check: func(ctx context.Context, u *url.URL, _ egress.Dest) error {
				return stateOf(ctx).call.CheckHTTP(ctx, u.String())
			},
			Resolver: testResolver.Load(),
		})
	})
	return c.eg
}

// request is http_request(req, body) -> response body: req is the Extism
// offset of {"url", "method", "headers"}, body 0 or the offset of the
// request body; the result is 0 for an empty body.
func (c *httpClient) request(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
	st := stateOf(ctx)
	hs := &st.inst.http
	hs.status, hs.headers = 0, nil
	bud := budget.From(ctx)
	raw, release, err := readBlock(cp, stack[0], abi.MaxRequestBytes, bud, "http_request: the request", func(n uint64) error {
		return abi.Errorf(abi.CodeTooLarge, "http_request: the request is %d bytes; the limit is %d (abi.MaxRequestBytes)", n, abi.MaxRequestBytes)
	})
	abortOnBlock(st, err)
	_ = cp.Free(stack[0])
	var r extism.HttpRequest
	if err := json.Unmarshal(raw, &r); err != nil {
		st.abort(abi.CodeInvalidArgument, "http_request: the request is not JSON {url, method, headers}: %v", err)
	}
	release()
	what := "http_request " + redact(r.Url)
	var body []byte
	if stack[1] != 0 {
		// Over HTTPRequestBytes, the budget's refusal (too_large, audited
		// under its knob); within it, held until the request is done.
		lim := int(min(bud.Limits().HTTPRequestBytes, math.MaxInt))
		b, releaseBody, err := readBlock(cp, stack[1], lim, bud, "http_request: the body", func(n uint64) error {
			return bud.HTTPBody("request", int64(n), what)
		})
		abortOnBlock(st, err)
		defer releaseBody()
		body = b
		_ = cp.Free(stack[1])
	}
	eg := c.client(st.call)
	if eg == nil { // the module was closed (its calls end first, so only a bug gets here)
		st.abort(abi.CodeUnavailable, "http_request: the module was closed")
	}
	req, dest, err := eg.Prepare(ctx, egress.Request{Method: r.Method, URL: r.Url, Header: r.Headers, Body: body})
	if err != nil {
		deny(ctx, st, what, err)
	}
	what = "http_request " + req.Method + " " + dest.String()
	select {
	case c.inFlight <- struct{}{}:
		defer func() { <-c.inFlight }()
	case <-ctx.Done():
		panic(ctx.Err()) // the deadline: the host reports a timeout
	}
	resp, err := eg.Do(req, dest)
	if err != nil {
		var ae *abi.Error
		switch {
		case errors.As(err, &ae): // policy refused the URL or a redirect (already audited)
			abortWith(st, ae)
		case ctx.Err() != nil:
			panic(err) // the deadline: the host reports a timeout
		}
		deny(ctx, st, what, err)
		st.abort(abi.CodeUnavailable, "%s: %v", what, err)
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

// abortOnBlock stops the guest when readBlock failed: a guest fault for
// an offset that is no block, the refusal itself otherwise.
func abortOnBlock(st *callState, err error) {
	if f, ok := err.(*blockFault); ok {
		st.abort(abi.CodeGuestFault, "%s", f.reason)
	} else if err != nil {
		abortWith(st, err)
	}
}

// deny stops the guest when err is egress's refusal, recording it in the
// audit trail (op http.fetch, rule "egress: " and the check's rule) as
// denied; it returns for any other error.
func deny(ctx context.Context, st *callState, what string, err error) {
	var ee *egress.Error
	if errors.As(err, &ee) {
		abortWith(st, st.call.DenyHTTP(ctx, "egress: "+ee.Rule, what+": "+ee.Reason))
	}
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

// readBody reads a response body of at most limit bytes, holding what it
// reads in b's budget: the announced length (Content-Length) is refused at
// once when it is over, and otherwise read into a buffer of exactly that
// size; a body of unknown length grows its buffer within the budget. It
// returns the body and the bytes it holds, which the caller releases.
func readBody(r io.Reader, announced, limit int64, b *budget.Budget, what string) ([]byte, int64, error) {
	tooLarge := func(n int64) error {
		if n > b.Limits().HTTPResponseBytes {
			// The budget's own refusal, audited under its knob. (Over its
			// limit HTTPBody holds nothing; a nil budget refuses nothing.)
			if err := b.HTTPBody("response", n, what); err != nil {
				return err
			}
		}
		return abi.Errorf(abi.CodeTooLarge, "%s: the response body is %d bytes or more; the call's memory limit leaves room for %d (raise the module's memory limit to take it)", what, n, limit)
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
