package server

// E2B's control plane: what an E2B SDK sends to its apiUrl, on moat.
//
// An agent written for E2B's stock SDKs (npm e2b, @e2b/code-interpreter,
// and their Python twins) reaches moat with two settings, apiUrl =
// http://HOST:PORT/e2b and sandboxUrl = http://HOST:PORT/e2b/sandbox
// (E2B_API_URL, E2B_SANDBOX_URL), and its moat API key as the E2B API
// key: the SDK sends it as X-API-Key, and it is authenticated exactly as
// Authorization: Bearer is (the same keys, the same rate buckets), so an
// E2B client is a moat principal like any other.
//
// A sandbox is a session (package server/sessions): its id, owner,
// workspace, environment, metadata and lifetime are the session's, and
// every step is the session's, audited. What E2B's API names and moat
// has no use for is mapped or refused, never silently half-done:
//
//   - templateID: moat's sandbox is one shape, so "base",
//     "code-interpreter-v1" (and "code-interpreter", or none) all name
//     it; its languages come from the code contexts run in it. Another
//     template is refused (400), naming the ones there are.
//   - network rules, volume mounts and MCP gateways are not offered
//     (400): the organization's profile decides egress and limits, and
//     a sandbox asking to narrow them would be trusting a rule moat does
//     not apply. allow_internet_access is the profile's too and is
//     ignored, as autoPause is (a session ends at its timeout).
//   - pause and fork answer 501 until the sessions package offers them
//     (e2bPause, e2bFork below are where they plug in).
//
// Errors take E2B's shape, {"code": <HTTP status>, "message": ...}, so
// the SDKs raise their own NotFoundError, AuthenticationError and the
// rest; another principal's sandbox is a 404, as one that never was.

import (
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server/sessions"
)

// e2bAPIPrefix is where the control plane is served (apiUrl).
const e2bAPIPrefix = "/e2b"

// e2bEnvdVersion is the envd version moat's data plane answers as. The
// SDKs compare it to choose the protocol: ≥ 0.1.0 or Sandbox.create
// refuses the sandbox, ≥ 0.4.0 so no username is sent by default,
// ≥ 0.5.7 so uploads may be one application/octet-stream body. Features
// gated past it (file metadata 0.6.2, watch entries 0.6.3) the SDK
// refuses itself, with its own message, instead of meeting a 400 here.
const e2bEnvdVersion = "0.5.7"

// e2bTemplate is the template every sandbox reports; e2bTemplates are
// the names Sandbox.create may give for it.
const e2bTemplate = "code-interpreter-v1"

var e2bTemplates = []string{"", "base", "code-interpreter-v1", "code-interpreter"}

// e2bMaxListLimit bounds one page of GET /v2/sandboxes.
const e2bMaxListLimit = 100

// e2bError is E2B's error body.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// e2bErrors renders every refusal under /e2b — the handler's, the
// authentication's, the rate limits' — in E2B's shape, keeping the
// problem's headers (Retry-After, WWW-Authenticate).
func e2bErrors(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err == nil || c.Response().Committed {
			return err
		}
		status, msg := http.StatusInternalServerError, err.Error()
		var p *Problem
		var he *echo.HTTPError
		switch {
		case errors.As(err, &p):
			status, msg = p.Status, p.Detail
			for k, v := range p.header {
				c.Response().Header()[k] = v
			}
		case errors.As(err, &he):
			status = he.Code
			if m, ok := he.Message.(string); ok {
				msg = m
			}
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
		if h := c.Request().Header; status == http.StatusUnauthorized && h.Get("X-API-Key") == "" && h.Get(echo.HeaderAuthorization) == "" {
			// authenticate speaks of Authorization: Bearer; an E2B
			// client sets its key otherwise.
			msg = "no API key: give your moat API key as the E2B API key (E2B_API_KEY, or apiKey in the SDK's options; it is sent as X-API-Key); create one with `moat keys create --org ORG --user USER`"
		}
		return c.JSON(status, e2bError{Code: status, Message: msg})
	}
}

// e2bAPIKey lets the SDK's X-API-Key stand for Authorization: Bearer,
// which authenticate then checks as it checks every key.
func e2bAPIKey(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if k := h.Get("X-API-Key"); k != "" && h.Get(echo.HeaderAuthorization) == "" {
			h.Set(echo.HeaderAuthorization, "Bearer "+k)
		}
		return next(c)
	}
}

// e2bRoutes adds E2B's control plane under /e2b.
func (s *Server) e2bRoutes(e *echo.Echo, auth echo.MiddlewareFunc) {
	mw := []echo.MiddlewareFunc{e2bErrors, e2bAPIKey, auth}
	p := e2bAPIPrefix
	e.POST(p+"/sandboxes", s.e2bCreate, mw...)
	e.POST(p+"/v2/sandboxes", s.e2bCreate, mw...)
	e.GET(p+"/sandboxes", s.e2bList, mw...)
	e.GET(p+"/v2/sandboxes", s.e2bList, mw...)
	e.GET(p+"/sandboxes/:id", s.e2bGet, mw...)
	e.DELETE(p+"/sandboxes/:id", s.e2bKill, mw...)
	e.POST(p+"/sandboxes/:id/timeout", s.e2bTimeout, mw...)
	e.POST(p+"/sandboxes/:id/refreshes", s.e2bRefresh, mw...)
	e.POST(p+"/v2/sandboxes/:id/connect", s.e2bConnect, mw...)
	e.POST(p+"/sandboxes/:id/connect", s.e2bConnect, mw...)
	e.POST(p+"/sandboxes/:id/pause", s.e2bPauseHandler, mw...)
	e.POST(p+"/sandboxes/:id/resume", s.e2bConnect, mw...)
	e.POST(p+"/sandboxes/:id/fork", s.e2bForkHandler, mw...)
	e.GET(p+"/health", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
}

// e2bSandboxJSON is E2B's Sandbox, SandboxDetail and ListedSandbox in
// one: what create and connect answer, and what get and list show.
type e2bSandboxJSON struct {
	TemplateID         string            `json:"templateID"`
	Alias              string            `json:"alias,omitempty"`
	SandboxID          string            `json:"sandboxID"`
	ClientID           string            `json:"clientID"`
	EnvdVersion        string            `json:"envdVersion"`
	EnvdAccessToken    string            `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string            `json:"trafficAccessToken,omitempty"`
	Domain             *string           `json:"domain"`
	StartedAt          *time.Time        `json:"startedAt,omitempty"`
	EndAt              *time.Time        `json:"endAt,omitempty"`
	State              string            `json:"state,omitempty"`
	CPUCount           int               `json:"cpuCount,omitempty"`
	MemoryMB           int               `json:"memoryMB,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
}

// e2bSandbox describes in; withToken adds the data plane's tokens (create,
// connect), which get and list leave out. The access token doubles as
// the traffic token: the code interpreter SDK sends only the latter on
// its context calls (e2b_sandbox.go takes either).
func (s *Server) e2bSandbox(in *sessions.Info, withToken bool) e2bSandboxJSON {
	owner := policy.Principal{Org: in.Org, User: in.User}
	started, end := in.StartedAt, in.ExpiresAt
	out := e2bSandboxJSON{TemplateID: e2bTemplate, SandboxID: in.ID, ClientID: "moat", EnvdVersion: e2bEnvdVersion,
		StartedAt: &started, EndAt: &end, State: in.State, Metadata: in.Metadata}
	if out.State == "" {
		out.State = sessions.StateRunning
	}
	if withToken {
		tok := s.e2bAccessToken(in.ID, owner)
		out.EnvdAccessToken, out.TrafficAccessToken = tok, tok
	}
	return out
}

// e2bCreateRequest is E2B's NewSandbox; the fields moat refuses are
// decoded only to be refused by name.
type e2bCreateRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int              `json:"timeout"` // seconds
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           bool              `json:"autoPause"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             map[string]any    `json:"network"`
	VolumeMounts        []any             `json:"volumeMounts"`
	MCP                 map[string]any    `json:"mcp"`
}

func (s *Server) e2bCreate(c echo.Context) error {
	var req e2bCreateRequest
	if err := s.e2bBody(c, &req); err != nil {
		return err
	}
	switch {
	case !slices.Contains(e2bTemplates, req.TemplateID):
		return problem(http.StatusBadRequest, "invalid_argument", "templateID: moat has no template %.64q; its sandbox is one, named base or code-interpreter-v1 (or none), running python and javascript code contexts", req.TemplateID)
	case len(req.Network) > 0:
		return problem(http.StatusBadRequest, "invalid_argument", "network: moat does not take a sandbox's network rules; the organization's profile decides its egress (leave network out)")
	case len(req.VolumeMounts) > 0:
		return problem(http.StatusBadRequest, "invalid_argument", "volumeMounts: moat does not mount volumes into a sandbox; write files with sandbox.files (leave volumeMounts out)")
	case len(req.MCP) > 0:
		return problem(http.StatusBadRequest, "invalid_argument", "mcp: moat does not run an MCP gateway in a sandbox (leave mcp out)")
	}
	ttl, err := e2bSeconds(req.Timeout)
	if err != nil {
		return err
	}
	in, err := s.sessions.Create(c.Request().Context(), principalOf(c), correlationID(c),
		sessions.CreateOptions{Timeout: ttl, Env: req.EnvVars, Metadata: req.Metadata})
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusCreated, s.e2bSandbox(in, true))
}

// e2bSeconds reads a timeout in seconds (nil: none given).
func e2bSeconds(t *int) (time.Duration, error) {
	if t == nil {
		return 0, nil
	}
	if *t < 0 || *t > int(24*365*time.Hour/time.Second) {
		return 0, problem(http.StatusBadRequest, "invalid_argument", "timeout: %d; give the seconds the sandbox is to live, 1 or more (sessions.max_lifetime bounds it)", *t)
	}
	return time.Duration(*t) * time.Second, nil
}

// e2bBody reads a small JSON body (an empty one is {}), ignoring the
// fields moat does not know: the SDKs send more than moat reads.
func (s *Server) e2bBody(c echo.Context, v any) error {
	body, err := readBody(c, int64(s.cfg.Limits.MaxRequestBytes), "limits.max_request_bytes")
	if err != nil {
		return err
	}
	if len(body) == 0 {
		return nil
	}
	if err := decodeJSONBody(body, v, false); err != nil {
		return problem(http.StatusBadRequest, "invalid_argument", "the body: %v", err)
	}
	return nil
}

// e2bList answers GET /v2/sandboxes: the caller's sandboxes, filtered by
// state and metadata as the SDK sends them, a page at a time (limit,
// nextToken; the next page's token in X-Next-Token).
func (s *Server) e2bList(c echo.Context) error {
	q := c.QueryParams()
	wantState := []string{sessions.StateRunning, sessions.StatePaused}
	if st := q.Get("state"); st != "" {
		states := strings.Split(st, ",")
		for _, x := range states {
			if x != "running" && x != "paused" {
				return problem(http.StatusBadRequest, "invalid_argument", "state: %.32q; give running, paused or both (comma-separated)", x)
			}
		}
		wantState = states
	}
	want, err := e2bMetadataFilter(q.Get("metadata"))
	if err != nil {
		return err
	}
	limit := e2bMaxListLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > e2bMaxListLimit {
			return problem(http.StatusBadRequest, "invalid_argument", "limit: %.16q; give 1 to %d", l, e2bMaxListLimit)
		}
		limit = n
	}
	all, err := s.sessionsOf(c)
	if err != nil {
		return err
	}
	all = slices.DeleteFunc(all, func(in sessions.Info) bool { return !slices.Contains(wantState, in.State) })
	slices.SortFunc(all, e2bListOrder)
	if t := q.Get("nextToken"); t != "" {
		after, ok := e2bPageAfter(t)
		if !ok {
			return problem(http.StatusBadRequest, "invalid_argument", "nextToken: not a token this API gave; give the X-Next-Token of the previous page")
		}
		// The first after the last of the previous page, by start and
		// id: a session that ended meanwhile moves nothing.
		i, _ := slices.BinarySearchFunc(all, after, e2bListOrder)
		for i < len(all) && e2bListOrder(all[i], after) <= 0 {
			i++
		}
		all = all[i:]
	}
	out := []e2bSandboxJSON{}
	for i := range all {
		if !e2bMetadataMatch(all[i].Metadata, want) {
			continue
		}
		if len(out) == limit {
			c.Response().Header().Set("X-Next-Token", e2bPageToken(all[i-1]))
			break
		}
		out = append(out, s.e2bSandbox(&all[i], false))
	}
	return c.JSON(http.StatusOK, out)
}

// e2bListOrder orders sandboxes oldest first, then by id.
func e2bListOrder(a, b sessions.Info) int {
	if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// e2bPageToken names the last sandbox of a page: its start and id, so
// the next page begins after it even if it has ended.
func e2bPageToken(last sessions.Info) string {
	return base64.RawURLEncoding.EncodeToString([]byte(last.StartedAt.UTC().Format(time.RFC3339Nano) + " " + last.ID))
}

func e2bPageAfter(token string) (sessions.Info, bool) {
	if len(token) > 256 {
		return sessions.Info{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return sessions.Info{}, false
	}
	ts, id, ok := strings.Cut(string(b), " ")
	t, err := time.Parse(time.RFC3339Nano, ts)
	if !ok || err != nil || !sessions.ValidID(id) {
		return sessions.Info{}, false
	}
	return sessions.Info{ID: id, StartedAt: t}, true
}

// e2bMetadataFilter reads the SDK's metadata filter: a query string of
// its own (k=v&k2=v2), each key and value URL-encoded once more.
func e2bMetadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	if len(raw) > 8192 {
		return nil, problem(http.StatusBadRequest, "invalid_argument", "metadata: a filter of %d bytes, at most 8192", len(raw))
	}
	vals, err := url.ParseQuery(raw)
	if err == nil && len(vals) > sessions.MaxEnvVars {
		err = errors.New("too many keys")
	}
	if err != nil {
		return nil, problem(http.StatusBadRequest, "invalid_argument", "metadata: %.64q is not key=value pairs joined by & (%v)", raw, err)
	}
	want := map[string]string{}
	for k, vs := range vals {
		kk, err1 := url.QueryUnescape(k)
		vv, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, problem(http.StatusBadRequest, "invalid_argument", "metadata: %.64q is not URL-encoded", k)
		}
		want[kk] = vv
	}
	return want, nil
}

func e2bMetadataMatch(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func (s *Server) e2bGet(c echo.Context) error {
	in, err := s.sessions.Info(principalOf(c), c.Param("id"))
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusOK, s.e2bSandbox(in, false))
}

func (s *Server) e2bKill(c echo.Context) error {
	if err := s.sessions.Kill(c.Request().Context(), principalOf(c), c.Param("id"), correlationID(c)); err != nil {
		return sessionProblem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) e2bTimeout(c echo.Context) error {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := s.e2bBody(c, &req); err != nil {
		return err
	}
	d, err := e2bSeconds(req.Timeout)
	if err != nil {
		return err
	}
	if d <= 0 {
		return problem(http.StatusBadRequest, "invalid_argument", "timeout: give the seconds from now the sandbox is to live, 1 or more")
	}
	if _, err := s.sessions.SetTimeout(c.Request().Context(), principalOf(c), c.Param("id"), correlationID(c), d); err != nil {
		return sessionProblem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

// e2bRefresh is E2B's keep-alive (POST /sandboxes/{id}/refreshes,
// {duration} seconds): the session's timeout is pushed out, never in.
func (s *Server) e2bRefresh(c echo.Context) error {
	var req struct {
		Duration *int `json:"duration"`
	}
	if err := s.e2bBody(c, &req); err != nil {
		return err
	}
	d, err := e2bSeconds(req.Duration)
	if err != nil {
		return err
	}
	if _, err := s.e2bExtend(c, d); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// e2bExtend makes the caller's sandbox live d from now if that is later
// than its end (E2B's connect and refresh never shorten a sandbox).
func (s *Server) e2bExtend(c echo.Context, d time.Duration) (*sessions.Info, error) {
	p, id := principalOf(c), c.Param("id")
	in, err := s.sessions.Info(p, id)
	if err != nil {
		return nil, sessionProblem(err)
	}
	if d > 0 && time.Now().Add(d).After(in.ExpiresAt) {
		if in, err = s.sessions.SetTimeout(c.Request().Context(), p, id, correlationID(c), d); err != nil {
			return nil, sessionProblem(err)
		}
	}
	return in, nil
}

// e2bConnect answers Sandbox.connect: a running sandbox's tokens again,
// its timeout extended to the one given if that is later; a paused one
// resumes first, here (any replica: its image is in the store).
func (s *Server) e2bConnect(c echo.Context) error {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := s.e2bBody(c, &req); err != nil {
		return err
	}
	d, err := e2bSeconds(req.Timeout)
	if err != nil {
		return err
	}
	p, id := principalOf(c), c.Param("id")
	if _, err := s.sessions.Info(p, id); err != nil {
		if _, rerr := s.sessions.Resume(c.Request().Context(), p, id, correlationID(c)); rerr != nil {
			if errors.Is(rerr, sessions.ErrNotFound) || errors.Is(rerr, fs.ErrNotExist) {
				return sessionProblem(err) // neither live nor paused
			}
			return sessionProblem(rerr)
		}
	}
	in, err := s.e2bExtend(c, d)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.e2bSandbox(in, true))
}

// e2bPause pauses the caller's sandbox id: its image in the store
// (Manager.Pause), resumed by connect on any replica.
func (s *Server) e2bPause(ctx context.Context, p policy.Principal, id, correlation string) error {
	return s.sessions.Pause(ctx, p, id, correlation)
}

// e2bFork makes count copies of the caller's sandbox id, each living
// ttl (0: the parent's default).
func (s *Server) e2bFork(ctx context.Context, p policy.Principal, id, correlation string, count int, ttl time.Duration) ([]*sessions.Info, error) {
	copies, err := s.sessions.Fork(ctx, p, id, correlation, count)
	if err != nil {
		return nil, err
	}
	out := make([]*sessions.Info, 0, len(copies))
	for i := range copies {
		in := &copies[i]
		if ttl > 0 {
			if in, err = s.sessions.SetTimeout(ctx, p, copies[i].ID, correlation, ttl); err != nil {
				return nil, err
			}
		}
		out = append(out, in)
	}
	return out, nil
}

func (s *Server) e2bPauseHandler(c echo.Context) error {
	p, id := principalOf(c), c.Param("id")
	if _, err := s.sessions.Info(p, id); err != nil {
		return sessionProblem(err)
	}
	if err := s.e2bPause(c.Request().Context(), p, id, correlationID(c)); err != nil {
		// E2B's 409 means "already paused", which the SDK answers as
		// false: a sandbox moat cannot capture (a JavaScript context, an
		// open file) is a 400 that names why.
		var se *sessions.Error
		if errors.As(err, &se) && se.Code == "conflict" {
			return problem(http.StatusBadRequest, "invalid_argument", "%s", se.Error())
		}
		return sessionProblem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

// e2bForkResult is one entry of fork's answer: a sandbox or its error.
type e2bForkResult struct {
	Sandbox *e2bSandboxJSON `json:"sandbox,omitempty"`
	Error   *e2bError       `json:"error,omitempty"`
}

func (s *Server) e2bForkHandler(c echo.Context) error {
	var req struct {
		Timeout *int `json:"timeout"`
		Count   *int `json:"count"`
	}
	if err := s.e2bBody(c, &req); err != nil {
		return err
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > 100 {
		return problem(http.StatusBadRequest, "invalid_argument", "count: %d; give 1 to 100 copies", count)
	}
	ttl, err := e2bSeconds(req.Timeout)
	if err != nil {
		return err
	}
	p, id := principalOf(c), c.Param("id")
	if _, err := s.sessions.Info(p, id); err != nil {
		return sessionProblem(err)
	}
	ins, err := s.e2bFork(c.Request().Context(), p, id, correlationID(c), count, ttl)
	if err != nil {
		return sessionProblem(err)
	}
	out := make([]e2bForkResult, 0, len(ins))
	for _, in := range ins {
		sb := s.e2bSandbox(in, true)
		out = append(out, e2bForkResult{Sandbox: &sb})
	}
	return c.JSON(http.StatusCreated, out)
}
