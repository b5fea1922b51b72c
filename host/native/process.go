package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// A Process is a confined job that its caller talks to while it runs: a
// session's command (server/sessions), which writes its stdin, reads its
// output as it is produced, signals it and may leave it running past the
// request that started it. Run is the one-shot form; a Process is the
// same job under the same layers (Spec), with pipes in place of buffers.
type Process struct {
	j      *job
	stdin  *os.File // the write end; nil without Stdio.Stdin
	cancel context.CancelFunc
	done   chan struct{}
	res    *Result
	err    error
}

// Stdio is what a Process is connected to. Stdout and Stderr receive the
// output as the job writes it (nil discards it); their writes must not
// block for long, since the job's pipe fills behind them.
type Stdio struct {
	// Stdin, when set, gives the job a pipe the caller writes through
	// Process.Write and closes with CloseStdin; else stdin is Spec.Stdin.
	Stdin          bool
	Stdout, Stderr io.Writer
}

// ErrLauncher is the refusal of Start in a host that confined itself: its
// native jobs run through the launcher, which carries whole runs (Run),
// not pipes.
var ErrLauncher = errors.New("native: an interactive process cannot start in a confined host (moat serve --confine): its jobs run through the launcher, which takes whole runs only")

// Start starts spec as a Process. Its Timeout bounds its life as Run's
// does; Wait reports it, once its processes, cgroup and job dir are gone.
func Start(spec Spec, stdio Stdio) (*Process, error) {
	if processLauncher.Load() != nil {
		return nil, ErrLauncher
	}
	var stdinR io.Reader
	var stdinW *os.File
	if stdio.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("native: stdin: %w", err)
		}
		stdinR, stdinW = r, w
		defer r.Close() // the child has its copy once started
	}
	out, errw := stdio.Stdout, stdio.Stderr
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = io.Discard
	}
	j, err := startIO(nil, spec, nil, stdinR, out, errw)
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Process{j: j, stdin: stdinW, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cancel()
		p.res, p.err = j.wait(ctx, spec)
		if p.stdin != nil {
			p.stdin.Close()
		}
	}()
	return p, nil
}

// Pid is the job's process id in moat's pid namespace (the init of its
// own namespace).
func (p *Process) Pid() int { return p.j.cmd.Process.Pid }

// Write writes to the job's stdin (Stdio.Stdin); it fails once stdin is
// closed or the job ended.
func (p *Process) Write(b []byte) (int, error) {
	if p.stdin == nil {
		return 0, errors.New("native: the process has no stdin pipe")
	}
	return p.stdin.Write(b)
}

// CloseStdin closes the job's stdin: it reads EOF.
func (p *Process) CloseStdin() error {
	if p.stdin == nil {
		return nil
	}
	return p.stdin.Close()
}

// Signal sends sig to the job's first process, through its pidfd (never
// by number: see job.kill). The first process is the init of the job's
// pid namespace, which the kernel spares every signal it has no handler
// for, SIGKILL excepted: a caller that wants SIGTERM to end a program
// runs it under an init that forwards it (sessions' commands do).
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return errors.New("native: the process has ended")
	default:
	}
	if sig == syscall.SIGKILL {
		p.Kill()
		return nil
	}
	return p.j.cmd.Process.Signal(sig)
}

// Kill ends every process of the job (its cgroup, its pid namespace).
func (p *Process) Kill() { p.cancel() }

// Done is closed once the job has ended and everything it held is gone.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the job and reports it, as Run does.
func (p *Process) Wait() (*Result, error) {
	<-p.done
	return p.res, p.err
}

// CgroupDirs are the job's cgroup directories (one per hierarchy), for a
// caller that checks they are gone after Wait; nil without a cgroup.
func (p *Process) CgroupDirs() []string {
	if p.j.cg == nil {
		return nil
	}
	var out []string
	for _, f := range p.j.cg.ProcsFiles() {
		out = append(out, f[:len(f)-len("/cgroup.procs")])
	}
	return out
}

// UIDLease is a uid of the job range held by its caller (LeaseUID), for
// jobs that must share one: the commands of a session, which write one
// workspace. No job that leases its own uid gets it while it is held.
type UIDLease struct{ l *uidLease }

// LeaseUID leases a uid of the range until Release (or the process's
// exit). Only root leases: other callers' jobs keep their own uid.
func LeaseUID() (*UIDLease, error) {
	l, err := leaseUID()
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	return &UIDLease{l: l}, nil
}

// UID is the leased uid (its gid is the same number).
func (u *UIDLease) UID() uint32 { return uint32(u.l.uid) }

// Release frees the uid.
func (u *UIDLease) Release() { u.l.release() }

// HandOver makes dir and what is in it owned by uid and gid, never
// following a symlink and leaving hard-linked files alone: what Start
// does to a given Spec.Dir, for a directory a job sees through
// Spec.Mounts.
func HandOver(dir string, uid, gid uint32) error { return handOver(dir, int(uid), int(gid)) }
