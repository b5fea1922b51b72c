package server

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/tracing"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server/internal/mcpserver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ctxState is the key of the request's *reqState on the echo context.
const ctxState = "moat.request"

// reqState is what the middleware learns of one request: its correlation
// id, then who sent it, then its body once admission has read it. It is
// one value on the echo context, made once per request, where a value per
// key cost an allocation each (a principal boxed in an interface, too).
type reqState struct {
	correlation string
	principal   policy.Principal
	keyID       string
	keyScopes   []string // the key's scopes (none: all its roles allow)
	body        []byte   // the request body, read (and bounded) by admit
	bodyRead    bool
	// pending is the request's body while it may be unread (bodyDeadline):
	// a response sent before its end closes the connection (beforeWrite).
	pending *deadlineBody
	// hdr backs the response header values the middleware and the
	// invoke handler set, so that setting them costs no allocation each
	// (see frontDoor): [0] the correlation id, [1:6] the front door's,
	// [6:8] an output's disposition and type.
	hdr [8]string
}

// stateOf returns the request's state; a context observe has not seen
// (a handler called directly, in a test) gets an empty one.
func stateOf(c echo.Context) *reqState {
	if st, ok := c.Get(ctxState).(*reqState); ok {
		return st
	}
	st := &reqState{}
	c.Set(ctxState, st)
	return st
}

// HeaderRequestID carries the correlation id: taken from the request when
// the client sends one, made up otherwise, and always returned.
const HeaderRequestID = "X-Request-Id"

func (s *Server) router() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.Pre(s.moduleHosts)
	e.Use(s.observe, s.frontDoor)

	auth := s.authenticate
	invocation, run := s.admit(s.invocations), s.admit(s.execs)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", s.metrics.handler, s.metricsAuth)
	e.GET("/v1/openapi.json", s.openAPI)

	e.GET("/v1/whoami", s.whoami, auth)
	e.GET("/v1/modules", s.listModules, auth)
	e.POST("/v1/modules", s.uploadModule, auth)
	e.GET("/v1/modules/:name", s.getModule, auth)
	e.DELETE("/v1/modules/:name", s.deleteModule, auth)
	e.GET("/v1/modules/:name/versions", s.moduleVersions, auth)
	e.POST("/v1/modules/:name/versions/:digest/restore", s.restoreVersion, auth)
	e.POST("/v1/modules/:name/actions/:action", s.invoke, auth, s.awaitModule, invocation)
	e.GET("/v1/pages", s.listPages, auth)
	e.GET(pageFileRoute, s.pageFileSigned) // a signed URL, no key: pages.go
	e.GET("/v1/modules/:name/pages", s.modulePages, auth)
	e.GET("/v1/modules/:name/pages/:page/files/:file", s.pageFileByKey, auth)
	e.POST("/v1/modules/:name/pages/:page/url", s.pageURL, auth)
	e.POST("/v1/modules/:name/pages/:page/actions/:action", s.pageInvoke, auth, s.awaitModule, invocation)
	e.GET("/v1/confirmations", s.pendingConfirmations, auth)
	e.POST("/v1/confirmations/:token", s.confirm, auth, invocation)
	e.GET("/v1/confirmations/:token", s.confirmationStatus, auth)
	e.POST("/v1/confirmations/id/:id/:decision", s.decideConfirmation, auth, invocation)
	e.GET("/v1/audit", s.auditQuery, auth)
	e.GET("/v1/tasks", s.listTasks, auth)
	e.GET("/v1/tasks/:id", s.getTask, auth)
	e.GET("/v1/ai/usage", s.aiUsage, auth)
	e.GET("/v1/media", s.listMedia, auth)
	e.GET(mediaRoute, s.getMedia) // a key (authenticate) or a signed URL: media.go
	e.POST("/v1/media/:id/url", s.mediaURL, auth)
	e.DELETE(mediaRoute, s.deleteMedia, auth)
	e.GET("/v1/languages", s.listLanguages, auth)
	e.POST("/v1/runs", s.runs, auth, s.mayExec, run)
	s.sessionRoutes(e, auth, run)
	s.mcpRoutes(e)
	e.GET("/v1/admin/secrets/:org", s.listSecrets, auth)
	e.PUT("/v1/admin/secrets/:org/:name", s.putSecret, auth)
	e.DELETE("/v1/admin/secrets/:org/:name", s.deleteSecret, auth)
	s.keyRoutes(e, auth)

	if s.cfg.Piston.Enabled {
		p := s.cfg.Piston.Prefix
		e.GET(p+"/runtimes", s.pistonRuntimes, s.pistonGate)
		e.POST(p+"/execute", s.pistonExecute, s.pistonGate, run)
	}

	if s.cfg.Judge0.Enabled {
		s.judge0Routes(e)
	}

	// A module's own routes (routes.go): their auth is the route's.
	e.Match(routeMethods, moduleRoute, s.serveRoute)
	e.Match(routeMethods, moduleRouteRoot, s.serveRoute)

	e.GET("/", s.consoleIndex)
	e.GET("/console/*", s.consoleAsset)
	return e
}

// observe gives every request its correlation id and counts it in the
// metrics.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(HeaderRequestID)
		if !validCorrelationID(id) {
			id = newID()
		}
		st := &reqState{correlation: id}
		c.Set(ctxState, st)
		st.hdr[0] = id
		c.Response().Header()[HeaderRequestID] = st.hdr[0:1:1]
		start := time.Now()
		var span trace.Span
		if tracing.On() && !probe(c.Path()) {
			// The probes and scrapes every few seconds make no traces.
			span = s.startRequestSpan(c, id)
		}
		s.metrics.inflight.Inc()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		s.metrics.inflight.Dec()
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		status := c.Response().Status
		took := time.Since(start)
		if span != nil {
			endRequestSpan(span, c.Request().Method, route, status)
		}
		s.metrics.observeRequest(route, methodLabel(c.Request().Method), statusClass(status), took)
		// The access log: a line per request at info, so an operator
		// sees the traffic at the default level; the probes and scrapes
		// a load balancer and Prometheus send every few seconds at
		// debug. The path is without its query, which may carry a
		// signed media URL's signature or a search term.
		level := slog.LevelInfo
		if probe(route) && status < 400 {
			level = slog.LevelDebug
		}
		if s.log.Enabled(c.Request().Context(), level) {
			p := st.principal
			s.log.LogAttrs(c.Request().Context(), level, "http", slog.String("method", c.Request().Method),
				slog.String("path", c.Request().URL.Path), slog.Int("status", status), slog.Int64("bytes", c.Response().Size),
				slog.Duration("took", took), slog.String("correlation_id", id), slog.String("user", p.User), slog.String("org", p.Org),
				slog.String("remote", c.Request().RemoteAddr))
		}
		return nil
	}
}

// startRequestSpan opens the request's server span (tracing on only):
// under the caller's own trace when it sent a traceparent, with the
// correlation id in the context for every span below it. Its attributes
// are the method, and at its end the route's pattern and the status:
// never the path (a signed URL's, a module route's own segments), a
// header or the body.
func (s *Server) startRequestSpan(c echo.Context, id string) trace.Span {
	r := c.Request()
	ctx := tracing.WithCorrelation(tracing.Extract(r.Context(), r.Header), id)
	ctx, span := tracing.Start(ctx, "HTTP "+methodLabel(r.Method), trace.SpanKindServer,
		attribute.String("http.request.method", methodLabel(r.Method)))
	c.SetRequest(r.WithContext(ctx))
	return span
}

func endRequestSpan(span trace.Span, method, route string, status int) {
	span.SetName(methodLabel(method) + " " + route)
	span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, statusClass(status))
	}
	span.End()
}

// probe says whether route is one a load balancer or a scraper calls
// every few seconds.
func probe(route string) bool {
	return route == "/healthz" || route == "/readyz" || route == "/metrics"
}

// methodLabel is the method as a metric label: the methods the routes
// use, or "other", so that made-up methods make no series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions, http.MethodPatch:
		return m
	}
	return "other"
}

func statusClass(code int) string {
	switch code / 100 {
	case 1:
		return "1xx"
	case 2:
		return "2xx"
	case 3:
		return "3xx"
	case 4:
		return "4xx"
	case 5:
		return "5xx"
	}
	return string(rune('0'+code/100)) + "xx"
}

// validCorrelationID accepts 1–128 characters that are safe in logs and
// headers; anything else is replaced by a fresh id rather than refused.
func validCorrelationID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:", r)) {
			return false
		}
	}
	return true
}

func correlationID(c echo.Context) string { return stateOf(c).correlation }

func principalOf(c echo.Context) policy.Principal { return stateOf(c).principal }

// authenticate resolves the bearer token to a principal, then takes a
// token from the key's and the organization's rate buckets.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header.Get(echo.HeaderAuthorization)
		scheme, token, ok := strings.Cut(h, " ")
		if h == "" {
			return problem(http.StatusUnauthorized, "unauthenticated", "send an API key as Authorization: Bearer <key>; create one with `moat keys create --org ORG --user USER`")
		}
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return problem(http.StatusUnauthorized, "unauthenticated", "the Authorization header must be Bearer <key>, not %s", scheme)
		}
		key, err := s.auth.principal(c.Request().Context(), strings.TrimSpace(token))
		if errors.Is(err, errBadKey) {
			return problem(http.StatusUnauthorized, "unauthenticated", "%v; `moat keys list` shows the valid keys", err)
		}
		if errors.Is(err, errExpiredKey) {
			return problem(http.StatusUnauthorized, "unauthenticated", "%v", err)
		}
		if err != nil {
			return err
		}
		if err := s.checkScope(c, key); err != nil {
			return err
		}
		now := time.Now()
		s.auth.use(key.ID, s.cfg.HTTP.clientAddr(c.Request()).String(), now)
		ctx := c.Request().Context()
		// A request /mcp makes in process for an MCP request that already
		// took this key's token is not charged again: one token per MCP
		// request (mcpserver.Charged; a context value, never a header).
		if k := mcpserver.Charged(ctx); k == "" || k != strings.TrimSpace(token) {
			if ok, wait, err := s.keyRate.take(ctx, key.ID, now); err != nil {
				return rateUnavailable(err)
			} else if !ok {
				return rateLimited("API key", wait)
			}
			if ok, wait, err := s.orgRate.take(ctx, key.Org, now); err != nil {
				s.keyRate.give(key.ID)
				return rateUnavailable(err)
			} else if !ok {
				s.keyRate.give(key.ID)
				return rateLimited("organization", wait)
			}
		}
		st := stateOf(c)
		st.principal, st.keyID, st.keyScopes = policy.Principal{User: key.User, Org: key.Org, Roles: key.Roles}, key.ID, key.Scopes
		if tool := c.Request().Header.Get(mcpserver.HeaderTool); tool != "" {
			err := next(c)
			s.auditMCP(c, tool, err)
			return err
		}
		return next(c)
	}
}

// readBody reads the request body up to limit bytes; a longer body is a
// 413 naming the limit and how to raise it.
func readBody(c echo.Context, limit int64, setting string) ([]byte, error) {
	if st := stateOf(c); st.bodyRead {
		// admit read it, under the same limit (limits.max_request_bytes):
		// every route that reads a body after admission reads it whole.
		if int64(len(st.body)) > limit {
			return nil, problem(http.StatusRequestEntityTooLarge, "too_large", "the request body is over the limit of %d bytes (%s in the server config)", limit, setting)
		}
		return st.body, nil
	}
	r := http.MaxBytesReader(c.Response(), c.Request().Body, limit)
	b, err := io.ReadAll(r)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, problem(http.StatusRequestEntityTooLarge, "too_large", "the request body is over the limit of %d bytes (%s in the server config)", limit, setting)
	}
	var bte *bodyTimeoutError
	if errors.As(err, &bte) {
		return nil, problem(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive within %s (http.body_timeout in the server config)", bte.timeout)
	}
	if err != nil {
		return nil, problem(http.StatusBadRequest, "invalid_argument", "reading the request body: %v", err)
	}
	return b, nil
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is 200 when the server takes traffic: modules loaded, store
// readable, not shutting down; its body says which kernel layers and
// languages this replica runs without (readiness.go).
func (s *Server) readyz(c echo.Context) error {
	if !s.ready.Load() {
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "starting or shutting down"})
	}
	if _, err := s.store.Modules(c.Request().Context(), "-"); err != nil {
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "store: " + err.Error()})
	}
	return c.JSON(http.StatusOK, s.readyBody())
}

func (s *Server) whoami(c echo.Context) error {
	p := principalOf(c)
	roles := p.Roles
	if roles == nil {
		roles = []string{}
	}
	// may_run_code is what MCP lists run_code and the session tools by:
	// the profile's exec_roles and the key's scopes, the two checks the
	// code-execution routes make.
	scoped, _ := scopeAllows(stateOf(c).keyScopes, routeFamily{scope: ScopeRun})
	// may_approve is what the console shows the approvers' list by:
	// confirm.approve, with a key the approve route admits (no scopes).
	unscoped, _ := scopeAllows(stateOf(c).keyScopes, routeFamily{})
	mayApprove, _, _ := s.holds(p, PermConfirmApprove)
	return c.JSON(http.StatusOK, map[string]any{"user": p.User, "org": p.Org, "roles": roles, "key_id": stateOf(c).keyID,
		"may_run_code": scoped && s.hostFor(p.Org).Profile().AuthorizeExec(p) == nil, "may_approve": unscoped && mayApprove})
}

// mayExec admits a request of the code-execution routes (/v1/runs, the
// sessions and E2B's sandboxes) from a principal the profile's exec_roles
// allow: policy.Profile.AuthorizeExec, the rule that also decides whether
// MCP lists run_code and the session tools (whoami's may_run_code).
func (s *Server) mayExec(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p := principalOf(c)
		if err := s.hostFor(p.Org).Profile().AuthorizeExec(p); err != nil {
			s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindDecision, Decision: audit.Deny, CorrelationID: correlationID(c),
				User: p.User, Org: p.Org, Rule: "exec_roles", Reason: err.Error(), Code: "denied"})
			return problem(http.StatusForbidden, "denied", "%v; an operator gives your key one of those roles (`moat keys create --role`)", err)
		}
		return next(c)
	}
}
