package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/internal/tracing"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/egress"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// HTTPClient is the http family's client, the one Outbound of a module:
// http.fetch, Extism's http_request (through Fetch) and media.fetch
// (through OutboundOf) all send with it, so one set of rules holds
// whichever way a request leaves:
//
//  1. package egress normalizes the request (method, URL, the guest's
//     headers: no CR, LF or NUL, no framing or Host override, at most
//     abi.MaxHTTPHeaders and abi.MaxHTTPHeaderBytes) and follows
//     redirects itself, at most abi.MaxHTTPRedirects, each a hop of its
//     own;
//  2. every hop is asked of the gate as http.fetch with its URL (the
//     module's effective http targets, path prefixes included, and the
//     profile's sensitive ops; a refusal is audited by the gate), and
//     its connection is checked on the address dialled (egress.Guard:
//     loopback, private, link-local and metadata addresses only when the
//     profile's grant names the address);
//  3. the headers the grants covering that hop inject are added to that
//     hop only (Evaluation.HTTPInjections), a ${secret:NAME} read in the
//     caller's organization at that moment; a guest header of an
//     injected name is refused, and so are Accept-Encoding, Range and
//     If-Range on a hop a secret is injected into, so that the reply is
//     whole and decoded when it is scrubbed;
//  4. time is bounded by the request's timeout_ms and the invocation's
//     deadline, the response body by the caller's bound (refused with
//     too_large as soon as it passes it, or at once when Content-Length
//     says so), the response's headers by abi.MaxHTTPHeaders and
//     abi.MaxHTTPHeaderBytes, and the module's requests in flight by
//     MaxInFlight;
//  5. every value of an injected secret is scrubbed (abi.SecretPlaceholder,
//     ASCII case ignored) from what goes back: the response's headers,
//     names and values, its body and URL, and every error message; a
//     redirect to a URL holding such a value is refused before anything
//     records it;
//  6. each hop is audited (op http.fetch: method, host, path without the
//     query, status, bytes out and in, duration, the injected header
//     names, and the op that sent it), and so is each refusal, with its
//     rule.
type HTTPClient struct {
	eval     *policy.Evaluation
	eg       *egress.Client
	inFlight chan struct{}
	record   func(env *Env, ev HTTPEvent)
}

// DefaultHTTPInFlight bounds the requests of one module in flight at once,
// over all its instances, when HTTPClientConfig.MaxInFlight is 0.
const DefaultHTTPInFlight = 8

// HTTPClientConfig configures a module's HTTPClient.
type HTTPClientConfig struct {
	// Evaluation is the module's policy: the address targets its guard
	// lets connections reach, the headers its grants inject. Nil: none.
	Evaluation *policy.Evaluation
	// Resolver resolves names (nil: the system's).
	Resolver *net.Resolver
	// Record writes an audit event (nil: none are written).
	Record func(env *Env, ev HTTPEvent)
	// MaxInFlight bounds the module's requests in flight (0:
	// DefaultHTTPInFlight).
	MaxInFlight int
}

// NewHTTPClient makes a module's client. Close it with the module.
func NewHTTPClient(cfg HTTPClientConfig) *HTTPClient {
	var addrs []string
	if cfg.Evaluation != nil {
		addrs = cfg.Evaluation.AddressTargets()
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultHTTPInFlight
	}
	if cfg.Record == nil {
		cfg.Record = func(*Env, HTTPEvent) {}
	}
	return &HTTPClient{
		eval: cfg.Evaluation,
		eg: egress.NewClient(egress.Config{Guard: egress.NewGuard(addrs), Resolver: cfg.Resolver, MaxRedirects: abi.MaxHTTPRedirects,
			MaxHeaders: abi.MaxHTTPHeaders, MaxHeaderBytes: abi.MaxHTTPHeaderBytes}),
		inFlight: make(chan struct{}, cfg.MaxInFlight),
		record:   cfg.Record,
	}
}

// Close closes the client's idle connections.
func (c *HTTPClient) Close() { c.eg.CloseIdleConnections() }

var _ Outbound = (*HTTPClient)(nil)

// HTTPEvent is what the client records of one hop, or of a refusal.
type HTTPEvent struct {
	Op       string // the op that sent the request, when it is not http.fetch (media.fetch)
	Decision string // "allow", "deny", or "" for a request that failed on the network
	Rule     string // the rule that refused: "egress: address", "secret", "max_bytes", ...
	Reason   string
	Code     abi.Code // the failure's code; "" when it succeeded
	Method   string
	Target   string // scheme://host:port
	Path     string // without the query, which may carry credentials
	Hop      int    // 0 for the module's request, then each redirect's
	Status   int
	BytesOut int64 // the request body
	BytesIn  int64 // the response body as the host read it
	Duration time.Duration
	Injected []string // the names of the headers the grant injected
}

// FetchOptions say how one request is bounded and named.
type FetchOptions struct {
	// Label names the request in messages ("http.fetch", Extism's
	// "http_request"); "" is the op in flight.
	Label string
	// MaxBytes bounds the response body.
	MaxBytes int64
	// TooLarge is the refusal of a body of n bytes or more past MaxBytes
	// (nil: the client's own, too_large naming MaxBytes).
	TooLarge func(n int64) error
	// Budget charges the body to the invocation's held bytes
	// (budget.Limits.HeldBytes) while it is read.
	Budget bool
}

func (o FetchOptions) label(env *Env) string {
	switch {
	case o.Label != "":
		return o.Label
	case env.op != nil:
		return env.op.Name
	}
	return abi.OpHTTPFetch
}

// Fetch implements Outbound: the request bounded by maxBytes (else the
// request's max_bytes, else abi.DefaultHTTPResponseBytes), named by the
// op in flight, and charged to the invocation's held bytes when that op
// is http.fetch (an op that keeps more, like media.fetch, bounds what it
// holds itself).
func (c *HTTPClient) Fetch(env *Env, req *abi.HTTPFetchRequest, maxBytes int64) (*abi.HTTPFetchResponse, error) {
	if maxBytes <= 0 {
		maxBytes = req.MaxBytes
	}
	if maxBytes <= 0 {
		maxBytes = abi.DefaultHTTPResponseBytes
	}
	return c.Send(env, req, FetchOptions{MaxBytes: maxBytes, Budget: env.op == httpOp})
}

// fetch is one request in flight, with what its hops learned.
type fetch struct {
	c        *HTTPClient
	env      *Env
	req      *abi.HTTPFetchRequest
	label    string   // how messages name the request's sender ("http.fetch", "http_request")
	what     string   // how messages name the request: label, method and destination
	via      string   // the op that sent it, when not http.fetch
	used     [][]byte // the secret values injected so far, to scrub
	injected []string // the headers injected into the current hop
	started  time.Time
	// Traces on only: the request's span, its last hop's destination
	// (scheme://host:port) and whether a hop was sent the trace context.
	span       trace.Span
	dest       string
	propagated bool
}

// Send sends req for the invocation env describes (see HTTPClient).
func (c *HTTPClient) Send(env *Env, req *abi.HTTPFetchRequest, o FetchOptions) (*abi.HTTPFetchResponse, error) {
	if !tracing.On() {
		return c.send(env, req, o, nil)
	}
	// The request's client span, under the op's: every hop's
	// traceparent (where a grant opts in, before) names it. It carries
	// the last hop's destination as scheme://host:port, its status and
	// whether the trace context was sent: never a path, a query, a
	// header or a body.
	ctx := env.Context
	if ctx == nil {
		ctx = context.Background()
	}
	sctx, span := tracing.Start(ctx, "moat.outbound", trace.SpanKindClient)
	env.Context = sctx
	f := &fetch{span: span}
	resp, err := c.send(env, req, o, f)
	env.Context = ctx
	if f.dest != "" {
		span.SetAttributes(tracing.KeyTarget.String(f.dest))
	}
	span.SetAttributes(tracing.KeyPropagated.Bool(f.propagated))
	if resp != nil {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.Status))
	}
	code := "ok"
	if err != nil {
		code = string(abi.CodeOf(err))
	}
	tracing.End(span, code, err)
	return resp, err
}

func (c *HTTPClient) send(env *Env, req *abi.HTTPFetchRequest, o FetchOptions, traced *fetch) (*abi.HTTPFetchResponse, error) {
	label := o.label(env)
	f := &fetch{c: c, env: env, req: req, label: label, what: label + " " + redactURL(req.URL)}
	if traced != nil {
		f.span = traced.span
		defer func() { traced.dest, traced.propagated = f.dest, f.propagated }()
	}
	if env.op != nil && env.op != httpOp {
		f.via = env.op.Name
	}
	timeout := time.Duration(abi.DefaultHTTPTimeoutMS) * time.Millisecond
	if req.TimeoutMS > 0 {
		timeout = time.Duration(min(req.TimeoutMS, abi.MaxHTTPTimeoutMS)) * time.Millisecond
	}
	ctx := env.Context
	if ctx == nil {
		ctx = context.Background()
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case c.inFlight <- struct{}{}:
		defer func() { <-c.inFlight }()
	case <-rctx.Done():
		return nil, f.timedOut(ctx, nil, timeout, "waiting for one of the module's "+strconv.Itoa(cap(c.inFlight))+" requests in flight to finish")
	}
	resp, hop, err := c.eg.Send(rctx, egress.Request{Method: req.Method, URL: req.URL, Header: req.Headers, Body: req.Body},
		egress.Hooks{Before: f.before, Redirected: f.redirected})
	if err != nil {
		return nil, f.failed(ctx, rctx, hop, timeout, err)
	}
	defer resp.Body.Close()
	if err := checkResponseHeaders(resp.Header); err != nil {
		return nil, f.refuse(hop, "response headers", abi.CodeTooLarge, err.Error())
	}
	// A body the server encoded on its own (br, deflate: the transport
	// decodes only the gzip it asks for, and then drops the header) could
	// carry an injected value where scrubbing cannot see it: refused, and
	// never read.
	if ce := encodedAs(resp.Header); len(f.used) > 0 && ce != "" {
		return nil, f.refuse(hop, "secret", abi.CodeDenied, fmt.Sprintf("the response body is encoded (Content-Encoding %.40q), and the host cannot scrub a secret its grant injected out of an encoded body; the server must answer unencoded", ce))
	}
	limit := o.MaxBytes
	bud := budget.From(ctx)
	if !o.Budget {
		bud = nil
	}
	tooLarge := o.TooLarge
	if tooLarge == nil {
		tooLarge = func(n int64) error {
			return abi.Errorf(abi.CodeTooLarge, "%s: the response body is %d bytes or more; the limit is %d (max_bytes)", f.what, n, limit)
		}
	}
	body, held, err := readBody(resp.Body, resp.ContentLength, limit, bud, f.what, tooLarge)
	defer bud.Release(held)
	if err != nil {
		var ae *abi.Error
		switch {
		case errors.As(err, &ae):
			rule := "max_bytes"
			if ae.Code == abi.CodeResourceExhausted {
				rule = budget.KnobHeldBytes
			}
			f.audit(hop, HTTPEvent{Decision: "deny", Rule: rule, Reason: ae.Message, Code: ae.Code, Status: resp.StatusCode, BytesIn: limit})
			return nil, f.scrubErr(ae)
		case rctx.Err() != nil:
			return nil, f.timedOut(ctx, hop, timeout, "reading the response body")
		}
		return nil, f.unavailable(hop, fmt.Sprintf("reading the response: %v", err))
	}
	out := &abi.HTTPFetchResponse{Status: resp.StatusCode, Headers: make(map[string]string, len(resp.Header)), URL: f.scrub(hop.URL.String())}
	for k, v := range resp.Header {
		out.Headers[f.scrub(strings.ToLower(k))] = f.scrub(strings.Join(v, ", "))
	}
	out.Body = f.scrubBytes(body)
	f.audit(hop, HTTPEvent{Decision: "allow", Rule: "grant", Status: resp.StatusCode, BytesIn: int64(len(body))})
	return out, nil
}

// before decides on a hop and gives it the headers its grants inject.
func (f *fetch) before(ctx context.Context, h *egress.Hop) error {
	if h.N == 0 {
		f.what = f.label + " " + h.Method + " " + h.Dest.String()
	}
	if f.span != nil {
		f.dest = h.Dest.String()
	}
	f.injected, f.started = nil, time.Time{}
	u := h.URL.String()
	if f.holdsSecret(u) {
		return &hopRefusal{rule: "secret", reason: "a redirect to a URL that holds the value of a secret injected into an earlier hop is refused"}
	}
	if err := f.allow(u); err != nil {
		return err
	}
	if f.c.eval == nil {
		f.started = time.Now()
		return nil
	}
	inj, err := f.c.eval.HTTPInjections(u)
	if err != nil {
		return err
	}
	for _, in := range inj {
		for name := range f.req.Headers {
			if strings.EqualFold(name, in.Name) {
				return &hopRefusal{rule: "egress: header", reason: fmt.Sprintf("header %s is injected by the grant %s; the module may not set it", in.Name, in.Target)}
			}
		}
		if len(in.Secrets()) == 0 {
			continue
		}
		for name := range f.req.Headers {
			if k := http.CanonicalHeaderKey(name); k == "Accept-Encoding" || k == "Range" || k == "If-Range" {
				return &hopRefusal{rule: "egress: header", reason: fmt.Sprintf("header %s may not be set on a request the grant %s injects a secret into: the host must see the reply whole and decoded to scrub the secret from it", k, in.Target)}
			}
		}
	}
	for _, in := range inj {
		v, used, err := in.Expand(func(name string) ([]byte, error) { return f.secret(ctx, name) })
		f.used = append(f.used, used...)
		if err != nil {
			return &hopRefusal{rule: "secret", reason: err.Error()}
		}
		h.Header.Set(in.Name, v)
		f.injected = append(f.injected, in.Name)
	}
	// The trace context goes only to a target whose grant opted in
	// (propagate_trace), hop by hop: each hop's headers start again
	// from the module's own, so a redirect elsewhere carries none of
	// ours.
	if f.span != nil && f.c.eval.PropagatesTrace(u) && tracing.Inject(ctx, h.Header) {
		f.propagated = true
	}
	f.started = time.Now()
	return nil
}

// allow asks the gate about a hop's URL as http.fetch: directly when
// http.fetch is the op in flight, on its behalf for another op
// (media.fetch's download follows the http family's grants).
func (f *fetch) allow(u string) error {
	env := f.env
	if env.op == httpOp {
		return env.Allow(u)
	}
	if env.gate == nil {
		return abi.Errorf(abi.CodeInternal, "%s: a request outside a call", f.what)
	}
	return env.gate.AllowOp(env, httpOp, u)
}

// secret reads an injected secret in the caller's organization; a grant
// never reaches the operator's own (org "").
func (f *fetch) secret(ctx context.Context, name string) ([]byte, error) {
	org := f.env.Principal.Org
	switch {
	case org == "":
		return nil, errors.New("the caller has no organization, and a grant's secret is read only in the caller's")
	case httpSecrets(f.env) == nil:
		return nil, errors.New("this host keeps no secrets; the operator configures a secrets key ($MOAT_SECRETS_KEY or secrets_key_file) and sets the secret with `moat secrets set --org " + org + " " + name + "`")
	}
	v, err := httpSecrets(f.env).Secret(ctx, org, name)
	if errors.Is(err, ErrSecretNotFound) {
		return nil, fmt.Errorf("organization %s has no secret %s; the operator sets it with `moat secrets set --org %s %s`", org, name, org, name)
	}
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("secret %s of organization %s is empty", name, org)
	}
	return v, nil
}

// redirected records a redirect's hop.
func (f *fetch) redirected(h *egress.Hop, resp *http.Response) {
	f.audit(h, HTTPEvent{Decision: "allow", Rule: "grant", Status: resp.StatusCode})
}

// hopRefusal is a hop refused by the client itself: a secret that cannot
// be read, a header the guest may not set there.
type hopRefusal struct{ rule, reason string }

func (e *hopRefusal) Error() string { return e.reason }

// failed turns what ended a request early into the guest's error, and
// audits it: the gate's refusals are audited by the gate already.
func (f *fetch) failed(ctx, rctx context.Context, hop *egress.Hop, timeout time.Duration, err error) error {
	var (
		ae *abi.Error
		hr *hopRefusal
		ee *egress.Error
	)
	switch {
	case errors.As(err, &ae):
		return f.scrubErr(ae)
	case errors.As(err, &hr):
		return f.refuse(hop, hr.rule, abi.CodeDenied, hr.reason)
	case errors.As(err, &ee):
		return f.refuse(hop, "egress: "+ee.Rule, abi.CodeDenied, ee.Reason)
	case rctx.Err() != nil:
		return f.timedOut(ctx, hop, timeout, "waiting for the response")
	}
	return f.unavailable(hop, err.Error())
}

// refuse audits a refusal and returns it.
func (f *fetch) refuse(hop *egress.Hop, rule string, code abi.Code, reason string) error {
	msg := f.scrub(f.what + ": " + reason)
	f.audit(hop, HTTPEvent{Decision: "deny", Rule: rule, Reason: msg, Code: code})
	return &abi.Error{Code: code, Message: msg}
}

// timedOut is the refusal of a request past its time: the invocation's
// deadline (CodeTimeout, the invocation ends) or timeout_ms.
func (f *fetch) timedOut(ctx context.Context, hop *egress.Hop, timeout time.Duration, doing string) error {
	if ctx.Err() != nil {
		return f.refuse(hop, "deadline", abi.CodeTimeout, "the invocation's deadline passed while "+doing)
	}
	return f.refuse(hop, "timeout_ms", abi.CodeTimeout, fmt.Sprintf("no complete response within %s (timeout_ms) while %s", timeout, doing))
}

// unavailable is a request that failed on the network: audited as
// neither allowed nor denied, with its code.
func (f *fetch) unavailable(hop *egress.Hop, reason string) error {
	msg := f.scrub(f.what + ": " + reason)
	f.audit(hop, HTTPEvent{Reason: msg, Code: abi.CodeUnavailable})
	return &abi.Error{Code: abi.CodeUnavailable, Message: msg}
}

// audit records ev for hop, filling in what the hop says.
func (f *fetch) audit(hop *egress.Hop, ev HTTPEvent) {
	ev.Op = f.via
	if hop != nil {
		ev.Method, ev.Target, ev.Path, ev.Hop = hop.Method, f.scrub(hop.Dest.String()), f.scrub(hop.URL.EscapedPath()), hop.N
		ev.BytesOut = int64(len(hop.Body))
		if !f.started.IsZero() {
			ev.Duration = time.Since(f.started)
		}
		ev.Injected = f.injected
	} else {
		ev.Method, ev.Target = strings.ToUpper(f.req.Method), redactURL(f.req.URL)
		if ev.Method == "" {
			ev.Method = http.MethodGet
		}
	}
	ev.Reason = f.scrub(ev.Reason)
	f.c.record(f.env, ev)
}

// encodedAs is the first coding of a response's Content-Encoding other
// than identity, or "" when its body is as sent. Every value of the
// header and every comma-separated coding in each is read: the transport
// decodes gzip only when the first value is exactly "gzip", so
// "identity" then "gzip" (or "identity, gzip") arrives still compressed,
// and reading the first value alone would let it through unscrubbed.
func encodedAs(h http.Header) string {
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return c
			}
		}
	}
	return ""
}

// checkResponseHeaders bounds a response's headers as a request's are.
func checkResponseHeaders(h http.Header) error {
	n, size := 0, 0
	for k, vs := range h {
		for _, v := range vs {
			n++
			size += len(k) + len(v)
		}
	}
	switch {
	case n > abi.MaxHTTPHeaders:
		return fmt.Errorf("the response has %d headers; the limit is %d (abi.MaxHTTPHeaders)", n, abi.MaxHTTPHeaders)
	case size > abi.MaxHTTPHeaderBytes:
		return fmt.Errorf("the response's headers are %d bytes; the limit is %d (abi.MaxHTTPHeaderBytes)", size, abi.MaxHTTPHeaderBytes)
	}
	return nil
}

// holdsSecret reports whether s holds an injected value (ASCII case
// ignored).
func (f *fetch) holdsSecret(s string) bool {
	for _, v := range f.used {
		if indexFold([]byte(s), v, 0) >= 0 {
			return true
		}
	}
	return false
}

// scrubErr is e with every injected value scrubbed from its message.
func (f *fetch) scrubErr(e *abi.Error) *abi.Error {
	if len(f.used) == 0 {
		return e
	}
	return &abi.Error{Code: e.Code, Message: f.scrub(e.Message)}
}

func (f *fetch) scrub(s string) string {
	if len(f.used) == 0 {
		return s
	}
	return string(f.scrubBytes([]byte(s)))
}

// scrubBytes replaces every occurrence of an injected value in b (ASCII
// case ignored: a value reflected into a header name or a host is lower
// case by then) with abi.SecretPlaceholder. Values are at least as long as
// the placeholder, so the result is never longer than b.
func (f *fetch) scrubBytes(b []byte) []byte {
	if len(f.used) == 0 {
		return b
	}
	vals := slices.Clone(f.used)
	slices.SortFunc(vals, func(a, b []byte) int { return len(b) - len(a) }) // the longer of two overlapping values first
	for _, v := range vals {
		if len(v) == 0 || indexFold(b, v, 0) < 0 {
			continue
		}
		var out []byte
		last := 0
		for i := indexFold(b, v, 0); i >= 0; i = indexFold(b, v, last) {
			out = append(out, b[last:i]...)
			out = append(out, abi.SecretPlaceholder...)
			last = i + len(v)
		}
		b = append(out, b[last:]...)
	}
	return b
}

// indexFold is the index of the first occurrence of v in b at or after
// from, ASCII letters compared without case; -1 when there is none.
func indexFold(b, v []byte, from int) int {
	if len(v) == 0 {
		return -1
	}
	first := lowerASCII(v[0])
	for i := from; i+len(v) <= len(b); i++ {
		if lowerASCII(b[i]) != first {
			continue
		}
		j := 1
		for j < len(v) && lowerASCII(b[i+j]) == lowerASCII(v[j]) {
			j++
		}
		if j == len(v) {
			return i
		}
	}
	return -1
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// redactURL is a URL's scheme and host for messages: its user
// information, path and query may carry secrets.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid URL)"
	}
	return u.Scheme + "://" + u.Host
}

// readBody reads a response body of at most limit bytes, holding what it
// reads in b's budget (nil: none): the announced length (Content-Length)
// is refused at once when it is over, and otherwise read into a buffer of
// exactly that size; a body of unknown length grows its buffer within the
// budget. It returns the body and the bytes it holds, which the caller
// releases.
func readBody(r io.Reader, announced, limit int64, b *budget.Budget, what string, tooLarge func(n int64) error) ([]byte, int64, error) {
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
