package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Process is a confined job that its caller talks to while it runs: a
// session's command (server/sessions), which writes its stdin, reads its
// output as it is produced, signals it and may leave it running past the
// request that started it. Run is the one-shot form; a Process is the
// same job under the same layers (Spec), with pipes in place of buffers.
type Process struct {
	pid     int
	stdin   *os.File // the write end; nil without Stdio.Stdin
	signal  func(syscall.Signal) error
	kill    func()
	cgroups []string
	done    chan struct{}
	res     *Result
	err     error
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

// Start starts spec as a Process. Its Timeout bounds its life as Run's
// does; Wait reports it, once its processes, cgroup and job dir are gone.
// In a host that confined itself the job starts through the launcher
// (UseLauncher), its pipes passed to it, as a worker's are.
func Start(spec Spec, stdio Stdio) (*Process, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, errors.New("native: no command")
	}
	out, errw := stdio.Stdout, stdio.Stderr
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = io.Discard
	}
	var stdinR, stdinW *os.File
	if stdio.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("native: stdin: %w", err)
		}
		stdinR, stdinW = r, w
	}
	var p *Process
	var err error
	if l := processLauncher.Load(); l != nil {
		p, err = l.startProcess(spec, stdinR, out, errw)
	} else {
		p, err = startLocal(spec, stdinR, out, errw)
	}
	if stdinR != nil {
		stdinR.Close() // the job has its copy
	}
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		return nil, err
	}
	p.stdin = stdinW
	go func() {
		<-p.done
		if p.stdin != nil {
			p.stdin.Close()
		}
	}()
	return p, nil
}

func startLocal(spec Spec, stdinR *os.File, out, errw io.Writer) (*Process, error) {
	var in io.Reader
	if stdinR != nil {
		in = stdinR
	}
	j, err := startIO(nil, spec, nil, in, out, errw)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Process{pid: j.cmd.Process.Pid, signal: func(sig syscall.Signal) error { return j.cmd.Process.Signal(sig) }, kill: cancel, done: make(chan struct{})}
	if j.cg != nil {
		for _, f := range j.cg.ProcsFiles() {
			p.cgroups = append(p.cgroups, strings.TrimSuffix(f, "/cgroup.procs"))
		}
	}
	go func() {
		defer close(p.done)
		defer cancel()
		p.res, p.err = j.wait(ctx, spec)
	}()
	return p, nil
}

// startProcess starts spec as a Process through the launcher: its stdin,
// stdout and stderr go as pipe ends over the socket, and the launcher
// reports the job's start and its end. The timeout is kept here.
func (l *Launcher) startProcess(spec Spec, stdinR *os.File, out, errw io.Writer) (*Process, error) {
	if stdinR == nil {
		// Spec.Stdin, or nothing: a pipe fed from here, then closed.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		go func() {
			_, _ = w.Write(spec.Stdin)
			w.Close()
		}()
		defer r.Close()
		stdinR = r
	}
	or, ow, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	er, ew, err := os.Pipe()
	if err != nil {
		or.Close()
		ow.Close()
		return nil, err
	}
	var copies sync.WaitGroup
	copies.Add(2)
	for _, c := range []struct {
		r *os.File
		w io.Writer
	}{{or, out}, {er, errw}} {
		go func() {
			defer copies.Done()
			_, _ = io.Copy(c.w, c.r)
			c.r.Close()
		}()
	}
	ch := make(chan launchReply, 2)
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		ow.Close()
		ew.Close()
		return nil, l.err
	}
	l.next++
	id := l.next
	l.wait[id] = ch
	l.mu.Unlock()
	err = l.sendWithFiles(launchRequest{ID: id, Spec: &spec, Worker: true, Stdio: true}, []*os.File{stdinR, ow, ew})
	ow.Close() // the launcher has its copies
	ew.Close()
	if err != nil {
		return nil, fmt.Errorf("native: launcher: %w", err)
	}
	var rep launchReply
	select {
	case rep = <-ch:
	case <-l.dead:
		return nil, l.err
	}
	if rep.Error != "" {
		return nil, errors.New(rep.Error)
	}
	p := &Process{pid: rep.Pid, done: make(chan struct{})}
	p.kill = func() { _ = l.send(launchRequest{ID: id, Cancel: true}) }
	p.signal = func(sig syscall.Signal) error { return l.send(launchRequest{ID: id, Signal: int(sig)}) }
	timeout := withDefaults(spec).Timeout
	timedOut := make(chan struct{})
	timer := time.AfterFunc(timeout, func() { close(timedOut); p.kill() })
	go func() {
		defer close(p.done)
		select {
		case rep = <-ch:
		case <-l.dead:
			rep = launchReply{Error: l.err.Error()}
		}
		timer.Stop()
		copies.Wait()
		res := rep.Result
		if res == nil {
			res = &Result{Status: StatusKilled, ExitCode: -1}
		}
		select {
		case <-timedOut:
			res.Status, res.Reason = StatusTimeout, fmt.Sprintf("wall-clock limit %s passed", timeout)
		default:
		}
		p.res = res
		if rep.Survivors {
			p.res, p.err = nil, &SurvivorsError{Command: spec.Command, Err: errors.New(rep.Error)}
		}
	}()
	return p, nil
}

// Pid is the job's process id in moat's pid namespace (the init of its
// own namespace).
func (p *Process) Pid() int { return p.pid }

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
	return p.signal(sig)
}

// Kill ends every process of the job (its cgroup, its pid namespace).
func (p *Process) Kill() { p.kill() }

// Done is closed once the job has ended and everything it held is gone.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the job and reports it, as Run does.
func (p *Process) Wait() (*Result, error) {
	<-p.done
	return p.res, p.err
}

// CgroupDirs are the job's cgroup directories (one per hierarchy), for a
// caller that checks they are gone after Wait; nil without a cgroup or
// through a launcher.
func (p *Process) CgroupDirs() []string { return p.cgroups }

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
