package native

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/policy/kernel"
)

// A Pool keeps confined wrappers started ahead of time, so that a run does
// not wait for the clone into fresh namespaces and for the wrapper's Go
// runtime to start: together most of the layers' cost on a short job
// (about 7 of the 11 ms they add to /bin/true on this machine kind; see the
// README's spawn table). A warm wrapper has its namespaces and nothing
// else: it blocks reading its ConfineSpec from a pipe. The job's cgroup,
// job dir, uid, Landlock rules and seccomp filter are all applied after
// the spec arrives, exactly as for a cold start, so a warm run is confined
// no less than a cold one.
//
// Runs with egress targets, extra files (supervised workers) or streamed
// output start cold. Close the pool to end its idle wrappers.
type Pool struct {
	size    int
	wrapper string

	mu      sync.Mutex
	idle    []*warmWrapper
	filling int
	closed  bool
	wg      sync.WaitGroup
}

// NewPool returns a pool that keeps size wrappers warm (at least 1) of the
// given wrapper binary ("": moat-confine beside the executable, else the
// executable itself, as for Spec.Wrapper). It starts filling in the
// background; runs whose Spec names another wrapper start cold.
func NewPool(size int, wrapper string) *Pool {
	p := &Pool{size: max(size, 1), wrapper: wrapperPath(wrapper)}
	p.refill()
	return p
}

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
	p.idle = nil
	p.mu.Unlock()
	for _, w := range idle {
		w.discard()
	}
	return nil
}

// warmStatusFD is the wrapper's status pipe in a warm start: fd 3 carries
// the spec, fd 4 the status.
const warmStatusFD = 4

// take returns an idle wrapper started with the same wrapper binary and
// clone flags, or nil. A nil pool has none.
func (p *Pool) take(wrapper string, flags uintptr) *warmWrapper {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.refillLocked()
	for i := len(p.idle) - 1; i >= 0; i-- {
		if w := p.idle[i]; w.wrapper == wrapper && w.flags == flags {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return w
		}
	}
	return nil
}

func (p *Pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
}

// refillLocked starts one background start per missing wrapper.
func (p *Pool) refillLocked() {
	for !p.closed && len(p.idle)+p.filling < p.size {
		p.filling++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			w, err := startWarm(p.wrapper)
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
}

// startWarm starts the wrapper for the caller's privilege: as root, the
// namespaces of a zero-egress job; otherwise also a user namespace.
func startWarm(wrapper string) (*warmWrapper, error) {
	root := os.Geteuid() == 0
	attr := childAttr(root, os.Getuid(), os.Getgid(), true)
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
	return w, nil
}

// claim gives the wrapper its job: the spec, stdin and the output buffers.
func (w *warmWrapper) claim(spec, stdin []byte, stdout, stderr io.Writer) error {
	w.stdin.bind(bytes.NewReader(stdin))
	w.stdout.bind(stdout)
	w.stderr.bind(stderr)
	_, err := w.specW.Write(spec)
	if cerr := w.specW.Close(); err == nil {
		err = cerr
	}
	return err
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
