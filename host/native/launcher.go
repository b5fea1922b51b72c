package native

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// A Launcher runs native jobs for a host that has confined itself. Once the
// host's seccomp filter denies execve, it cannot start a process; so before
// confining, it starts the launcher (this binary again, in launcher mode),
// and from then on every native run is a request to it over a pipe. The
// launcher holds nothing but the ability to create confined children: it
// reads Specs, runs them with Run, and writes Results back. It dies with
// the host (parent-death signal, and EOF on its pipe).
type Launcher struct {
	cmd  *exec.Cmd
	w    *os.File
	wmu  sync.Mutex
	mu   sync.Mutex
	next uint64
	wait map[uint64]chan launchReply
	dead chan struct{}
	err  error
}

// LauncherEnv marks a process started as a launcher.
const LauncherEnv = "MOAT_LAUNCHER"

type launchRequest struct {
	ID     uint64 `json:"id"`
	Spec   *Spec  `json:"spec,omitempty"`
	Cancel bool   `json:"cancel,omitempty"`
}

type launchReply struct {
	ID     uint64  `json:"id"`
	Result *Result `json:"result,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// StartLauncher starts the launcher: the running executable (which must
// call LauncherMain first thing in main, as moat does) with LauncherEnv set.
func StartLauncher() (*Launcher, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", "moat-launcher")
	cmd.Env = append(os.Environ(), LauncherEnv+"=1")
	cmd.ExtraFiles = []*os.File{reqR, repW} // fds 3 and 4
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		reqR.Close()
		reqW.Close()
		repR.Close()
		repW.Close()
		return nil, fmt.Errorf("native: start the launcher: %w", err)
	}
	reqR.Close()
	repW.Close()
	l := &Launcher{cmd: cmd, w: reqW, wait: map[uint64]chan launchReply{}, dead: make(chan struct{})}
	go l.read(repR)
	return l, nil
}

func (l *Launcher) read(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var rep launchReply
		if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
			continue
		}
		l.mu.Lock()
		ch := l.wait[rep.ID]
		delete(l.wait, rep.ID)
		l.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
	l.mu.Lock()
	l.err = errors.New("native: the launcher exited")
	l.mu.Unlock()
	close(l.dead)
}

func (l *Launcher) send(req launchRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	_, err = l.w.Write(append(b, '\n'))
	return err
}

// Run runs spec through the launcher; it behaves as the package-level Run.
// Canceling ctx kills the job.
func (l *Launcher) Run(ctx context.Context, spec Spec) (*Result, error) {
	ch := make(chan launchReply, 1)
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return nil, l.err
	}
	l.next++
	id := l.next
	l.wait[id] = ch
	l.mu.Unlock()
	if err := l.send(launchRequest{ID: id, Spec: &spec}); err != nil {
		return nil, fmt.Errorf("native: launcher: %w", err)
	}
	select {
	case rep := <-ch:
		if rep.Error != "" {
			return nil, errors.New(rep.Error)
		}
		return rep.Result, nil
	case <-ctx.Done():
		_ = l.send(launchRequest{ID: id, Cancel: true})
		select {
		case rep := <-ch:
			if rep.Result != nil {
				return rep.Result, nil
			}
			return nil, ctx.Err()
		case <-l.dead:
			return nil, l.err
		}
	case <-l.dead:
		return nil, l.err
	}
}

// Close stops the launcher.
func (l *Launcher) Close() error {
	l.w.Close()
	<-l.dead
	return l.cmd.Wait()
}

// LauncherMain serves launch requests when this process was started by
// StartLauncher, and returns at once otherwise. Call it first thing in
// main (and in TestMain of tests that start a launcher).
func LauncherMain() {
	if os.Getenv(LauncherEnv) != "1" {
		return
	}
	os.Unsetenv(LauncherEnv)
	in := os.NewFile(3, "launch-requests")
	out := os.NewFile(4, "launch-replies")
	var wmu sync.Mutex
	reply := func(r launchReply) {
		b, _ := json.Marshal(r)
		wmu.Lock()
		out.Write(append(b, '\n'))
		wmu.Unlock()
	}
	var mu sync.Mutex
	cancels := map[uint64]context.CancelFunc{}
	var wg sync.WaitGroup
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var req launchRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			continue
		}
		if req.Cancel {
			mu.Lock()
			if c := cancels[req.ID]; c != nil {
				c()
			}
			mu.Unlock()
			continue
		}
		if req.Spec == nil {
			reply(launchReply{ID: req.ID, Error: "native: launcher: request without a spec"})
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		mu.Lock()
		cancels[req.ID] = cancel
		mu.Unlock()
		wg.Add(1)
		go func(req launchRequest) {
			defer wg.Done()
			res, err := Run(ctx, *req.Spec)
			mu.Lock()
			delete(cancels, req.ID)
			mu.Unlock()
			cancel()
			rep := launchReply{ID: req.ID, Result: res}
			if err != nil {
				rep.Error = err.Error()
			}
			reply(rep)
		}(req)
	}
	// The host closed its end (or died): cancel every job, wait for their
	// cleanup, and exit.
	mu.Lock()
	for _, c := range cancels {
		c()
	}
	mu.Unlock()
	wg.Wait()
	os.Exit(0)
}
