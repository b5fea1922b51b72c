package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// A module's own HTTP routes (moat.yaml routes:), served at
//
//	METHOD /m/{org}/{module}/{path}
//
// and at the root of the host name routes.hosts gives the module. Each
// request is matched to the one route of the module's manifest its
// method and path fit, then let in by the route's auth:
//
//   - key: an API key of the module's organization (another
//     organization's key gets the 404 of a module that does not exist),
//     rate-limited as every keyed request is; the action runs as the
//     key's principal.
//   - public: anyone; the action runs as policy.RoutePrincipal (the
//     service user with the role public). A request without a key takes
//     a token of its source address's bucket for the module first, then
//     one of the route's: a flood from one address is refused while the
//     others are served, and the route as a whole is bounded.
//   - webhook: the signature of the route's scheme, checked under the
//     organization's secret (the vault) over the body, then the replay
//     check; the action runs as the service user with the role webhook.
//
// The body is bounded by the route's max_body (and limits.max_request_bytes)
// before it is read: a Content-Length over it is refused unread, and a
// body that grows past it is refused before the action runs. The action
// gets an abi.RouteRequest and answers with an abi.RouteResponse, or with
// plain output (200 text/plain). Every call past the address bucket is
// audited (kind route) with the route, the principal (the service user
// and the source address for public and webhook routes), the status and
// the decision; refusals by the address bucket are counted, not audited,
// so that a flood cannot write the trail.

// The echo routes of module routes: with a path, and the module's root
// without its slash.
const (
	moduleRoute     = "/m/:org/:module/*"
	moduleRouteRoot = "/m/:org/:module"
)

// routeMethods are the methods a module's route may serve
// (policy.Route).
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// isModuleRoute reports whether route serves a module's own routes.
func isModuleRoute(route string) bool { return route == moduleRoute || route == moduleRouteRoot }

// routeHTMLCSP is the policy of a document a module's route answers
// (HTML, XHTML, SVG, XML): the sandbox without allow-same-origin gives it
// an opaque origin, so that its script reads nothing of the origin it
// shares with the console and the API (the console's key, other
// modules' pages) and its requests carry Origin: null, which the front
// door refuses. It may run its own script and style, inline or from the
// module's routes, and submit forms there.
const routeHTMLCSP = "sandbox allow-scripts allow-forms; default-src 'self' data:; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// maxRouteQueryBytes bounds a route request's query.
const maxRouteQueryBytes = 8 << 10

// RouteJSON is a route of a module as GET /v1/modules/{name} and moat
// inspect --json show it: what it serves, the action, who may call it.
type RouteJSON struct {
	Route  string `json:"route"`
	Action string `json:"action"`
	Auth   string `json:"auth"`
	Scheme string `json:"scheme,omitempty"` // a webhook's
}

// RoutesOf lists the routes of mf (nil when it has none).
func RoutesOf(mf *policy.Manifest) []RouteJSON {
	if mf == nil {
		return nil
	}
	var out []RouteJSON
	for i := range mf.Routes {
		r := &mf.Routes[i]
		rj := RouteJSON{Route: r.Route, Action: r.Action, Auth: string(r.AuthMode())}
		if r.Webhook != nil {
			rj.Scheme = r.Webhook.Scheme
		}
		out = append(out, rj)
	}
	return out
}

// routeCall is what the audit event of one call says.
type routeCall struct {
	org, module string
	route       *policy.Route
	principal   policy.Principal
	remote      string
	reason      string // why it was refused, when the caller is told less
}

// serveRoute serves a request to a module's route.
func (s *Server) serveRoute(c echo.Context) (err error) {
	req := c.Request()
	ctx := req.Context()
	start := time.Now()
	org, module, sub, ok := splitModulePath(req.URL.EscapedPath())
	if !ok {
		return problem(http.StatusNotFound, "not_found", "a module's routes are under /m/{org}/{module}/")
	}
	call := &routeCall{org: org, module: module, remote: s.remoteSource(req)}
	// A request without a valid key pays its source address's token
	// before the server does anything for it (a module's load included):
	// an Authorization header alone, made up, buys nothing.
	takeAddr := func() error {
		if ok, wait, err := s.addrRate.take(ctx, org+"/"+module+"/"+call.remote, start); err != nil {
			return rateUnavailable(err)
		} else if !ok {
			s.metrics.denials.WithLabelValues(string(abi.CodeRateLimited)).Inc()
			return rateLimited("source address", wait)
		}
		return nil
	}
	addrTaken := false
	if !s.validKey(ctx, req) {
		if err := takeAddr(); err != nil {
			return err
		}
		addrTaken = true
	}
	noModule := problem(http.StatusNotFound, "not_found", "no module %q in organization %s serves routes here", module, org)
	e, err := s.modules.ensure(ctx, org, module)
	if e == nil && err == nil {
		return noModule
	}
	if err != nil {
		return s.moduleProblem(org, module, correlationID(c), e, err)
	}
	m := e.mod.Manifest()
	if m == nil || len(m.Routes) == 0 {
		return noModule
	}
	rt, params, allowed := m.MatchRoute(req.Method, sub)
	if rt == nil {
		if len(allowed) > 0 {
			p := problem(http.StatusMethodNotAllowed, "method_not_allowed", "%s is served for %s only", truncate(sub, 256), strings.Join(allowed, ", "))
			p.header = http.Header{"Allow": {strings.Join(allowed, ", ")}}
			return p
		}
		return problem(http.StatusNotFound, "not_found", "module %s has no route %s %s", module, req.Method, truncate(sub, 256))
	}
	call.route = rt
	defer func() { s.auditRoute(c, call, start, err) }()

	auth := rt.AuthMode()
	if auth == policy.RouteKey {
		if err := s.authenticate(func(echo.Context) error { return nil })(c); err != nil {
			call.reason = "no valid API key"
			return err
		}
		if p := principalOf(c); p.Org != org {
			call.reason = "an API key of another organization"
			return noModule
		}
		call.principal = principalOf(c)
	} else {
		call.principal = policy.RoutePrincipal(org, auth)
		stateOf(c).principal = call.principal
		// A key does not lift a public route's bounds: it is not what
		// lets the request in.
		if !addrTaken {
			if err := takeAddr(); err != nil {
				return err
			}
		}
		if ok, wait, err := s.routeRate.take(ctx, routeBucket(org, module, rt.Route), start); err != nil {
			return rateUnavailable(err)
		} else if !ok {
			return rateLimited("route", wait)
		}
	}

	body, err := routeBody(c, min(rt.BodyLimit(), int64(s.cfg.Limits.MaxRequestBytes)))
	if err != nil {
		return err
	}
	if auth == policy.RouteWebhook {
		if err := s.checkWebhook(c, call, body); err != nil {
			return err
		}
	}
	input, err := routeInput(req, rt, sub, params, body, call)
	if err != nil {
		return err
	}

	release, ref := s.invocations.acquire(ctx, org)
	if ref != nil {
		s.metrics.admissionRefusals.WithLabelValues(s.invocations.kind, ref.knob(s.invocations)).Inc()
		return ref.problem(s.invocations, org)
	}
	defer release()
	ctx = audit.WithOrigin(ctx, "route", rt.Route)
	res, err := e.mod.Invoke(ctx, host.Request{Action: rt.Action, Input: input, Principal: call.principal, CorrelationID: correlationID(c)})
	s.metrics.observeInvocation(org, module, rt.Action, start, err)
	if err != nil {
		return fromHostError(err)
	}
	return s.writeRouteResponse(c, org, res.Output)
}

// validKey reports whether the request carries a valid API key (of any
// organization), without taking from its buckets: authenticate does that
// for a key route.
func (s *Server) validKey(ctx context.Context, req *http.Request) bool {
	scheme, token, ok := strings.Cut(req.Header.Get(echo.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	_, err := s.auth.principal(ctx, strings.TrimSpace(token))
	return err == nil
}

// routeBucket is the key of a route's bucket: a hash, so that it fits
// the store's bound on a bucket's key whatever the names' lengths.
func routeBucket(org, module, route string) string {
	sum := sha256.Sum256([]byte(org + "\x00" + module + "\x00" + route))
	return hex.EncodeToString(sum[:16])
}

// splitModulePath splits an escaped /m/{org}/{module}{/path} into its
// parts; path is "/" at the module's root.
func splitModulePath(p string) (org, module, sub string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/m/")
	if !ok {
		return "", "", "", false
	}
	org, rest, _ = strings.Cut(rest, "/")
	module, sub, _ = strings.Cut(rest, "/")
	sub = "/" + sub
	if (policy.Principal{User: "u", Org: org}).Validate() != nil || host.ValidateModuleName(module) != nil {
		return "", "", "", false
	}
	return org, module, sub, true
}

// remoteSource is the source address of a request as its buckets count
// it: the client's IP address (the peer's, or behind a trusted proxy the
// one it names: clientAddr), an IPv6 one's /64.
func (s *Server) remoteSource(req *http.Request) string {
	a := s.cfg.HTTP.clientAddr(req)
	if !a.IsValid() {
		return "unknown"
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// routeBody reads the request's body up to limit bytes: a declared
// length over it is refused before a byte is read, a body growing past it
// as soon as it does; either way before the action runs.
func routeBody(c echo.Context, limit int64) ([]byte, error) {
	req := c.Request()
	tooLarge := problem(http.StatusRequestEntityTooLarge, string(abi.CodeTooLarge),
		"the request body is over this route's limit of %d bytes (its max_body in moat.yaml, at most limits.max_request_bytes of the server)", limit)
	if req.ContentLength > limit {
		return nil, tooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, limit))
	var mbe *http.MaxBytesError
	var bte *bodyTimeoutError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge
	case errors.As(err, &bte):
		return nil, problem(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive within %s (http.body_timeout in the server config)", bte.timeout)
	case err != nil:
		return nil, problem(http.StatusBadRequest, "invalid_argument", "reading the request body: %v", err)
	}
	st := stateOf(c)
	st.body, st.bodyRead = b, true
	return b, nil
}

// checkWebhook verifies a webhook delivery's signature, then refuses its
// replay. The caller is told only that the signature does not verify (or
// that the delivery was seen); the audit event says why.
func (s *Server) checkWebhook(c echo.Context, call *routeCall, body []byte) error {
	ctx := c.Request().Context()
	w := call.route.Webhook
	secret, err := s.vault.Secret(ctx, call.org, w.Secret)
	if err != nil {
		call.reason = fmt.Sprintf("set the webhook's secret with moat secrets set --org %s %s: %v", call.org, w.Secret, err)
		if errors.Is(err, secrets.ErrNoKey) {
			call.reason = "the server has no secrets key (secrets_key_file or $MOAT_SECRETS_KEY), so the webhook's secret cannot be read"
		}
		p := problem(http.StatusServiceUnavailable, string(abi.CodeUnavailable), "this webhook is not configured on the server; its operator finds why in the audit trail under correlation id %s", correlationID(c))
		return p
	}
	now := time.Now()
	v, err := verifyWebhook(w, secret, c.Request().Header, body, now)
	clear(secret)
	if err != nil {
		call.reason = v.reason
		return problem(http.StatusUnauthorized, "bad_signature", "%v", err)
	}
	// The delivery takes the one token of its own bucket, which refills
	// after the replay window: on every replica (the store's bucket),
	// the second arrival within the window finds it empty.
	window := webhookReplayWindow(w)
	ok, _, err := s.store.RateTake(ctx, webhookReplayKey(call.org, call.module, call.route.Route, v.replay), 1/window.Seconds(), 1, now)
	if err != nil {
		return rateUnavailable(err)
	}
	if !ok {
		call.reason = "a replay: this delivery was received within the last " + window.String()
		return problem(http.StatusConflict, "replayed", "this webhook delivery was already received; a sender retrying sends a new timestamp and signature")
	}
	return nil
}

// routeInput is the abi.RouteRequest the action gets, in JSON.
func routeInput(req *http.Request, rt *policy.Route, sub string, params map[string]string, body []byte, call *routeCall) ([]byte, error) {
	in := abi.RouteRequest{Moat: abi.RouteRequestKind, Route: rt.Route, Auth: string(rt.AuthMode()), Method: req.Method, Path: sub, Params: params}
	if rt.AuthMode() != policy.RouteKey {
		in.Remote = call.remote
	}
	if q := req.URL.RawQuery; q != "" {
		if len(q) > maxRouteQueryBytes {
			return nil, problem(http.StatusRequestURITooLong, "too_large", "the query is %d bytes; a route's is at most %d", len(q), maxRouteQueryBytes)
		}
		v, err := url.ParseQuery(q)
		if err != nil {
			return nil, problem(http.StatusBadRequest, "invalid_argument", "the query does not parse: %v", err)
		}
		in.Query = v
	}
	for _, name := range abi.RouteRequestHeaders {
		vs := req.Header.Values(name)
		if len(vs) == 0 {
			continue
		}
		v := strings.Join(vs, ", ")
		if len(v) > abi.MaxRouteHeaderBytes {
			return nil, problem(http.StatusRequestHeaderFieldsTooLarge, "too_large", "the %s header is %d bytes; a route passes at most %d", name, len(v), abi.MaxRouteHeaderBytes)
		}
		if in.Headers == nil {
			in.Headers = map[string]string{}
		}
		in.Headers[name] = v
	}
	if utf8.Valid(body) {
		in.Body = string(body)
	} else {
		in.BodyBase64 = base64.StdEncoding.EncodeToString(body)
	}
	return json.Marshal(in)
}

// errBadResponse is an action's response document the server will not
// send: the module's failure (502), saying what to fix.
func errBadResponse(format string, args ...any) *Problem {
	return problem(http.StatusBadGateway, "bad_response", "the action's response: "+format, args...)
}

// writeRouteResponse answers with the action's output: its
// abi.RouteResponse when the output is one, else the output itself, 200
// as text/plain (UTF-8) or application/octet-stream.
func (s *Server) writeRouteResponse(c echo.Context, org string, out []byte) error {
	r, isResponse, err := parseRouteResponse(out)
	if err != nil {
		return err
	}
	w := c.Response()
	h := w.Header()
	if !isResponse {
		ct := echo.MIMEOctetStream
		if utf8.Valid(out) {
			ct = "text/plain; charset=utf-8"
		}
		h.Set(echo.HeaderContentType, ct)
		w.WriteHeader(http.StatusOK)
		_, err := w.Write(out)
		return err
	}
	var body io.Reader
	switch {
	case r.Media != "":
		if !store.ValidMediaID(r.Media) {
			return errBadResponse("media %q is not a media item's id", truncate(r.Media, 64))
		}
		it, rd, err := s.store.MediaOpen(c.Request().Context(), org, r.Media)
		if errors.Is(err, store.ErrMediaNotFound) {
			return errBadResponse("media %s is not an item of organization %s", r.Media, org)
		}
		if err != nil {
			return fromHostError(err)
		}
		defer rd.Close()
		r.ContentType, body = it.Type, rd
	case r.BodyBase64 != "":
		b, err := base64.StdEncoding.DecodeString(r.BodyBase64)
		if err != nil {
			return errBadResponse("body_base64 is not standard base64: %v", err)
		}
		body = bytes.NewReader(b)
	default:
		body = strings.NewReader(r.Body)
	}
	for name, v := range r.Headers {
		h.Set(name, v)
	}
	h.Set(echo.HeaderContentType, r.ContentType)
	if rendersAsDocument(r.ContentType) {
		h.Set("Content-Security-Policy", routeHTMLCSP)
	}
	w.WriteHeader(r.Status)
	if !bodyAllowed(r.Status) {
		return nil
	}
	_, err = io.Copy(w, body)
	return err
}

// parseRouteResponse reads an action's output as an abi.RouteResponse,
// when it is one (a JSON object whose "moat" is "http.response"), and
// checks it: status, content type, headers from the allowlist, one body.
func parseRouteResponse(out []byte) (abi.RouteResponse, bool, error) {
	var r abi.RouteResponse
	trimmed := bytes.TrimLeft(out, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' || !bytes.Contains(out, []byte(abi.RouteResponseKind)) {
		return r, false, nil
	}
	d := json.NewDecoder(bytes.NewReader(out))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil || r.Moat != abi.RouteResponseKind {
		var probe struct {
			Moat string `json:"moat"`
		}
		if json.Unmarshal(out, &probe) == nil && probe.Moat == abi.RouteResponseKind {
			return r, false, errBadResponse("it does not decode: %v", err)
		}
		return r, false, nil // plain output that happens to be JSON
	}
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	if r.Status < 200 || r.Status > 599 {
		return r, false, errBadResponse("status %d: give 200 to 599", r.Status)
	}
	n := 0
	for _, set := range []bool{r.Body != "", r.BodyBase64 != "", r.Media != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return r, false, errBadResponse("give one of body, body_base64 and media")
	}
	if r.Media != "" && r.ContentType != "" {
		return r, false, errBadResponse("a media item is served with its own type; leave content_type out")
	}
	if r.Media == "" {
		if r.ContentType == "" {
			r.ContentType = "text/plain; charset=utf-8"
		}
		if len(r.ContentType) > 256 || !validHeaderValue(r.ContentType) {
			return r, false, errBadResponse("content_type %q is not a header value", truncate(r.ContentType, 64))
		}
		if _, _, err := mime.ParseMediaType(r.ContentType); err != nil {
			return r, false, errBadResponse("content_type %q is not a media type like application/json: %v", truncate(r.ContentType, 64), err)
		}
	}
	if len(r.Headers) > abi.MaxRouteHeaders {
		return r, false, errBadResponse("%d headers; the most is %d", len(r.Headers), abi.MaxRouteHeaders)
	}
	for name, v := range r.Headers {
		if !slices.Contains(abi.RouteResponseHeaders, strings.ToLower(name)) {
			return r, false, errBadResponse("the header %q is not one a route may set (%s); Set-Cookie never is: a module shares its origin with the others",
				truncate(name, 64), strings.Join(abi.RouteResponseHeaders, ", "))
		}
		if len(v) > abi.MaxRouteHeaderBytes || !validHeaderValue(v) {
			return r, false, errBadResponse("the value of %s is not a header value of at most %d bytes without control characters", name, abi.MaxRouteHeaderBytes)
		}
	}
	return r, true, nil
}

// bodyAllowed reports whether a response of status may have a body
// (204 and 304 may not).
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}

// validHeaderValue reports whether v may be sent as a header value:
// printable, no CR, LF or other control characters.
func validHeaderValue(v string) bool {
	return !strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f })
}

// rendersAsDocument reports whether a browser may render a response of
// content type ct as a document that runs script.
func rendersAsDocument(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return true
	}
	switch mt {
	case "text/html", "application/xhtml+xml", "image/svg+xml", "text/xml", "application/xml", "text/xsl", "application/rss+xml", "application/atom+xml":
		return true
	}
	return strings.HasSuffix(mt, "+xml")
}

// auditRoute records a call through a route: allowed when the action
// ran and answered, denied otherwise, with the route, the principal, the
// source address and the status.
func (s *Server) auditRoute(c echo.Context, call *routeCall, start time.Time, err error) {
	status := c.Response().Status
	decision, code, reason := audit.Allow, "", call.reason
	if err != nil {
		decision = audit.Deny
		var p *Problem
		if errors.As(err, &p) {
			status, code = p.Status, p.Code
			if reason == "" {
				reason = p.Detail
			}
		} else {
			status, code = http.StatusInternalServerError, string(abi.CodeOf(err))
			if reason == "" {
				reason = err.Error()
			}
		}
	}
	auth := call.route.AuthMode()
	attrs := map[string]string{"route": call.route.Route, "auth": string(auth), "status": strconv.Itoa(status), "remote": call.remote}
	s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindRoute, Decision: decision, CorrelationID: correlationID(c),
		Module: call.module, Action: call.route.Action, User: call.principal.User, Org: call.org, Rule: "routes: " + call.route.Route,
		Reason: clipAttr(reason), Code: code, DurationNS: time.Since(start).Nanoseconds(), Attrs: attrs})
}

// moduleHosts serves the hosts routes.hosts names: their requests are
// the module's routes, at the root (a Pre middleware: before routing).
func (s *Server) moduleHosts(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if org, module, ok := s.cfg.Routes.moduleHost(req.Host); ok {
			raw := "/m/" + org + "/" + module + req.URL.EscapedPath()
			if p, err := url.PathUnescape(raw); err == nil {
				req.URL.Path, req.URL.RawPath = p, raw
			}
		}
		return next(c)
	}
}
