package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server/sessions"
)

// Sessions (package server/sessions) under /v1/sessions: sandboxes that
// keep state between requests, each its creator's (user and
// organization); another principal's request for one is answered 404,
// as for one that does not exist. The routes are a thin layer: every
// bound and check is the package's.

// SessionsConfig configures sessions (moat-server.yaml sessions:). Zero
// fields take package sessions' defaults.
type SessionsConfig struct {
	// Disabled turns /v1/sessions off (404).
	Disabled bool `yaml:"disabled"`
	// Dir holds the sessions' workspaces; default data_dir + "-sessions",
	// beside the data directory: a directory guests write may not lie
	// within it (docs/SECURITY.md).
	Dir string `yaml:"dir"`
	// MaxPerOrg bounds an organization's live sessions (default 20).
	MaxPerOrg int `yaml:"max_per_org"`
	// IdleTimeout ends a session no request touched for this long (10m);
	// Timeout is a new session's time to live when its creator gives
	// none (5m); MaxLifetime bounds it and every extension (24h).
	IdleTimeout policy.Duration `yaml:"idle_timeout"`
	Timeout     policy.Duration `yaml:"timeout"`
	MaxLifetime policy.Duration `yaml:"max_lifetime"`
	// DiskQuotaBytes bounds a workspace (512MiB), MaxFiles its names
	// (10000), MaxFileBytes one upload or download (64MiB).
	DiskQuotaBytes policy.ByteSize `yaml:"disk_quota_bytes"`
	MaxFiles       int             `yaml:"max_files"`
	MaxFileBytes   policy.ByteSize `yaml:"max_file_bytes"`
	// RunTimeout bounds one run (60s); Memory a context's interpreter
	// (default the profile's limit, which also bounds it).
	RunTimeout policy.Duration `yaml:"run_timeout"`
	Memory     policy.ByteSize `yaml:"memory"`
	// MaxCommands bounds the commands a session runs at once (16).
	MaxCommands int `yaml:"max_commands"`
	// MaxImageBytes bounds a paused session's image (1GiB), as it is
	// written: in the directory beside the workspaces, or in the shared
	// store with database_url, where images are kept for every replica.
	MaxImageBytes policy.ByteSize `yaml:"max_image_bytes"`
}

// SessionsDir is where the sessions' workspaces lie (sessions.dir, else
// data_dir + "-sessions"), "" when sessions are off: moat serve lets
// itself write there when it confines itself.
func (c Config) SessionsDir() string {
	switch {
	case c.Sessions.Disabled:
		return ""
	case c.Sessions.Dir != "":
		return c.Sessions.Dir
	}
	return filepath.Clean(c.DataDir) + "-sessions"
}

// startSessions makes the server's session manager (nil when disabled).
func (s *Server) startSessions() error {
	c := s.cfg.Sessions
	if c.Disabled {
		return nil
	}
	if c.MaxPerOrg < 0 || c.MaxFiles < 0 {
		return fmt.Errorf("sessions.max_per_org and sessions.max_files: give 1 or more, or leave them out for 20 and 10000 (have %d and %d)", c.MaxPerOrg, c.MaxFiles)
	}
	dir, _ := filepath.Abs(s.cfg.SessionsDir())
	for _, own := range []string{s.cfg.DataDir, s.cfg.CacheDir} {
		if abs, _ := filepath.Abs(own); own != "" && (policy.PathWithin(dir, abs) || policy.PathWithin(abs, dir)) {
			return fmt.Errorf("sessions.dir %s overlaps moat's own directory %s, which a session's code must never reach; give a directory apart from data_dir and cache_dir", dir, abs)
		}
	}
	m, err := sessions.New(sessions.Config{Dir: dir, MaxPerOrg: c.MaxPerOrg,
		IdleTimeout: time.Duration(c.IdleTimeout), Timeout: time.Duration(c.Timeout), MaxLifetime: time.Duration(c.MaxLifetime),
		DiskQuotaBytes: int64(c.DiskQuotaBytes), MaxFiles: int64(c.MaxFiles), MaxFileBytes: int64(c.MaxFileBytes),
		RunTimeout: time.Duration(c.RunTimeout), MemoryBytes: int64(c.Memory),
		HostFor: s.hostFor, Scripts: s.cfg.ScriptBuilder, Audit: s.audit, MaxCommands: c.MaxCommands,
		OnCreate: s.sessionCreated, OnEnd: s.sessionEnded,
		Images: s.sessionImages(dir), MaxImageBytes: int64(c.MaxImageBytes)})
	if err != nil {
		return err
	}
	s.sessions = m
	return s.startReplicas()
}

// sessionImages is where paused sessions' images are kept: in the store
// when replicas share one (database_url), so that any replica resumes
// any session; else beside the workspaces (no session's code reaches
// them: each sees its own workspace alone), where a single server reads
// them fastest.
func (s *Server) sessionImages(dir string) sessions.Images {
	if s.cfg.DatabaseURL != "" {
		return s.store.SessionImages(int64(s.cfg.Sessions.MaxImageBytes))
	}
	return sessions.DirImages(filepath.Join(dir, ".images"))
}

// sessionRoutes adds /v1/sessions to e.
func (s *Server) sessionRoutes(e *echo.Echo, auth, run echo.MiddlewareFunc) {
	if s.sessions == nil {
		return
	}
	routed := s.sessionAuth(auth) // a session another replica holds is routed there (replicas.go)
	auth = func(next echo.HandlerFunc) echo.HandlerFunc { return routed(s.mayExec(next)) }
	e.POST("/v1/sessions", s.createSession, auth)
	e.GET("/v1/sessions", s.listSessions, auth)
	e.GET("/v1/sessions/:id", s.getSession, auth)
	e.DELETE("/v1/sessions/:id", s.killSession, auth)
	e.POST("/v1/sessions/:id/timeout", s.sessionTimeout, auth)
	e.POST("/v1/sessions/:id/run", s.sessionRun, auth, run)
	e.POST("/v1/sessions/:id/fork", s.forkSession, auth, run)
	e.POST("/v1/sessions/:id/pause", s.pauseSession, auth, run)
	e.POST("/v1/sessions/:id/resume", s.resumeSession, auth, run)
	e.PUT("/v1/sessions/:id/files", s.sessionWriteFile, auth)
	e.GET("/v1/sessions/:id/files", s.sessionReadFile, auth)
	e.DELETE("/v1/sessions/:id/files", s.sessionRemoveFile, auth)
	e.GET("/v1/sessions/:id/files/list", s.sessionListFiles, auth)
	s.e2bRoutes(e, auth)
	s.commandRoutes(e, auth)
	envd, interp := s.e2bMuxes()
	e.Match([]string{http.MethodGet, http.MethodPost, http.MethodDelete}, e2bSandboxPrefix+"/*", s.e2bDataPlane(envd, interp))
}

// sessionProblem turns a sessions or host error into a problem.
func sessionProblem(err error) error {
	var se *sessions.Error
	if errors.As(err, &se) {
		status := map[string]int{"not_found": http.StatusNotFound, "invalid_argument": http.StatusBadRequest,
			"resource_exhausted": http.StatusTooManyRequests, "too_large": http.StatusRequestEntityTooLarge,
			"conflict": http.StatusConflict, "denied": http.StatusForbidden, "unavailable": http.StatusServiceUnavailable}[se.Code]
		if status == 0 && se.Err != nil {
			p := fromHostError(se.Err)
			p.Detail = se.Error()
			return p
		}
		if status == 0 {
			status = http.StatusInternalServerError
		}
		return problem(status, se.Code, "%s", se.Error())
	}
	if abi.CodeOf(err) != "" {
		return fromHostError(err)
	}
	return problem(http.StatusInternalServerError, "internal", "%v", err)
}

type createSessionRequest struct {
	// Timeout is the session's time to live, in seconds.
	Timeout  int               `json:"timeout"`
	Env      map[string]string `json:"env_vars"`
	Metadata map[string]string `json:"metadata"`
}

func (s *Server) createSession(c echo.Context) error {
	var req createSessionRequest
	if err := s.sessionBody(c, &req); err != nil {
		return err
	}
	if req.Timeout < 0 || req.Timeout > int(24*365*time.Hour/time.Second) {
		return problem(http.StatusBadRequest, "invalid_argument", "timeout: %d; give seconds, 1 or more", req.Timeout)
	}
	in, err := s.sessions.Create(c.Request().Context(), principalOf(c), correlationID(c),
		sessions.CreateOptions{Timeout: time.Duration(req.Timeout) * time.Second, Env: req.Env, Metadata: req.Metadata})
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusCreated, in)
}

// sessionBody reads a small JSON body (an empty one is {}).
func (s *Server) sessionBody(c echo.Context, v any) error {
	body, err := readBody(c, int64(s.cfg.Limits.MaxRequestBytes), "limits.max_request_bytes")
	if err != nil {
		return err
	}
	if len(body) == 0 {
		return nil
	}
	if err := decodeJSONBody(body, v, true); err != nil {
		return problem(http.StatusBadRequest, "invalid_argument", "the body: %v", err)
	}
	return nil
}

func (s *Server) listSessions(c echo.Context) error {
	all, err := s.sessionsOf(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"sessions": all})
}

// sessionsOf is every session of the caller, oldest first: those this
// replica holds, those paused in its image directory (a single server's),
// and those the session directory names (other replicas', and paused
// ones in the shared store), each once, with its state now.
func (s *Server) sessionsOf(c echo.Context) ([]sessions.Info, error) {
	p := principalOf(c)
	all := s.sessions.List(p)
	paused, err := s.sessions.Paused(c.Request().Context(), p)
	if err != nil {
		return nil, problem(http.StatusServiceUnavailable, "unavailable", "the paused sessions could not be listed: %v; try again", err)
	}
	seen := map[string]bool{}
	for _, in := range all {
		seen[in.ID] = true
	}
	for _, in := range paused {
		if !seen[in.ID] {
			seen[in.ID] = true
			all = append(all, in)
		}
	}
	all = s.remoteSessions(c, all)
	slices.SortStableFunc(all, func(a, b sessions.Info) int { return a.StartedAt.Compare(b.StartedAt) })
	return all, nil
}

func (s *Server) getSession(c echo.Context) error {
	in, err := s.sessions.Info(principalOf(c), c.Param("id"))
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusOK, in)
}

func (s *Server) killSession(c echo.Context) error {
	if err := s.sessions.Kill(c.Request().Context(), principalOf(c), c.Param("id"), correlationID(c)); err != nil {
		return sessionProblem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) sessionTimeout(c echo.Context) error {
	var req struct {
		Timeout int `json:"timeout"` // seconds from now
	}
	if err := s.sessionBody(c, &req); err != nil {
		return err
	}
	if req.Timeout <= 0 || req.Timeout > int(24*365*time.Hour/time.Second) {
		return problem(http.StatusBadRequest, "invalid_argument", "timeout: %d; give the seconds from now the session is to live, 1 or more", req.Timeout)
	}
	in, err := s.sessions.SetTimeout(c.Request().Context(), principalOf(c), c.Param("id"), correlationID(c), time.Duration(req.Timeout)*time.Second)
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusOK, in)
}

type sessionRunRequest struct {
	Language string `json:"language"`
	Code     string `json:"code"`
	Context  string `json:"context"`
	// Timeout bounds the run, in milliseconds (at most sessions.run_timeout).
	Timeout int `json:"timeout_ms"`
}

func (s *Server) sessionRun(c echo.Context) error {
	var req sessionRunRequest
	if err := s.sessionBody(c, &req); err != nil {
		return err
	}
	if req.Timeout < 0 {
		return problem(http.StatusBadRequest, "invalid_argument", "timeout_ms: %d is negative", req.Timeout)
	}
	sess, err := s.sessions.Get(principalOf(c), c.Param("id"))
	if err != nil {
		return sessionProblem(err)
	}
	rr := sessions.RunRequest{Language: req.Language, Code: req.Code, Context: req.Context, Timeout: time.Duration(req.Timeout) * time.Millisecond}
	if wantsSSE(c) {
		return s.streamSessionRun(c, sess, rr)
	}
	res, err := sess.Run(c.Request().Context(), correlationID(c), rr)
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusOK, res)
}

// streamSessionRun answers a run with server-sent events (Accept:
// text/event-stream): "stdout" and "stderr" chunks as the code prints
// them ({"data": text}, or base64 with "encoding"), then "result", the
// RunResult a JSON answer would be without its stdout and stderr (they
// were the events), or "error", the problem. A chunk is written before
// the code's print returns (backpressure: nothing queues in the server);
// a client that goes away, or stops reading for a write timeout, ends the
// run as a timeout does (the context restarts with empty globals).
func (s *Server) streamSessionRun(c echo.Context, sess *sessions.Session, rr sessions.RunRequest) error {
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	st := s.newSSE(c)
	var mu sync.Mutex
	var seq int64
	rr.Output = func(stream string, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		seq++
		if err := st.event(stream, seq, chunkData(b)); err != nil {
			cancel()
		}
	}
	res, err := sess.Run(ctx, correlationID(c), rr)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		_ = st.event("error", 0, sessionProblem(err))
		return nil
	}
	_ = st.event("result", 0, res)
	return nil
}

// forkSession makes count copies of a session ({"count": N}, default 1).
func (s *Server) forkSession(c echo.Context) error {
	req := struct {
		Count *int `json:"count"`
	}{}
	if err := s.sessionBody(c, &req); err != nil {
		return err
	}
	n := 1
	if req.Count != nil {
		n = *req.Count
	}
	out, err := s.sessions.Fork(c.Request().Context(), principalOf(c), c.Param("id"), correlationID(c), n)
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusCreated, map[string]any{"sessions": out})
}

// pauseSession writes a session to the image store and ends it.
func (s *Server) pauseSession(c echo.Context) error {
	if err := s.sessions.Pause(c.Request().Context(), principalOf(c), c.Param("id"), correlationID(c)); err != nil {
		return sessionProblem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

// resumeSession makes a paused session live again (a live one is
// answered as it is).
func (s *Server) resumeSession(c echo.Context) error {
	in, err := s.sessions.Resume(c.Request().Context(), principalOf(c), c.Param("id"), correlationID(c))
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusOK, in)
}

func (s *Server) session(c echo.Context) (*sessions.Session, error) {
	sess, err := s.sessions.Get(principalOf(c), c.Param("id"))
	if err != nil {
		return nil, sessionProblem(err)
	}
	return sess, nil
}

func (s *Server) sessionWriteFile(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	e, err := sess.WriteFile(c.Request().Context(), correlationID(c), c.QueryParam("path"), c.Request().Body)
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusOK, e)
}

func (s *Server) sessionReadFile(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	f, size, err := sess.OpenFile(c.QueryParam("path"))
	if err != nil {
		return sessionProblem(err)
	}
	defer f.Close()
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, echo.MIMEOctetStream)
	h.Set(echo.HeaderContentLength, strconv.FormatInt(size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	c.Response().WriteHeader(http.StatusOK)
	_, err = io.CopyN(c.Response(), f, size)
	return err
}

func (s *Server) sessionListFiles(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	es, err := sess.List(c.QueryParam("path"))
	if err != nil {
		return sessionProblem(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"entries": es})
}

func (s *Server) sessionRemoveFile(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	if err := sess.Remove(c.Request().Context(), correlationID(c), c.QueryParam("path")); err != nil {
		return sessionProblem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

// closeSessions ends every session (Close).
func (s *Server) closeSessions(ctx context.Context) {
	if s.sessions != nil {
		s.sessions.Close(ctx)
	}
}
