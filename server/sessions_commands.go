package server

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/server/sessions"
)

// A session's commands (server/sessions/commands.go) under
// /v1/sessions/{id}/commands: bash -c CMD as a native job bound to the
// workspace, with a pid of the session's own, stdin, signals, and output
// kept (the last bytes) for a late reader and streamed as server-sent
// events to one that asks (Accept: text/event-stream).
//
// Events: "start" {pid}; "stdout" and "stderr" {data} — the chunk as
// text, or {data, encoding: "base64"} when it is not UTF-8 on its own (a
// chunk may end inside a character: the reader joins the bytes); "end"
// the command's info with exit_code. Each output event's id is its
// sequence number: GET .../stream?after=ID resumes after it.

// MaxStdinBytes bounds one write to a command's stdin.
const MaxStdinBytes = 1 << 20

func (s *Server) commandRoutes(e *echo.Echo, auth echo.MiddlewareFunc) {
	e.POST("/v1/sessions/:id/commands", s.startCommand, auth)
	e.GET("/v1/sessions/:id/commands", s.listCommands, auth)
	e.GET("/v1/sessions/:id/commands/:pid", s.getCommand, auth)
	e.POST("/v1/sessions/:id/commands/:pid/input", s.commandInput, auth)
	e.POST("/v1/sessions/:id/commands/:pid/signal", s.commandSignal, auth)
	e.GET("/v1/sessions/:id/commands/:pid/stream", s.commandStream, auth)
	e.GET("/v1/sessions/:id/commands/:pid/wait", s.commandWait, auth)
}

type startCommandRequest struct {
	Cmd  string            `json:"cmd"`
	Envs map[string]string `json:"envs"`
	Cwd  string            `json:"cwd"`
	// Stdin gives the command a pipe (POST .../input); without it stdin
	// is empty.
	Stdin bool `json:"stdin"`
	// Background answers {pid} at once; the command runs on until it
	// ends, is killed or the session ends.
	Background bool `json:"background"`
	// Timeout ends the command, in seconds; 0 is the session's end.
	Timeout int    `json:"timeout"`
	Tag     string `json:"tag"`
}

func (s *Server) startCommand(c echo.Context) error {
	var req startCommandRequest
	if err := s.sessionBody(c, &req); err != nil {
		return err
	}
	if req.Timeout < 0 || req.Timeout > int(24*365*time.Hour/time.Second) {
		return problem(http.StatusBadRequest, "invalid_argument", "timeout: %d; give seconds, 1 or more, or 0 to run until the session ends", req.Timeout)
	}
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	cmd, err := sess.StartCommand(ctx, correlationID(c), sessions.CommandRequest{Cmd: req.Cmd, Env: req.Envs, Cwd: req.Cwd,
		Stdin: req.Stdin, Timeout: time.Duration(req.Timeout) * time.Second, Tag: req.Tag})
	if err != nil {
		return sessionProblem(err)
	}
	if req.Background {
		return c.JSON(http.StatusCreated, map[string]any{"pid": cmd.PID()})
	}
	// A foreground command is the request's: a client that goes away
	// takes it along.
	stop := context.AfterFunc(ctx, func() { _ = cmd.Signal(context.WithoutCancel(ctx), correlationID(c), "SIGKILL") })
	defer stop()
	if wantsSSE(c) {
		return s.streamCommand(c, cmd, 0, true)
	}
	res, err := cmd.Wait(ctx)
	if err != nil {
		return nil //nolint:nilerr // the client is gone: nobody to answer
	}
	return c.JSON(http.StatusOK, res)
}

// streamCommand writes cmd's output as events until it ends.
func (s *Server) streamCommand(c echo.Context, cmd *sessions.Command, after int64, started bool) error {
	st := s.newSSE(c)
	if started {
		if err := st.event("start", 0, map[string]int{"pid": cmd.PID()}); err != nil {
			return nil
		}
	}
	ctx := c.Request().Context()
	// Keep-alives while the command is quiet, beside the events.
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	quiet := make(chan struct{})
	defer close(quiet)
	var mu sync.Mutex
	go func() {
		for {
			select {
			case <-quiet:
				return
			case <-tick.C:
				mu.Lock()
				_ = st.comment()
				mu.Unlock()
			}
		}
	}()
	info, err := cmd.Follow(ctx, after, func(ch sessions.Chunk) error {
		mu.Lock()
		defer mu.Unlock()
		return st.event(ch.Stream, ch.Seq, chunkData(ch.Data))
	})
	if err != nil {
		return nil // the client is gone
	}
	mu.Lock()
	defer mu.Unlock()
	_ = st.event("end", 0, info)
	return nil
}

// chunkData is an output event's data: the chunk as text when it is
// UTF-8, else base64.
func chunkData(b []byte) map[string]string {
	if utf8.Valid(b) {
		return map[string]string{"data": string(b)}
	}
	return map[string]string{"data": base64.StdEncoding.EncodeToString(b), "encoding": "base64"}
}

func (s *Server) listCommands(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"commands": sess.Commands()})
}

// command is the session's command the route names.
func (s *Server) command(c echo.Context) (*sessions.Session, *sessions.Command, error) {
	sess, err := s.session(c)
	if err != nil {
		return nil, nil, err
	}
	pid, err := strconv.Atoi(c.Param("pid"))
	if err != nil || pid <= 0 {
		return nil, nil, problem(http.StatusNotFound, "not_found", "no command %.16q in this session: a command's pid is the number its start answered", c.Param("pid"))
	}
	cmd, err := sess.Command(pid)
	if err != nil {
		return nil, nil, sessionProblem(err)
	}
	return sess, cmd, nil
}

func (s *Server) getCommand(c echo.Context) error {
	_, cmd, err := s.command(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, cmd.Info())
}

// commandInput writes the body to the command's stdin; ?close=true
// closes stdin after it (an empty body with it only closes).
func (s *Server) commandInput(c echo.Context) error {
	_, cmd, err := s.command(c)
	if err != nil {
		return err
	}
	body, err := readBody(c, MaxStdinBytes, "the stdin write limit (1 MiB)")
	if err != nil {
		return err
	}
	if len(body) > 0 {
		if err := cmd.Write(body); err != nil {
			return sessionProblem(err)
		}
	}
	if cl, _ := strconv.ParseBool(c.QueryParam("close")); cl {
		_ = cmd.CloseStdin()
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) commandSignal(c echo.Context) error {
	var req struct {
		Signal string `json:"signal"`
	}
	if err := s.sessionBody(c, &req); err != nil {
		return err
	}
	_, cmd, err := s.command(c)
	if err != nil {
		return err
	}
	if req.Signal == "" {
		req.Signal = "SIGKILL"
	}
	if err := cmd.Signal(c.Request().Context(), correlationID(c), req.Signal); err != nil {
		return sessionProblem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) commandStream(c echo.Context) error {
	_, cmd, err := s.command(c)
	if err != nil {
		return err
	}
	after, _ := strconv.ParseInt(c.QueryParam("after"), 10, 64)
	return s.streamCommand(c, cmd, max(after, 0), false)
}

func (s *Server) commandWait(c echo.Context) error {
	_, cmd, err := s.command(c)
	if err != nil {
		return err
	}
	res, err := cmd.Wait(c.Request().Context())
	if err != nil {
		return nil //nolint:nilerr // the client is gone
	}
	return c.JSON(http.StatusOK, res)
}
