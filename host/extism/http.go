package extism

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/url"

	extism "github.com/extism/go-sdk"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/driver"
)

// Extism's http_request, as moat runs it. The go-sdk's own sends every
// request with http.DefaultClient after matching the host name against
// allowed_hosts: it follows redirects to any host, goes through
// HTTP_PROXY, and connects to whatever the name resolves to, so a granted
// name that resolves to 127.0.0.1 or 169.254.169.254 reaches the host's
// own services. moat's version hands the request to the host
// (driver.Gate.Fetch), which sends it exactly as the http.fetch op does,
// with the module's one client (host/ops' HTTPClient): the request
// normalized, every hop checked against the module's grants (path
// prefixes included) and its connection's address when dialled, the
// headers a grant injects added and scrubbed from the reply, time and
// size bounded, at most 8 requests of a module in flight, every hop and
// refusal audited as op http.fetch.
//
// What stays here is Extism's side: the request's JSON and body are read
// from the plug-in's memory under the invocation's budget (package
// budget: a request body over budget.Limits.HTTPRequestBytes is refused
// with too_large before it is copied), and the response body is bounded
// by HTTPResponseBytes and the call's memory limit (it must fit in the
// plug-in's memory anyway), refused naming whichever it passed. A refused
// request stops the plug-in (as the go-sdk does for a host not in
// allowed_hosts) with the refusal's code; a request cut by the
// invocation's deadline ends it as a timeout.

// httpState is the status and headers of the current invocation's last
// request, read by http_status_code and http_headers. It is reset when an
// invocation starts: a pooled instance serves other principals next.
type httpState struct {
	status  int32
	headers map[string]string
}

// httpRequest is http_request(req, body) -> response body: req is the
// Extism offset of {"url", "method", "headers"}, body 0 or the offset of
// the request body; the result is 0 for an empty body.
func httpRequest(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
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
		st.abort(abi.CodeInvalidArgument, "http_request: the request is not JSON {url, method, headers}: %s", abi.DescribeDecodeError("", raw, &r, err))
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
	limit := min(bud.Limits().HTTPResponseBytes, int64(st.call.Limits.MemoryLimitPages)*65536)
	tooLarge := func(n int64) error {
		if n > bud.Limits().HTTPResponseBytes {
			// The budget's own refusal, audited under its knob. (Over its
			// limit HTTPBody holds nothing; a nil budget refuses nothing.)
			if err := bud.HTTPBody("response", n, what); err != nil {
				return err
			}
		}
		return abi.Errorf(abi.CodeTooLarge, "%s: the response body is %d bytes or more; the call's memory limit leaves room for %d (raise the module's memory limit to take it)", what, n, limit)
	}
	// No timeout of its own: http_request has none, so the invocation's
	// deadline bounds it (the most a request may name is the bound).
	resp, err := st.call.Fetch(ctx, &abi.HTTPFetchRequest{Method: r.Method, URL: r.Url, Headers: r.Headers, Body: body, TimeoutMS: abi.MaxHTTPTimeoutMS},
		driver.HTTPOptions{Label: "http_request", MaxBytes: limit, TooLarge: tooLarge})
	if err != nil {
		if ctx.Err() != nil {
			panic(ctx.Err()) // the deadline: the host reports a timeout
		}
		abortWith(st, err)
	}
	hs.status, hs.headers = int32(resp.Status), resp.Headers
	if hs.headers == nil {
		hs.headers = map[string]string{}
	}
	if len(resp.Body) == 0 {
		stack[0] = 0
		return
	}
	off, err := cp.WriteBytes(resp.Body)
	if err != nil {
		st.abort(abi.CodeMemoryLimit, "http_request: no room for the %d-byte response in Extism memory: %v", len(resp.Body), err)
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
