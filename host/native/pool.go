package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/policy/kernel"
	"golang.org/x/sys/unix"
)

// A Pool keeps confined wrappers started ahead of time, so that a run does
// not wait for the clone into fresh namespaces, for the wrapper's Go
// runtime to start, nor (as root) for the wrapper to join its cgroup: on
// cgroup v1 that join waits out an RCU grace period, the largest single
// cost of a cold start on this machine kind (see the README's spawn
// figures). A warm wrapper has its namespaces and, as root, a job cgroup
// with the default limits, joined while it waited; it blocks reading its
// ConfineSpec from a pipe. A job has claimed it only once the wrapper has
// acknowledged the spec (see claim): a wrapper that dies before that sends
// the job to a cold start, never fails it. When a job claims it, the
// cgroup takes the job's limits (and its usage counters restart), and the
// job dir, uid, Landlock rules and seccomp filter are applied after the
// spec arrives, exactly as for a cold start, so a warm run is confined no
// less than a cold one. A wrapper serves one job; its replacement starts when the job
// has ended, in the job's cgroup once emptied (see recycle).
//
// Runs with egress targets, extra files (supervised workers) or streamed
// output start cold, as do runs when no warm wrapper is ready. Close the
// pool to end its idle wrappers and remove their cgroups.
type Pool struct {
	size    int
	wrapper string

	mu      sync.Mutex
	idle    []*warmWrapper
	free    []*kernel.Cgroup // job cgroups whose processes are gone, for the next warm wrappers (emptied and reset by startWarm)
	filling int
	closed  bool
	failed  int // warm wrappers in a row found dead at their claim
	wg      sync.WaitGroup
}

// maxDeadClaims is how many warm wrappers in a row may be found dead when
// a job claims them before the pool stops starting more: something is
// wrong with the wrapper itself, and cold starts report what.
const maxDeadClaims = 3

// NewPool returns a pool that keeps size wrappers warm (at least 1) of the
// given wrapper binary ("": moat-confine beside the executable, else the
// executable itself, as for Spec.Wrapper). It starts filling in the
// background; runs whose Spec names another wrapper start cold.
func NewPool(size int, wrapper string) *Pool {
	if os.Geteuid() == 0 {
		// Idle wrappers die with the process that started them, but
		// their cgroups stay when it crashed: sweep those first.
		sweepOnce()
	}
	p := &Pool{size: max(size, 1), wrapper: wrapperPath(wrapper)}
	p.refill()
	return p
}

// processPool, when set, serves every Run of this process: see UsePool.
var processPool atomic.Pointer[Pool]

// UsePool makes every later Run of this process (one not routed through a
// Launcher) take its wrapper from p when one is warm: what a long-lived
// host such as moat serve does, so that compilers and native programs
// start warm without each caller knowing of the pool. nil undoes it.
func UsePool(p *Pool) { processPool.Store(p) }

// Run runs spec as the package-level Run does, in a warm wrapper when one
// is ready.
func (p *Pool) Run(ctx context.Context, spec Spec) (*Result, error) {
	return runPooled(ctx, p, spec)
}

// Close ends the idle wrappers and waits for refills in flight.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	idle = append(idle, p.idle...)
	free := p.free
	p.idle, p.free = nil, nil
	p.mu.Unlock()
	for _, w := range idle {
		w.discard()
	}
	for _, cg := range free {
		_ = cg.Destroy()
	}
	return nil
}

// recycle takes back the cgroup of a finished warm job. On cgroup v1 it is
// kept, its processes killed, for a later warm wrapper rather than
// removed (the refill that takes it empties it and resets its limits): removing
// and creating cgroups takes the kernel's cgroup mutex, which another
// wrapper's join holds through its RCU grace period, so a job's cleanup
// would wait on the refill that follows it. v2 has no such wait: there
// the cgroup is removed.
//
// An error is a job whose processes outlived the kill (see
// kernel.Cgroup.Kill); its cgroup is then neither kept nor removable.
func (p *Pool) recycle(cg *kernel.Cgroup) error {
	if cg.V2() {
		return cg.Destroy()
	}
	if err := cg.Kill(); err != nil {
		return cg.Destroy()
	}
	// Emptying its charges and resetting its limits wait for the refill
	// that takes it (startWarm), off the job's path: the job's processes
	// are gone, which is all Run must see before it returns.
	p.mu.Lock()
	if p.closed || len(p.free) >= p.size {
		p.mu.Unlock()
		return cg.Destroy()
	}
	p.free = append(p.free, cg)
	p.mu.Unlock()
	return nil
}

// takeFree returns a recycled cgroup, or nil.
func (p *Pool) takeFree() *kernel.Cgroup {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		cg := p.free[n-1]
		p.free = p.free[:n-1]
		return cg
	}
	return nil
}

// warmLimits are an idle wrapper's: the defaults, until a job claims it.
var warmLimits = kernel.JobLimits{MemoryBytes: DefaultMemory, CPUQuota: DefaultCPUQuota, Pids: DefaultPids}

// warmStatusFD is the wrapper's status pipe in a warm start: fd 3 carries
// the spec, fd 4 the wrapper's acknowledgement of it and then the status.
const warmStatusFD = kernel.ConfineAckFD

// warmAckTimeout bounds the wait for a warm wrapper's acknowledgement of
// its spec. An idle wrapper blocks in one read and answers within a
// millisecond or so; one that has not answered by then is stopped (or
// stuck) and is killed, and the job starts cold.
var warmAckTimeout = 2 * time.Second

// take returns an idle wrapper started with the same wrapper binary and
// clone flags, or nil. A nil pool has none.
func (p *Pool) take(wrapper string, flags uintptr) *warmWrapper {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.idle) - 1; i >= 0; i-- {
		if w := p.idle[i]; w.wrapper == wrapper && w.flags == flags {
			// The refill waits for this job's end (see done): started
			// now, its clone and cgroup join would compete with the job
			// for the CPUs and the kernel's cgroup locks.
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return w
		}
	}
	p.refillLocked() // none ready: start filling now
	return nil
}

// joinedReady reports whether a warm wrapper that already sits in its
// cgroup is idle: the next run will not join a cgroup itself. A nil pool
// has none.
func (p *Pool) joinedReady() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.idle, func(w *warmWrapper) bool { return w.cg != nil })
}

// claimed records whether a warm wrapper took its job.
func (p *Pool) claimed(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok {
		p.failed = 0
	} else {
		p.failed++
	}
}

// done is called when a job that took a warm wrapper has ended and been
// cleaned up: the pool starts its replacement.
func (p *Pool) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
}

func (p *Pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
}

// refillLocked starts one background start per missing wrapper.
func (p *Pool) refillLocked() {
	for !p.closed && p.failed < maxDeadClaims && len(p.idle)+p.filling < p.size {
		p.filling++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			w, err := startWarm(p.wrapper, p.takeFree())
			p.mu.Lock()
			defer p.mu.Unlock()
			p.filling--
			if err != nil {
				return // runs start cold; the next take tries again
			}
			p.idle = append(p.idle, w)
		}()
	}
}

// warmWrapper is a started wrapper waiting for its spec.
type warmWrapper struct {
	cmd     *exec.Cmd
	wrapper string
	flags   uintptr
	specW   *os.File
	statusR *os.File
	stdin   *lateReader
	stdout  *lateWriter
	stderr  *lateWriter
	cg      *kernel.Cgroup // joined while warm (root only); nil once a job owns it
}

// startWarm starts the wrapper for the caller's privilege: as root, the
// namespaces of a zero-egress job and a job cgroup with the default limits
// (recycled when one is given); otherwise also a user namespace, and no
// cgroup.
func startWarm(wrapper string, recycled *kernel.Cgroup) (_ *warmWrapper, err error) {
	root := os.Geteuid() == 0
	attr := childAttr(root, os.Getuid(), os.Getgid(), true)
	cg := recycled
	if cg != nil && (!root || cg.Empty() != nil || cg.Reset(warmLimits) != nil) {
		// A recycled cgroup starts from nothing: the last job's page
		// cache released, the default limits back, its counters
		// restarted (the claim resets them again to the job's).
		_ = cg.Destroy()
		cg = nil
	}
	if root && cg == nil {
		// "warm-": an idle wrapper's cgroup, told apart from a job's in
		// /sys/fs/cgroup (it becomes the job's when a job claims it).
		if cg, err = kernel.NewJobCgroup(kernel.JobCgroupName("warm", newID()), warmLimits); err != nil {
			return nil, err
		}
	}
	if cg != nil {
		defer func() {
			if err != nil {
				cg.Destroy()
			}
		}()
		if cg.V2() {
			fd, err := unix.Open(cg.Dir(""), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, err
			}
			defer unix.Close(fd)
			attr.UseCgroupFD, attr.CgroupFD = true, fd
		}
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		specR.Close()
		specW.Close()
		return nil, err
	}
	w := &warmWrapper{wrapper: wrapper, flags: attr.Cloneflags, specW: specW, statusR: statusR,
		stdin: newLateReader(), stdout: newLateWriter(), stderr: newLateWriter()}
	w.cmd = &exec.Cmd{
		Path:        w.wrapper,
		Args:        []string{"moat-confine"},
		Env:         []string{kernel.ConfineEnv + "=" + kernel.ConfineFromFD3},
		Dir:         "/",
		Stdin:       w.stdin,
		Stdout:      w.stdout,
		Stderr:      w.stderr,
		ExtraFiles:  []*os.File{specR, statusW}, // fds 3 and 4
		SysProcAttr: attr,
		WaitDelay:   2 * time.Second,
	}
	err = w.cmd.Start()
	specR.Close()
	statusW.Close()
	if err != nil {
		specW.Close()
		statusR.Close()
		return nil, err
	}
	w.cg = cg
	if cg != nil && !cg.V2() {
		// The slow part of a cold start, paid here while nobody waits.
		if err := cg.Add(w.cmd.Process.Pid); err != nil {
			w.discard()
			return nil, err
		}
	}
	return w, nil
}

// claim gives the wrapper its job: the spec, then, once the wrapper has
// acknowledged it, stdin and the output buffers. The write alone proves
// nothing: a wrapper alive when its spec went into the pipe may die the
// next moment, and a job handed to it would fail for a reason of the
// pool's own. So the claim counts only on the acknowledgement byte (see
// kernel.ConfineAck), read from the status pipe; on an error the wrapper
// has been killed and reaped, nothing of the job reached it but the spec,
// and the caller starts the job cold.
func (w *warmWrapper) claim(spec, stdin []byte, stdout, stderr io.Writer) error {
	_, err := w.specW.Write(spec)
	if cerr := w.specW.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		err = fmt.Errorf("native: warm wrapper: write its spec: %w", err)
	} else {
		err = w.awaitAck()
	}
	if err != nil {
		w.stdin.bind(bytes.NewReader(nil))
		w.stdout.bind(io.Discard)
		w.stderr.bind(io.Discard)
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
		return err
	}
	w.stdin.bind(bytes.NewReader(stdin))
	w.stdout.bind(stdout)
	w.stderr.bind(stderr)
	return nil
}

// awaitAck reads the wrapper's acknowledgement of its spec, the first byte
// on its status pipe, within warmAckTimeout.
func (w *warmWrapper) awaitAck() error {
	if err := w.statusR.SetReadDeadline(time.Now().Add(warmAckTimeout)); err != nil {
		return fmt.Errorf("native: warm wrapper: status pipe: %w", err)
	}
	defer w.statusR.SetReadDeadline(time.Time{})
	var b [1]byte
	_, err := io.ReadFull(w.statusR, b[:])
	switch {
	case err == nil && b[0] == kernel.ConfineAck:
		return nil
	case err == nil:
		return fmt.Errorf("native: warm wrapper %s answered its spec with %q, not the acknowledgement (another moat version's wrapper?)", w.wrapper, b[0])
	case errors.Is(err, io.EOF):
		return fmt.Errorf("native: warm wrapper %s died before it acknowledged its spec", w.wrapper)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("native: warm wrapper %s did not acknowledge its spec within %s", w.wrapper, warmAckTimeout)
	default:
		return fmt.Errorf("native: warm wrapper %s: read its acknowledgement: %w", w.wrapper, err)
	}
}

// discard ends an unclaimed wrapper: without a spec it exits at once.
func (w *warmWrapper) discard() {
	w.stdin.bind(bytes.NewReader(nil))
	w.stdout.bind(io.Discard)
	w.stderr.bind(io.Discard)
	w.specW.Close()
	done := make(chan struct{})
	go func() {
		_ = w.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		_ = w.cmd.Process.Kill()
		<-done
	}
	w.statusR.Close()
	if w.cg != nil {
		_ = w.cg.Destroy()
		w.cg = nil
	}
}

// lateReader blocks reads until bind gives it a source: a warm wrapper's
// stdin is not known until a job claims it.
type lateReader struct {
	once  sync.Once
	ready chan struct{}
	r     io.Reader
}

func newLateReader() *lateReader { return &lateReader{ready: make(chan struct{})} }

func (l *lateReader) bind(r io.Reader) {
	l.once.Do(func() {
		l.r = r
		close(l.ready)
	})
}

func (l *lateReader) Read(p []byte) (int, error) {
	<-l.ready
	return l.r.Read(p)
}

// lateWriter blocks writes until bind names the destination.
type lateWriter struct {
	once  sync.Once
	ready chan struct{}
	w     io.Writer
}

func newLateWriter() *lateWriter { return &lateWriter{ready: make(chan struct{})} }

func (l *lateWriter) bind(w io.Writer) {
	l.once.Do(func() {
		l.w = w
		close(l.ready)
	})
}

func (l *lateWriter) Write(p []byte) (int, error) {
	<-l.ready
	if l.w == nil {
		return 0, errors.New("native: no output bound")
	}
	return l.w.Write(p)
}
