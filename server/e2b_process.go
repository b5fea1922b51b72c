package server

// E2B's process service (envd's process.Process, spec/envd/process/
// process.proto in e2b-dev/E2B) over a session's commands
// (server/sessions/commands.go): what the SDKs' commands.run, .list,
// .kill, .sendStdin, .closeStdin and .connect call.
//
// Start takes {process: {cmd, args, envs, cwd}, stdin, tag, pty}. The SDKs
// send cmd /bin/bash with args [-l, -c, CMD]: moat runs CMD under its own
// bash -c, as a session's command (a login shell reads nothing moat
// offers). Any other cmd and args are quoted into one command line. A
// pty is refused (FailedPrecondition): moat's commands have pipes, not
// terminals. Pids are the session's own numbers (1, 2, ...), as
// sessions' commands list them. The end event's exitCode is the command's
// (128+n for a signal n, as a shell says; -1 when moat killed it), status
// "exit status N" or "signal: killed".

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/moat-sandbox/moat/server/sessions"
)

func init() { envdServices = append(envdServices, mountE2BProcess) }

// Messages, with protojson's names.
type (
	e2bProcessConfig struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args,omitempty"`
		Envs map[string]string `json:"envs,omitempty"`
		Cwd  *string           `json:"cwd,omitempty"`
	}
	e2bPTY struct {
		Size *struct {
			Cols uint32 `json:"cols"`
			Rows uint32 `json:"rows"`
		} `json:"size,omitempty"`
	}
	e2bStartRequest struct {
		Process *e2bProcessConfig `json:"process"`
		PTY     *e2bPTY           `json:"pty,omitempty"`
		Tag     *string           `json:"tag,omitempty"`
		Stdin   *bool             `json:"stdin,omitempty"`
	}
	e2bStartEvent struct {
		PID uint32 `json:"pid"`
	}
	e2bDataEvent struct {
		Stdout []byte `json:"stdout,omitempty"` // base64, as protojson's bytes
		Stderr []byte `json:"stderr,omitempty"`
	}
	e2bEndEvent struct {
		ExitCode int32   `json:"exitCode"`
		Exited   bool    `json:"exited"`
		Status   string  `json:"status"`
		Error    *string `json:"error,omitempty"`
	}
	e2bProcessEvent struct {
		Start     *e2bStartEvent `json:"start,omitempty"`
		Data      *e2bDataEvent  `json:"data,omitempty"`
		End       *e2bEndEvent   `json:"end,omitempty"`
		Keepalive *struct{}      `json:"keepalive,omitempty"`
	}
	e2bProcessEventResponse struct {
		Event e2bProcessEvent `json:"event"`
	}
	e2bSelector struct {
		PID *uint32 `json:"pid,omitempty"`
		Tag *string `json:"tag,omitempty"`
	}
	e2bSelectorRequest struct {
		Process *e2bSelector `json:"process"`
	}
	e2bProcessInfo struct {
		Config e2bProcessConfig `json:"config"`
		PID    uint32           `json:"pid"`
		Tag    *string          `json:"tag,omitempty"`
	}
	e2bListResponse struct {
		Processes []e2bProcessInfo `json:"processes"`
	}
	e2bProcessInput struct {
		Stdin []byte `json:"stdin,omitempty"`
		PTY   []byte `json:"pty,omitempty"`
	}
	e2bSendInputRequest struct {
		Process *e2bSelector     `json:"process"`
		Input   *e2bProcessInput `json:"input"`
	}
	e2bStreamInputRequest struct {
		Start *struct {
			Process *e2bSelector `json:"process"`
		} `json:"start,omitempty"`
		Data *struct {
			Input *e2bProcessInput `json:"input"`
		} `json:"data,omitempty"`
		Keepalive *struct{} `json:"keepalive,omitempty"`
	}
	e2bSendSignalRequest struct {
		Process *e2bSelector `json:"process"`
		Signal  e2bSignal    `json:"signal"`
	}
	e2bEmpty struct{}
)

// e2bSignal is process.Signal: protojson writes an enum by name and reads
// the name or the number.
type e2bSignal string

func (s *e2bSignal) UnmarshalJSON(b []byte) error {
	var name string
	if json.Unmarshal(b, &name) == nil {
		*s = e2bSignal(name)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("signal: %s is neither a name nor a number", b)
	}
	*s = map[int]e2bSignal{0: "SIGNAL_UNSPECIFIED", 9: "SIGNAL_SIGKILL", 15: "SIGNAL_SIGTERM"}[n]
	return nil
}

// e2bKeepaliveEvery is how often a quiet Start or Connect stream carries a
// keepalive event (the SDKs ask for one every 50 s: Keepalive-Ping-Interval).
const e2bKeepaliveEvery = 20 * time.Second

type e2bWriterKey struct{}

// withWriter hands the handler's ResponseWriter to a Connect handler's
// context: a stream moves the connection's write deadline on with each
// message, as server-sent events do (sse.go).
func withWriter(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), e2bWriterKey{}, w)))
	})
}

func mountE2BProcess(s *Server, mux *http.ServeMux, opts ...connect.HandlerOption) {
	const svc = "/process.Process/"
	mux.Handle(svc+"Start", withWriter(connect.NewServerStreamHandler(svc+"Start", s.e2bProcessStart, opts...)))
	mux.Handle(svc+"Connect", withWriter(connect.NewServerStreamHandler(svc+"Connect", s.e2bProcessConnect, opts...)))
	mux.Handle(svc+"List", connect.NewUnaryHandler(svc+"List", s.e2bProcessList, opts...))
	mux.Handle(svc+"SendInput", connect.NewUnaryHandler(svc+"SendInput", s.e2bProcessSendInput, opts...))
	mux.Handle(svc+"StreamInput", connect.NewClientStreamHandler(svc+"StreamInput", s.e2bProcessStreamInput, opts...))
	mux.Handle(svc+"SendSignal", connect.NewUnaryHandler(svc+"SendSignal", s.e2bProcessSendSignal, opts...))
	mux.Handle(svc+"CloseStdin", connect.NewUnaryHandler(svc+"CloseStdin", s.e2bProcessCloseStdin, opts...))
	mux.Handle(svc+"Update", connect.NewUnaryHandler(svc+"Update", func(context.Context, *connect.Request[e2bEmpty]) (*connect.Response[e2bEmpty], error) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("moat's commands have pipes, not a terminal: there is no pty to resize"))
	}, opts...))
}

// e2bCommandLine is the bash command line of an E2B process config.
func e2bCommandLine(pc *e2bProcessConfig) (string, error) {
	if pc == nil || pc.Cmd == "" {
		return "", errors.New("process.cmd: empty; give the program to run (the SDKs send /bin/bash -l -c CMD)")
	}
	if base := path.Base(pc.Cmd); base == "bash" || base == "sh" {
		for i, a := range pc.Args {
			if a == "-c" && i+1 < len(pc.Args) {
				return pc.Args[i+1], nil
			}
			if !strings.HasPrefix(a, "-") {
				break
			}
		}
	}
	q := []string{shellQuote(pc.Cmd)}
	for _, a := range pc.Args {
		q = append(q, shellQuote(a))
	}
	return "exec " + strings.Join(q, " "), nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (s *Server) e2bProcessStart(ctx context.Context, r *connect.Request[e2bStartRequest], st *connect.ServerStream[e2bProcessEventResponse]) error {
	sb := sandboxOf(ctx)
	if r.Msg.PTY != nil {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("pty: moat's commands have pipes, not a terminal; start the command without a pty"))
	}
	line, err := e2bCommandLine(r.Msg.Process)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	req := sessions.CommandRequest{Cmd: line, Env: r.Msg.Process.Envs, Stdin: r.Msg.Stdin != nil && *r.Msg.Stdin}
	if c := r.Msg.Process.Cwd; c != nil {
		req.Cwd = *c
	}
	if r.Msg.Tag != nil {
		req.Tag = *r.Msg.Tag
	}
	cmd, err := sb.Session.StartCommand(ctx, r.Header().Get(echoHeaderRequestID), req)
	if err != nil {
		return connectErr(err)
	}
	return s.e2bFollow(ctx, cmd, st, true)
}

// echoHeaderRequestID is the header a request's correlation id comes in.
const echoHeaderRequestID = "X-Request-Id"

// e2bFollow streams cmd's events: start (when started), data as
// produced, keepalives while it is quiet, and end.
func (s *Server) e2bFollow(ctx context.Context, cmd *sessions.Command, st *connect.ServerStream[e2bProcessEventResponse], started bool) error {
	var rc *http.ResponseController
	if w, ok := ctx.Value(e2bWriterKey{}).(http.ResponseWriter); ok {
		rc = http.NewResponseController(w)
	}
	send := func(ev e2bProcessEvent) error {
		if rc != nil && s.cfg.HTTP.WriteTimeout > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(time.Duration(s.cfg.HTTP.WriteTimeout)))
		}
		return st.Send(&e2bProcessEventResponse{Event: ev})
	}
	if started {
		if err := send(e2bProcessEvent{Start: &e2bStartEvent{PID: uint32(cmd.PID())}}); err != nil {
			return err
		}
	}
	events := make(chan e2bProcessEvent, 64)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var info *sessions.CommandInfo
	var ferr error
	go func() {
		defer close(events)
		info, ferr = cmd.Follow(fctx, 0, func(ch sessions.Chunk) error {
			d := &e2bDataEvent{}
			if ch.Stream == "stdout" {
				d.Stdout = ch.Data
			} else {
				d.Stderr = ch.Data
			}
			select {
			case events <- e2bProcessEvent{Data: d}:
				return nil
			case <-fctx.Done():
				return fctx.Err()
			}
		})
	}()
	tick := time.NewTicker(e2bKeepaliveEvery)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				if ferr != nil {
					return connect.NewError(connect.CodeCanceled, ferr)
				}
				return send(e2bProcessEvent{End: e2bEnd(info)})
			}
			if err := send(ev); err != nil {
				return err
			}
		case <-tick.C:
			if err := send(e2bProcessEvent{Keepalive: &struct{}{}}); err != nil {
				return err
			}
		}
	}
}

func e2bEnd(info *sessions.CommandInfo) *e2bEndEvent {
	end := &e2bEndEvent{ExitCode: -1, Exited: true}
	if info.ExitCode != nil {
		end.ExitCode = int32(*info.ExitCode)
	}
	switch {
	case end.ExitCode < 0:
		end.Exited, end.Status = false, "signal: killed"
	default:
		end.Status = fmt.Sprintf("exit status %d", end.ExitCode)
	}
	if info.Reason != "" && info.Status != "ok" && info.Status != "runtime-error" {
		e := info.Status + ": " + info.Reason
		end.Error = &e
	}
	return end
}

// e2bCommand finds the command a selector names.
func e2bCommand(ctx context.Context, sel *e2bSelector) (*sessions.Command, error) {
	sb := sandboxOf(ctx)
	if sel == nil || sel.PID == nil && sel.Tag == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process: give its pid or its tag"))
	}
	if sel.PID != nil {
		c, err := sb.Session.Command(int(*sel.PID))
		if err != nil {
			return nil, connectErr(err)
		}
		return c, nil
	}
	for _, in := range sb.Session.Commands() {
		if in.Tag == *sel.Tag && in.Running {
			c, err := sb.Session.Command(in.PID)
			if err != nil {
				return nil, connectErr(err)
			}
			return c, nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no running process tagged %q", *sel.Tag))
}

func (s *Server) e2bProcessConnect(ctx context.Context, r *connect.Request[e2bSelectorRequest], st *connect.ServerStream[e2bProcessEventResponse]) error {
	cmd, err := e2bCommand(ctx, r.Msg.Process)
	if err != nil {
		return err
	}
	return s.e2bFollow(ctx, cmd, st, true)
}

func (s *Server) e2bProcessList(ctx context.Context, _ *connect.Request[e2bEmpty]) (*connect.Response[e2bListResponse], error) {
	out := &e2bListResponse{Processes: []e2bProcessInfo{}}
	for _, in := range sandboxOf(ctx).Session.Commands() {
		if !in.Running {
			continue // envd lists the running ones
		}
		cwd := in.Cwd
		pi := e2bProcessInfo{PID: uint32(in.PID), Config: e2bProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", in.Cmd}, Cwd: &cwd}}
		if in.Tag != "" {
			tag := in.Tag
			pi.Tag = &tag
		}
		out.Processes = append(out.Processes, pi)
	}
	return connect.NewResponse(out), nil
}

func (s *Server) e2bWriteInput(cmd *sessions.Command, in *e2bProcessInput) error {
	if in == nil {
		return nil
	}
	if len(in.PTY) > 0 {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("input.pty: the process has no pty; send stdin"))
	}
	if len(in.Stdin) > MaxStdinBytes {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("input.stdin: %d bytes, at most %d in one message", len(in.Stdin), MaxStdinBytes))
	}
	if len(in.Stdin) > 0 {
		if err := cmd.Write(in.Stdin); err != nil {
			return connectErr(err)
		}
	}
	return nil
}

func (s *Server) e2bProcessSendInput(ctx context.Context, r *connect.Request[e2bSendInputRequest]) (*connect.Response[e2bEmpty], error) {
	cmd, err := e2bCommand(ctx, r.Msg.Process)
	if err != nil {
		return nil, err
	}
	if err := s.e2bWriteInput(cmd, r.Msg.Input); err != nil {
		return nil, err
	}
	return connect.NewResponse(&e2bEmpty{}), nil
}

func (s *Server) e2bProcessStreamInput(ctx context.Context, st *connect.ClientStream[e2bStreamInputRequest]) (*connect.Response[e2bEmpty], error) {
	var cmd *sessions.Command
	for st.Receive() {
		m := st.Msg()
		switch {
		case m.Start != nil:
			c, err := e2bCommand(ctx, m.Start.Process)
			if err != nil {
				return nil, err
			}
			cmd = c
		case m.Data != nil:
			if cmd == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the stream's first message names the process (start)"))
			}
			if err := s.e2bWriteInput(cmd, m.Data.Input); err != nil {
				return nil, err
			}
		}
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&e2bEmpty{}), nil
}

func (s *Server) e2bProcessSendSignal(ctx context.Context, r *connect.Request[e2bSendSignalRequest]) (*connect.Response[e2bEmpty], error) {
	cmd, err := e2bCommand(ctx, r.Msg.Process)
	if err != nil {
		return nil, err
	}
	name, ok := map[e2bSignal]string{"SIGNAL_SIGKILL": "SIGKILL", "SIGNAL_SIGTERM": "SIGTERM"}[r.Msg.Signal]
	if !ok {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal: %.32q; give SIGNAL_SIGTERM or SIGNAL_SIGKILL", string(r.Msg.Signal)))
	}
	if err := cmd.Signal(ctx, r.Header().Get(echoHeaderRequestID), name); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&e2bEmpty{}), nil
}

func (s *Server) e2bProcessCloseStdin(ctx context.Context, r *connect.Request[e2bSelectorRequest]) (*connect.Response[e2bEmpty], error) {
	cmd, err := e2bCommand(ctx, r.Msg.Process)
	if err != nil {
		return nil, err
	}
	_ = cmd.CloseStdin()
	return connect.NewResponse(&e2bEmpty{}), nil
}
