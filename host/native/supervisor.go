package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/transport"
)

// A Supervisor keeps one long-lived native worker running: a plugin written
// for a native language (python3, a compiled binary) that speaks the pipe
// transport. It starts the worker, waits for its ready message, checks its
// health on an interval, and restarts it with exponential backoff when it
// dies, hangs or breaks the protocol. A worker that keeps crashing is given
// up on with an error that says so, instead of being restarted forever.
// A PluginPool runs several, sharing one crash-loop count.
type Supervisor struct {
	spec WorkerSpec
	log  *slog.Logger
	loop *crashLoop
	slot int
	want []string // the actions every worker must name: the first worker's

	mu         sync.Mutex
	cur        *worker
	changed    chan struct{} // closed (and replaced) when cur or closed changes
	closed     bool
	actions    []string
	lastReason string // why the previous worker went, for the restarted event
	lastExit   string
	charged    bool // the previous worker died of a call (see replace)

	stop chan struct{}
	done chan struct{}
}

// WorkerSpec describes a native worker.
type WorkerSpec struct {
	Name    string   // the module name, for logs and errors
	Command []string // argv
	// Env is the worker's environment; abi.PipeEnv (MOAT_TRANSPORT=pipe)
	// is added, so an SDK knows to speak the pipe transport.
	Env []string
	// Dir is the worker's own directory (Spec.Dir of a confined worker:
	// handed to its uid, kept). Leave it empty for pooled workers: each
	// then gets a fresh job dir of its own.
	Dir string
	// Launch starts the process with the two pipe ends as its fds 3 and 4.
	// Default: ExecLauncher (plain os/exec); the confined launcher runs it
	// under the kernel layers.
	Launch WorkerLauncher
	// HealthInterval between pings (default 5s); a ping unanswered within
	// HealthTimeout (default 2s) restarts the worker.
	HealthInterval, HealthTimeout time.Duration
	// StartTimeout bounds the wait for the ready message (default 10s).
	StartTimeout time.Duration
	// MaxRestarts within RestartWindow (default 5 in 1 minute) before the
	// supervisor gives up. A PluginPool's workers that die during a call
	// of a known caller (InvokeAs) are that caller's strikes instead, and
	// are not counted here.
	MaxRestarts   int
	RestartWindow time.Duration
	// GiveUpCooldown is how long a PluginPool stays given up before it
	// starts a worker again on the next call (default RestartWindow; it
	// doubles, up to 30 minutes, at each give-up that follows a revival
	// within RestartWindow of it).
	GiveUpCooldown time.Duration
	Logger         *slog.Logger
	Stderr         io.Writer // the worker's stderr; default: the log
	// OnDenial is told of every refusal by a kernel layer or a deadline
	// that the supervisor observes (an OOM kill, the pids limit, an
	// invocation past its deadline), with the correlation id of the
	// invocation in flight, if any. Hosts point it at the audit trail
	// (AuditDenials).
	OnDenial func(d Denial, correlationID string)
	// OnEvent is told of the worker's life: started, restarted (why the
	// previous one went, and how it exited), restart_failed,
	// health_check_failed, gave_up. Hosts log and audit them. It is
	// called from the supervisor's goroutines and must not block.
	OnEvent func(WorkerEvent)
}

// WorkerEventKind names a change in a worker's life.
type WorkerEventKind string

// The kinds of WorkerEvent.
const (
	EventStarted           WorkerEventKind = "started"             // the first worker (of a pool slot) said ready
	EventRestarted         WorkerEventKind = "restarted"           // a replacement said ready
	EventRestartFailed     WorkerEventKind = "restart_failed"      // a replacement did not start; counts as a crash
	EventHealthCheckFailed WorkerEventKind = "health_check_failed" // a ping went unanswered: the worker is replaced
	EventGaveUp            WorkerEventKind = "gave_up"             // the crash loop: no more restarts, for the cool-down
	EventRevived           WorkerEventKind = "revived"             // a given-up plugin's cool-down passed: workers start again
)

// WorkerEvent is one change in a worker's life, for logs and the audit
// trail (hosts record it as audit kind "worker").
type WorkerEvent struct {
	Kind   WorkerEventKind
	Worker string // WorkerSpec.Name
	Slot   int    // which worker of a PluginPool (0 for a lone Supervisor)
	Pid    int    // the new worker (started, restarted) or the failing one
	// Reason says why: for restarted, why the previous worker was
	// replaced; for gave_up, the crash loop and how to recover.
	Reason string
	// Exit is how the previous worker ended: "exit status 3", "killed by
	// signal killed", "OOM-killed at its memory limit (peak N bytes)".
	Exit     string
	Restarts int // restarts within the restart window, across a pool
}

// WorkerLauncher starts a worker process with extra files (the pipe ends)
// inherited as fds 3, 4, ...
type WorkerLauncher func(ctx context.Context, spec *WorkerSpec, extra []*os.File, stderr io.Writer) (WorkerProcess, error)

// WorkerProcess is a started worker.
type WorkerProcess interface {
	Wait() error // waits for exit and releases resources
	Kill()       // ends the worker and everything it started
	Pid() int
}

// workerResult is implemented by confined worker processes: after Wait,
// what the kernel layers observed (OOM kill, pids limit, peak memory).
type workerResult interface {
	Result() *Result
}

// ExecLauncher starts the worker with plain os/exec, without kernel layers.
// It is what tests of the protocol use; production workers run confined.
func ExecLauncher(ctx context.Context, spec *WorkerSpec, extra []*os.File, stderr io.Writer) (WorkerProcess, error) {
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	env := spec.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env, cmd.Dir, cmd.ExtraFiles, cmd.Stderr = withPipeEnv(env), spec.Dir, extra, stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &execProcess{cmd: cmd}, nil
}

// withPipeEnv adds abi.PipeEnv to env (a copy) unless it sets MOAT_TRANSPORT.
func withPipeEnv(env []string) []string {
	name, _, _ := strings.Cut(abi.PipeEnv, "=")
	if slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") }) {
		return env
	}
	return append(slices.Clip(env), abi.PipeEnv)
}

type execProcess struct{ cmd *exec.Cmd }

func (p *execProcess) Wait() error { return p.cmd.Wait() }
func (p *execProcess) Kill()       { _ = p.cmd.Process.Kill() }
func (p *execProcess) Pid() int    { return p.cmd.Process.Pid }

type worker struct {
	inflight atomic.Pointer[string] // correlation id of the call in flight
	// chargeable: the call in flight has a known caller, who answers for
	// the worker's death during it (PluginPool.InvokeAs).
	chargeable atomic.Bool
	proc       WorkerProcess
	conn       *transport.PipeConn
	exited     chan struct{}
	exit       error
	stderr     *tailWriter
	toW        *os.File // host's write end
	fromW      *os.File // host's read end
}

// ErrGaveUp wraps the error of a supervisor that stopped restarting.
var ErrGaveUp = errors.New("the worker keeps crashing")

// WorkerError is a call that failed because of the worker, not the action:
// it crashed, was OOM-killed, hung past the deadline, broke the protocol,
// or the plugin gave up on it. The worker is replaced for the next call
// (unless the plugin gave up). An action's own error is an *abi.Error
// instead, and leaves the worker running.
type WorkerError struct {
	// Code is unavailable (crash, protocol, restarting, given up),
	// memory_limit (OOM-killed), timeout or canceled (the context).
	Code   abi.Code
	Worker string // WorkerSpec.Name
	Action string
	Reason string
	Err    error // the cause: ErrGaveUp, a context error, transport.ErrWorkerGone, transport.ErrPipeProtocol
	// charged: the worker died or was killed because of this call (a
	// crash, the OOM killer, its deadline, a protocol break): the
	// caller's strike (see PluginPool.InvokeAs), not the plugin's.
	charged bool
}

// ErrorCode is the failure's code on the wire (abi.CodeOf).
func (e *WorkerError) ErrorCode() abi.Code { return e.Code }

func (e *WorkerError) Error() string {
	msg := "native worker " + e.Worker
	if e.Action != "" {
		msg += ": action " + e.Action
	}
	msg += ": " + e.Reason
	if e.Err != nil && !strings.Contains(e.Reason, e.Err.Error()) {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *WorkerError) Unwrap() error { return e.Err }

// Supervise starts the worker and returns once it is ready.
func Supervise(ctx context.Context, spec WorkerSpec) (*Supervisor, error) {
	spec, err := workerDefaults(spec)
	if err != nil {
		return nil, err
	}
	return supervise(ctx, spec, newCrashLoop(spec), 0, nil)
}

func workerDefaults(spec WorkerSpec) (WorkerSpec, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return spec, fmt.Errorf("native worker %s: no command", spec.Name)
	}
	if spec.Launch == nil {
		spec.Launch = ExecLauncher
	}
	if spec.HealthInterval <= 0 {
		spec.HealthInterval = 5 * time.Second
	}
	if spec.HealthTimeout <= 0 {
		spec.HealthTimeout = 2 * time.Second
	}
	if spec.StartTimeout <= 0 {
		spec.StartTimeout = 10 * time.Second
	}
	if spec.MaxRestarts <= 0 {
		spec.MaxRestarts = 5
	}
	if spec.RestartWindow <= 0 {
		spec.RestartWindow = time.Minute
	}
	if spec.GiveUpCooldown <= 0 {
		spec.GiveUpCooldown = spec.RestartWindow
	}
	if spec.Logger == nil {
		spec.Logger = slog.Default()
	}
	return spec, nil
}

func supervise(ctx context.Context, spec WorkerSpec, loop *crashLoop, slot int, want []string) (*Supervisor, error) {
	s := &Supervisor{spec: spec, log: spec.Logger.With("worker", spec.Name, "slot", slot), loop: loop, slot: slot, want: want,
		changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	w, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	s.cur = w
	if s.want == nil {
		s.want = s.actions
	}
	s.event(WorkerEvent{Kind: EventStarted, Pid: w.proc.Pid()})
	go s.watch()
	return s, nil
}

func (s *Supervisor) event(e WorkerEvent) {
	e.Worker, e.Slot = s.spec.Name, s.slot
	if e.Restarts == 0 {
		e.Restarts = s.loop.count()
	}
	if s.spec.OnEvent != nil {
		s.spec.OnEvent(e)
	}
}

func (s *Supervisor) start(ctx context.Context) (*worker, error) {
	// Two pipes: host → worker (the worker's fd 3), worker → host (fd 4).
	wr, hw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	hr, ww, err := os.Pipe()
	if err != nil {
		wr.Close()
		hw.Close()
		return nil, err
	}
	var stderr io.Writer = s.spec.Stderr
	if stderr == nil {
		stderr = &logWriter{log: s.log}
	}
	tail := &tailWriter{w: stderr}
	spec := s.spec // the launcher adds abi.PipeEnv to the environment
	proc, err := s.spec.Launch(ctx, &spec, []*os.File{wr, ww}, tail)
	wr.Close() // the child has its copies
	ww.Close()
	if err != nil {
		hw.Close()
		hr.Close()
		return nil, fmt.Errorf("native worker %s: start %s: %w", s.spec.Name, s.spec.Command[0], err)
	}
	w := &worker{proc: proc, conn: transport.NewPipeConn(hr, hw), exited: make(chan struct{}), stderr: tail, toW: hw, fromW: hr}
	go func() {
		w.exit = proc.Wait()
		corr := ""
		if c := w.inflight.Load(); c != nil {
			corr = *c
		}
		if r, ok := proc.(workerResult); ok && r.Result() != nil {
			for _, d := range r.Result().Denials(nil) {
				s.denied(d, corr)
			}
		}
		if se := (*SurvivorsError)(nil); errors.As(w.exit, &se) {
			s.denied(Denial{Rule: "kernel: job survived its kill", Reason: se.Error()}, corr)
		}
		close(w.exited)
	}()
	// Wait for ready, for the deadline, or for the process to exit (a
	// grandchild may hold the pipe open, so EOF alone is not enough).
	sctx, cancel := context.WithTimeout(ctx, s.spec.StartTimeout)
	defer cancel()
	go func() {
		select {
		case <-w.exited:
			cancel()
		case <-sctx.Done():
		}
	}()
	actions, err := w.conn.Handshake(sctx)
	if err == nil && s.want != nil && !slices.Equal(actions, s.want) {
		err = fmt.Errorf("it named the actions %q, not %q as the first worker did", actions, s.want)
	}
	if err != nil {
		exited := false
		select {
		case <-w.exited:
			exited = true
		default:
		}
		w.kill()
		reason := err
		switch {
		case exited || errors.Is(err, transport.ErrWorkerGone):
			reason = fmt.Errorf("it exited before saying ready (%s)", w.describeExit())
		case errors.Is(err, context.DeadlineExceeded):
			reason = fmt.Errorf("it did not say ready within %s", s.spec.StartTimeout)
		}
		if t := w.stderr.Tail(); t != "" {
			reason = fmt.Errorf("%w; its stderr ends: %s", reason, t)
		}
		return nil, fmt.Errorf("native worker %s: %w", s.spec.Name, reason)
	}
	s.mu.Lock()
	s.actions = actions
	s.mu.Unlock()
	s.log.Info("native worker ready", "pid", proc.Pid(), "actions", actions)
	return w, nil
}

// describeExit says how the worker ended, from what the kernel layers saw
// when it ran confined: "exit status 3", "killed by signal killed",
// "OOM-killed at its memory limit (peak N bytes)". It waits up to a second
// for the exit.
func (w *worker) describeExit() string {
	select {
	case <-w.exited:
	case <-time.After(time.Second):
		return "still running"
	}
	if r, ok := w.proc.(workerResult); ok && r.Result() != nil {
		res := r.Result()
		var s string
		switch {
		case res.Status == StatusMemoryLimit:
			s = fmt.Sprintf("OOM-killed at its memory limit (peak %d bytes)", res.PeakMemory)
		case res.Signal != "":
			s = "killed by signal " + res.Signal
		default:
			s = fmt.Sprintf("exit status %d", res.ExitCode)
		}
		if res.PidsLimitHit {
			s += "; it hit its pids limit"
		}
		return s
	}
	if w.exit == nil {
		return "exit status 0"
	}
	return w.exit.Error()
}

func (w *worker) oomKilled() bool {
	r, ok := w.proc.(workerResult)
	return ok && r.Result() != nil && r.Result().Status == StatusMemoryLimit
}

func (w *worker) kill() {
	w.conn.Close()
	w.proc.Kill()
	w.toW.Close()
	w.fromW.Close()
	<-w.exited
}

// Actions lists the worker's actions, from its ready message.
func (s *Supervisor) Actions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.actions...)
}

// Invoke runs one action on the worker. The worker's op calls go through d.
// While the worker restarts, Invoke waits for it (as long as ctx allows).
// When the worker dies, hangs past ctx or breaks the protocol during the
// call, the call fails with a *WorkerError and the worker is restarted; the
// error of an action (an *abi.Error) leaves the worker running.
func (s *Supervisor) Invoke(ctx context.Context, d transport.Dispatcher, action string, input []byte, correlationID string) ([]byte, error) {
	return s.invoke(ctx, d, action, input, correlationID, false)
}

// invoke is Invoke; chargeable: the call's caller is known and answers
// for the worker's death during it (see PluginPool.InvokeAs).
func (s *Supervisor) invoke(ctx context.Context, d transport.Dispatcher, action string, input []byte, correlationID string, chargeable bool) ([]byte, error) {
	w, err := s.waitWorker(ctx, action)
	if err != nil {
		return nil, err
	}
	w.chargeable.Store(chargeable)
	w.inflight.Store(&correlationID)
	out, err := w.conn.Invoke(ctx, d, action, input, correlationID)
	var ae *abi.Error
	if err == nil || errors.As(err, &ae) {
		// Answered: the worker is idle again.
		w.inflight.Store(nil)
		return out, err
	}
	// Timeout, crash or protocol break: this worker is done. A failed
	// call keeps its correlation id, for the exit that usually follows
	// (an OOM kill ends the call before the supervisor learns why).
	we := &WorkerError{Code: abi.CodeUnavailable, Worker: s.spec.Name, Action: action, Err: err}
	exited := false
	select {
	case <-w.exited: // the watcher may have closed the conn first
		exited = true
	default:
	}
	exit := ""
	switch {
	case exited || errors.Is(err, transport.ErrWorkerGone):
		exit = w.describeExit()
		we.Reason = fmt.Sprintf("the worker exited during the call (%s); it is restarted for the next call", exit)
		if w.oomKilled() {
			we.Code = abi.CodeMemoryLimit
		}
	case errors.Is(err, context.DeadlineExceeded):
		we.Code, we.Reason = abi.CodeTimeout, "it did not answer within the invocation's deadline; the worker was killed and is restarted"
		s.denied(Denial{Rule: "supervisor: invocation deadline", Reason: fmt.Sprintf("action %s did not answer within its deadline; the worker was replaced", action)}, correlationID)
	case errors.Is(err, context.Canceled):
		we.Code, we.Reason = abi.CodeCanceled, "the caller canceled the call; the worker was killed and is restarted"
	default:
		we.Reason = "the worker broke the pipe protocol; it is restarted"
	}
	// The call's, unless the caller only went away: a known caller's
	// strike, not the plugin's crash loop.
	we.charged = chargeable && !errors.Is(err, context.Canceled)
	s.replace(w, we.Reason, exit, chargeable)
	return nil, we
}

// waitWorker returns the running worker, waiting while it restarts.
func (s *Supervisor) waitWorker(ctx context.Context, action string) (*worker, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, &WorkerError{Code: abi.CodeUnavailable, Worker: s.spec.Name, Action: action, Reason: "the plugin was closed (reloaded or shut down)"}
		}
		if err := s.loop.err(); err != nil {
			s.mu.Unlock()
			return nil, &WorkerError{Code: abi.CodeUnavailable, Worker: s.spec.Name, Action: action, Reason: err.Error(), Err: err}
		}
		if w := s.cur; w != nil {
			s.mu.Unlock()
			return w, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-s.loop.gaveUpCh:
		case <-ctx.Done():
			code := abi.CodeTimeout
			if errors.Is(ctx.Err(), context.Canceled) {
				code = abi.CodeCanceled
			}
			return nil, &WorkerError{Code: code, Worker: s.spec.Name, Action: action, Reason: "the worker was restarting and was not ready in time", Err: ctx.Err()}
		}
	}
}

// broadcast wakes the callers waiting for a worker; s.mu is held.
func (s *Supervisor) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Supervisor) denied(d Denial, correlationID string) {
	s.log.Warn("native worker denial", "rule", d.Rule, "reason", d.Reason, "correlation_id", correlationID)
	if s.spec.OnDenial != nil {
		s.spec.OnDenial(d, correlationID)
	}
}

// ready reports whether the worker is running (not restarting).
func (s *Supervisor) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil
}

// replace kills w (if it is still the current worker) and lets the watcher
// start a new one. charged: a call is answerable for the death (see
// WorkerError.charged); the restart then does not count toward the crash
// loop.
func (s *Supervisor) replace(w *worker, reason, exit string, charged bool) {
	s.mu.Lock()
	if s.cur != w {
		s.mu.Unlock()
		return
	}
	s.cur = nil
	s.charged = charged
	s.lastReason = reason
	s.broadcast()
	s.mu.Unlock()
	s.log.Warn("native worker replaced", "pid", w.proc.Pid(), "reason", reason)
	w.kill()
	if exit == "" {
		exit = w.describeExit()
	}
	s.mu.Lock()
	s.lastExit = exit
	s.mu.Unlock()
}

// watch pings the worker, notices it exiting, and restarts it with backoff.
func (s *Supervisor) watch() {
	defer close(s.done)
	tick := time.NewTicker(s.spec.HealthInterval)
	defer tick.Stop()
	for {
		s.mu.Lock()
		w := s.cur
		s.mu.Unlock()
		if w == nil {
			if !s.restart() {
				s.mu.Lock()
				s.broadcast()
				s.mu.Unlock()
				return
			}
			continue
		}
		select {
		case <-s.stop:
			w.kill()
			return
		case <-s.loop.gaveUpCh:
			// Another worker of the plugin crash-looped: the plugin is
			// given up whole, this worker with it.
			s.replace(w, "the plugin was given up", "", false)
			s.mu.Lock()
			s.broadcast()
			s.mu.Unlock()
			return
		case <-w.exited:
			w.conn.Close()
			reason := "it exited between calls"
			inCall := w.inflight.Load() != nil
			if inCall {
				reason = "the worker exited during the call" // as the call's error says
			}
			s.replace(w, reason, "", inCall && w.chargeable.Load())
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.spec.HealthTimeout)
			err := w.conn.Ping(ctx)
			cancel()
			if err != nil {
				reason := fmt.Sprintf("health check failed: %v", err)
				s.event(WorkerEvent{Kind: EventHealthCheckFailed, Pid: w.proc.Pid(), Reason: reason})
				s.replace(w, reason, "", false)
			}
		}
	}
}

// restart starts a new worker after the backoff, or gives up when the
// plugin's workers crashed MaxRestarts times within RestartWindow. It
// returns false when the supervisor should stop.
func (s *Supervisor) restart() bool {
	s.mu.Lock()
	last, exit := s.lastReason, s.lastExit // replace writes lastExit after it kills
	charged := s.charged
	s.charged = false
	s.mu.Unlock()
	if exit != "" {
		last += " (" + exit + ")"
	}
	var backoff time.Duration
	var gaveUp error
	var first bool
	if charged {
		// A caller's call killed it: that caller is backed off (see
		// PluginPool.InvokeAs); the plugin is restarted at once for the
		// others, and its crash loop does not count it.
		backoff, gaveUp = firstBackoff, s.loop.err()
	} else {
		backoff, gaveUp, first = s.loop.next(last)
	}
	if gaveUp != nil {
		if first {
			s.log.Error("native worker given up", "reason", gaveUp)
			s.event(WorkerEvent{Kind: EventGaveUp, Reason: gaveUp.Error(), Exit: exit})
		}
		return false
	}
	select {
	case <-s.stop:
		return false
	case <-s.loop.gaveUpCh:
		return false
	case <-time.After(backoff):
	}
	w, err := s.start(context.Background())
	s.mu.Lock()
	if err != nil {
		s.lastReason, s.lastExit = err.Error(), ""
		s.mu.Unlock()
		s.log.Warn("native worker restart failed", "err", err)
		s.event(WorkerEvent{Kind: EventRestartFailed, Reason: err.Error()})
		return true // counts as a crash; the next round backs off further
	}
	if s.closed {
		s.mu.Unlock()
		w.kill() // before Close returns: nothing of it may outlive the supervisor
		return false
	}
	s.cur = w
	s.broadcast()
	ev := WorkerEvent{Kind: EventRestarted, Pid: w.proc.Pid(), Reason: s.lastReason, Exit: s.lastExit}
	s.mu.Unlock()
	s.event(ev)
	return true
}

// crashLoop counts the restarts of one plugin's workers: a Supervisor has
// its own, the workers of a PluginPool share one, so a plugin that crashes
// in every slot is given up as fast as one that crashes in one.
type crashLoop struct {
	max    int
	window time.Duration

	mu       sync.Mutex
	restarts []time.Time
	backoff  time.Duration
	gaveUp   error
	gaveUpT  time.Time
	gaveUpCh chan struct{}
}

// gaveUpAt is when the loop gave up (zero: it has not).
func (l *crashLoop) gaveUpAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gaveUpT
}

const (
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 10 * time.Second
)

func newCrashLoop(spec WorkerSpec) *crashLoop {
	return &crashLoop{max: spec.MaxRestarts, window: spec.RestartWindow, backoff: firstBackoff, gaveUpCh: make(chan struct{})}
}

// next records a restart and returns how long to back off before it, or
// the error that gives the plugin up (first: this call gave it up).
func (l *crashLoop) next(last string) (backoff time.Duration, gaveUp error, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gaveUp != nil {
		return 0, l.gaveUp, false
	}
	now := time.Now()
	l.restarts = slices.DeleteFunc(l.restarts, func(t time.Time) bool { return now.Sub(t) >= l.window })
	if len(l.restarts) == 0 {
		l.backoff = firstBackoff // calm for a whole window: start over
	}
	if len(l.restarts) >= l.max {
		l.gaveUp = fmt.Errorf("%w: %d restarts within %s, the last because %s; not restarting it again for a cool-down (a plugin starts workers again after it; a lone worker stays stopped): fix the worker, then reload the module (upload it again to moat serve, or restart moat)",
			ErrGaveUp, len(l.restarts), l.window, last)
		l.gaveUpT = time.Now()
		close(l.gaveUpCh)
		return 0, l.gaveUp, true
	}
	l.restarts = append(l.restarts, now)
	backoff = l.backoff
	l.backoff = min(l.backoff*2, maxBackoff)
	return backoff, nil, false
}

func (l *crashLoop) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gaveUp
}

func (l *crashLoop) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.restarts)
}

// tailWriter passes a worker's stderr on and keeps its last bytes, for
// the error of a worker that failed to start.
type tailWriter struct {
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

const stderrTail = 1024

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > stderrTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTail:]...)
	}
	t.mu.Unlock()
	return t.w.Write(p)
}

// Tail is the last stderr bytes, trimmed, as one quoted-safe line.
func (t *tailWriter) Tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(strings.Fields(strings.ToValidUTF8(string(t.buf), "?")), " ")
}

// Restarts is how many times the worker was restarted in the current window.
// For a worker of a PluginPool it counts the restarts of all its workers.
func (s *Supervisor) Restarts() int { return s.loop.count() }

// Pid is the current worker's process id, or 0 while it restarts.
func (s *Supervisor) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.cur.proc.Pid()
}

// Close stops the worker and the supervisor.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.broadcast()
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	return nil
}

// logWriter sends a worker's stderr lines to the log.
type logWriter struct{ log *slog.Logger }

func (l *logWriter) Write(p []byte) (int, error) {
	l.log.Warn("native worker stderr", "text", string(p))
	return len(p), nil
}

// ConfinedLauncher starts supervised workers under the same kernel layers
// as Run (cgroup, namespaces, rlimits, uid, Landlock, seccomp, zero egress
// or the granted targets), with base's limits and the WorkerSpec's command
// and environment (plus abi.PipeEnv). Each worker is a job of its own: its
// own uid, cgroup, root filesystem and job dir (unless WorkerSpec.Dir is
// given). There is no timeout and no CPU-seconds rlimit: a worker lives
// until the supervisor stops it, each invocation has its own deadline, and
// the cgroup's CPU quota bounds its rate. When the process routes its runs
// through a Launcher (UseLauncher: a confined host that can no longer
// execve), the workers start there too.
func ConfinedLauncher(base Spec) WorkerLauncher {
	return func(ctx context.Context, ws *WorkerSpec, extra []*os.File, stderr io.Writer) (WorkerProcess, error) {
		if l := processLauncher.Load(); l != nil {
			return l.Workers(base)(ctx, ws, extra, stderr)
		}
		j, err := start(workerJobSpec(base, ws), extra, stderr, stderr)
		if err != nil {
			return nil, err
		}
		return &confinedProcess{j: j}, nil
	}
}

// workerJobSpec is the confined job of a worker: base with the worker's
// command, environment and dir, and no lifetime limit.
func workerJobSpec(base Spec, ws *WorkerSpec) Spec {
	spec := base
	spec.Command = ws.Command
	if ws.Env != nil {
		spec.Env = ws.Env
	}
	if len(spec.Env) == 0 {
		spec.Env = []string{"PATH=" + DefaultPath, "LANG=C.UTF-8"}
	}
	spec.Env = withPipeEnv(spec.Env)
	if ws.Dir != "" {
		spec.Dir = ws.Dir
	}
	spec.LongLived = true
	return spec
}

type confinedProcess struct {
	j    *job
	once sync.Once
	err  error
	res  *Result
}

// Wait waits for the worker, then removes its cgroup, egress rules and job
// dir: nothing of a dead worker is left behind.
func (p *confinedProcess) Wait() error {
	p.once.Do(func() {
		p.err = p.j.cmd.Wait()
		p.j.kill() // anything it left running in its cgroup
		p.res = p.j.exitResult()
		p.j.cleanup()
		if p.j.survivors != nil {
			p.err = errors.Join(p.err, &SurvivorsError{Command: p.j.spec.Command, Err: p.j.survivors})
		}
	})
	return p.err
}

// Result is what the kernel layers observed of the worker; valid after Wait.
func (p *confinedProcess) Result() *Result { return p.res }

func (p *confinedProcess) Kill()    { p.j.kill() }
func (p *confinedProcess) Pid() int { return p.j.cmd.Process.Pid }
