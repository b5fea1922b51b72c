package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
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
type Supervisor struct {
	spec WorkerSpec
	log  *slog.Logger

	mu       sync.Mutex
	cur      *worker
	restarts []time.Time // restarts within spec.RestartWindow
	backoff  time.Duration
	gaveUp   error
	closed   bool
	actions  []string

	stop chan struct{}
	done chan struct{}
}

// WorkerSpec describes a native worker.
type WorkerSpec struct {
	Name    string   // the module name, for logs and errors
	Command []string // argv
	Env     []string
	Dir     string
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
	// supervisor gives up.
	MaxRestarts   int
	RestartWindow time.Duration
	Logger        *slog.Logger
	Stderr        io.Writer // the worker's stderr; default: the log
	// OnDenial is told of every refusal by a kernel layer or a deadline
	// that the supervisor observes (an OOM kill, the pids limit, an
	// invocation past its deadline), with the correlation id of the
	// invocation in flight, if any. Hosts point it at the audit trail
	// (AuditDenials).
	OnDenial func(d Denial, correlationID string)
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
	cmd.Env, cmd.Dir, cmd.ExtraFiles, cmd.Stderr = spec.Env, spec.Dir, extra, stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &execProcess{cmd: cmd}, nil
}

type execProcess struct{ cmd *exec.Cmd }

func (p *execProcess) Wait() error { return p.cmd.Wait() }
func (p *execProcess) Kill()       { _ = p.cmd.Process.Kill() }
func (p *execProcess) Pid() int    { return p.cmd.Process.Pid }

type worker struct {
	inflight atomic.Pointer[string] // correlation id of the call in flight
	proc     WorkerProcess
	conn     *transport.PipeConn
	exited   chan struct{}
	exit     error
	toW      *os.File // host's write end
	fromW    *os.File // host's read end
}

// ErrGaveUp wraps the error of a supervisor that stopped restarting.
var ErrGaveUp = errors.New("the worker keeps crashing")

// Supervise starts the worker and returns once it is ready.
func Supervise(ctx context.Context, spec WorkerSpec) (*Supervisor, error) {
	if len(spec.Command) == 0 {
		return nil, fmt.Errorf("native worker %s: no command", spec.Name)
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
	if spec.Logger == nil {
		spec.Logger = slog.Default()
	}
	s := &Supervisor{spec: spec, log: spec.Logger.With("worker", spec.Name), backoff: 100 * time.Millisecond,
		stop: make(chan struct{}), done: make(chan struct{})}
	w, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	s.cur = w
	go s.watch()
	return s, nil
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
	stderr := s.spec.Stderr
	if stderr == nil {
		stderr = &logWriter{log: s.log}
	}
	proc, err := s.spec.Launch(ctx, &s.spec, []*os.File{wr, ww}, stderr)
	wr.Close() // the child has its copies
	ww.Close()
	if err != nil {
		hw.Close()
		hr.Close()
		return nil, fmt.Errorf("native worker %s: start %s: %w", s.spec.Name, s.spec.Command[0], err)
	}
	w := &worker{proc: proc, conn: transport.NewPipeConn(hr, hw), exited: make(chan struct{}), toW: hw, fromW: hr}
	go func() {
		w.exit = proc.Wait()
		if r, ok := proc.(workerResult); ok {
			corr := ""
			if c := w.inflight.Load(); c != nil {
				corr = *c
			}
			for _, d := range r.Result().Denials(nil) {
				s.denied(d, corr)
			}
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
			reason = fmt.Errorf("it exited before saying ready (%v)", w.exitErr())
		case errors.Is(err, context.DeadlineExceeded):
			reason = fmt.Errorf("it did not say ready within %s", s.spec.StartTimeout)
		}
		return nil, fmt.Errorf("native worker %s: %w", s.spec.Name, reason)
	}
	s.mu.Lock()
	s.actions = actions
	s.mu.Unlock()
	s.log.Info("native worker ready", "pid", proc.Pid(), "actions", actions)
	return w, nil
}

func (w *worker) exitErr() error {
	select {
	case <-w.exited:
		if w.exit == nil {
			return errors.New("exit status 0")
		}
		return w.exit
	case <-time.After(time.Second):
		return errors.New("still running")
	}
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
// When the worker dies or breaks the protocol during the call, the call
// fails and the worker is restarted; the error of an action (an
// *abi.Error) leaves the worker running.
func (s *Supervisor) Invoke(ctx context.Context, d transport.Dispatcher, action string, input []byte, correlationID string) ([]byte, error) {
	w, err := s.worker()
	if err != nil {
		return nil, err
	}
	w.inflight.Store(&correlationID)
	out, err := w.conn.Invoke(ctx, d, action, input, correlationID)
	var ae *abi.Error
	if err == nil || errors.As(err, &ae) {
		// Answered: the worker is idle again. A failed call keeps its id,
		// for the exit that usually follows (an OOM kill ends the call
		// before the supervisor learns why).
		w.inflight.Store(nil)
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		s.denied(Denial{Rule: "supervisor: invocation deadline", Reason: fmt.Sprintf("action %s did not answer within its deadline; the worker was replaced", action)}, correlationID)
	}
	if err != nil && !errors.As(err, &ae) {
		// Timeout, crash or protocol break: this worker is done.
		reason := err
		exited := false
		select {
		case <-w.exited: // the watcher may have closed the conn first
			exited = true
		default:
		}
		if exited || errors.Is(err, transport.ErrWorkerGone) {
			reason = fmt.Errorf("the worker exited during the call (%v)", w.exitErr())
		}
		s.replace(w, reason)
		return nil, fmt.Errorf("native worker %s: action %s: %w", s.spec.Name, action, reason)
	}
	return out, err
}

func (s *Supervisor) denied(d Denial, correlationID string) {
	s.log.Warn("native worker denial", "rule", d.Rule, "reason", d.Reason, "correlation_id", correlationID)
	if s.spec.OnDenial != nil {
		s.spec.OnDenial(d, correlationID)
	}
}

func (s *Supervisor) worker() (*worker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("native worker %s: supervisor closed", s.spec.Name)
	}
	if s.gaveUp != nil {
		return nil, s.gaveUp
	}
	if s.cur == nil {
		return nil, fmt.Errorf("native worker %s: restarting; try again shortly", s.spec.Name)
	}
	return s.cur, nil
}

// replace kills w (if it is still the current worker) and lets the watcher
// start a new one.
func (s *Supervisor) replace(w *worker, reason error) {
	s.mu.Lock()
	if s.cur != w {
		s.mu.Unlock()
		return
	}
	s.cur = nil
	s.mu.Unlock()
	s.log.Warn("native worker replaced", "pid", w.proc.Pid(), "reason", reason)
	w.kill()
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
				return
			}
			continue
		}
		select {
		case <-s.stop:
			w.kill()
			return
		case <-w.exited:
			w.conn.Close()
			s.replace(w, fmt.Errorf("exited: %v", w.exitErr()))
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.spec.HealthTimeout)
			err := w.conn.Ping(ctx)
			cancel()
			if err != nil {
				s.replace(w, fmt.Errorf("health check failed: %w", err))
			}
		}
	}
}

// restart starts a new worker after the backoff, or gives up when the
// worker crashed MaxRestarts times within RestartWindow. It returns false
// when the supervisor should stop.
func (s *Supervisor) restart() bool {
	s.mu.Lock()
	now := time.Now()
	recent := s.restarts[:0]
	for _, t := range s.restarts {
		if now.Sub(t) < s.spec.RestartWindow {
			recent = append(recent, t)
		}
	}
	s.restarts = recent
	if len(s.restarts) >= s.spec.MaxRestarts {
		s.gaveUp = fmt.Errorf("native worker %s: %w: %d restarts within %s; not restarting it again (fix the worker, then reload the module)",
			s.spec.Name, ErrGaveUp, len(s.restarts), s.spec.RestartWindow)
		s.mu.Unlock()
		s.log.Error("native worker given up", "err", s.gaveUp)
		return false
	}
	s.restarts = append(s.restarts, now)
	backoff := s.backoff
	s.backoff = min(s.backoff*2, 10*time.Second)
	s.mu.Unlock()

	select {
	case <-s.stop:
		return false
	case <-time.After(backoff):
	}
	w, err := s.start(context.Background())
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.log.Warn("native worker restart failed", "err", err)
		return true // counts as a crash; the next round backs off further
	}
	if s.closed {
		w.kill() // before Close returns: nothing of it may outlive the supervisor
		return false
	}
	s.cur = w
	return true
}

// Restarts is how many times the worker was restarted in the current window.
func (s *Supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.restarts)
}

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
// and environment. There is no timeout: a worker lives until the supervisor
// stops it; its invocations have their own deadlines.
func ConfinedLauncher(base Spec) WorkerLauncher {
	return func(ctx context.Context, ws *WorkerSpec, extra []*os.File, stderr io.Writer) (WorkerProcess, error) {
		spec := base
		spec.Command = ws.Command
		if ws.Env != nil {
			spec.Env = ws.Env
		}
		if ws.Dir != "" {
			spec.Dir = ws.Dir
		}
		j, err := start(spec, extra, stderr, stderr)
		if err != nil {
			return nil, err
		}
		return &confinedProcess{j: j}, nil
	}
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
	})
	return p.err
}

// Result is what the kernel layers observed of the worker; valid after Wait.
func (p *confinedProcess) Result() *Result { return p.res }

func (p *confinedProcess) Kill()    { p.j.kill() }
func (p *confinedProcess) Pid() int { return p.j.cmd.Process.Pid }
