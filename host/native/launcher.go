package native

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// A Launcher runs native jobs for a host that has confined itself. Once the
// host's seccomp filter denies execve, it cannot start a process; so before
// confining, it starts the launcher (this binary again, in launcher mode),
// and from then on every native run is a request to it over a pipe. The
// launcher holds nothing but the ability to create confined children: it
// reads Specs, runs them with Run, and writes Results back.
//
// It ends when its request pipe reads EOF: when the host closes it
// (Close) or exits, whatever way. It then kills its jobs and workers,
// waits until their cgroups are empty and removed, and exits. It ignores
// SIGINT, SIGTERM and SIGHUP: those reach a whole process group or
// service (Ctrl-C, systemd's stop), and a launcher that died of one would
// leave its jobs mid-kill (a v1 cgroup frozen for good) and stay a zombie
// while the host drained its requests. For the same reason it has no
// parent-death signal: the EOF is as certain, and lets it clean up.
type Launcher struct {
	cmd     *exec.Cmd
	waitErr error // the launcher's exit, once dead is closed
	w       *os.File
	sock    *os.File // unix seqpacket socket: the pipe ends of workers go over it
	wmu     sync.Mutex
	mu      sync.Mutex
	next    uint64
	wait    map[uint64]chan launchReply
	dead    chan struct{}
	err     error
}

// processLauncher, when set, runs every Run and Pool.Run of this process:
// see UseLauncher.
var processLauncher atomic.Pointer[Launcher]

// UseLauncher routes every later Run and Pool.Run of this process through
// l: what a host does just before it confines itself (after which it can
// no longer execve), so that code written against Run (the languages'
// compilers and native programs) keeps working unchanged. nil undoes it.
func UseLauncher(l *Launcher) { processLauncher.Store(l) }

// LauncherEnv marks a process started as a launcher.
const LauncherEnv = "MOAT_LAUNCHER"

type launchRequest struct {
	ID     uint64 `json:"id"`
	Spec   *Spec  `json:"spec,omitempty"`
	Cancel bool   `json:"cancel,omitempty"` // a run: cancel it; a worker: kill it
	// Worker starts Spec as a supervised worker: its inherited files (the
	// pipe ends, then stderr) arrive on the socket just before this line.
	Worker bool `json:"worker,omitempty"`
	// Stdio, with Worker, starts Spec as a Process: the files are its
	// stdin, stdout and stderr.
	Stdio bool `json:"stdio,omitempty"`
	// Signal sends this signal to the worker or Process ID.
	Signal int `json:"signal,omitempty"`
}

type launchReply struct {
	ID     uint64  `json:"id"`
	Result *Result `json:"result,omitempty"`
	Error  string  `json:"error,omitempty"`
	// Started: a worker is running as Pid; its exit comes as a second
	// reply with Result and, for a non-zero exit, Error.
	Started bool `json:"started,omitempty"`
	Pid     int  `json:"pid,omitempty"`
	// Survivors: Error is a SurvivorsError's cause, so that the host
	// sees the type (it reports and audits it).
	Survivors bool `json:"survivors,omitempty"`
}

// replyError is the error of a reply to a run of spec.
func replyError(rep launchReply, spec *Spec) error {
	if rep.Survivors {
		return &SurvivorsError{Command: spec.Command, Err: errors.New(rep.Error)}
	}
	return errors.New(rep.Error)
}

// LauncherWarmEnv tells a launcher how many wrappers to keep warm (see
// Pool); unset or 0, every run starts cold.
const LauncherWarmEnv = "MOAT_LAUNCHER_WARM"

// StartLauncher starts the launcher: the running executable (which must
// call LauncherMain first thing in main, as moat does) with LauncherEnv set.
func StartLauncher() (*Launcher, error) { return StartWarmLauncher(0) }

// StartWarmLauncher starts a launcher that keeps warm wrappers (a Pool of
// that size) for the runs it serves: what a long-lived host such as moat
// serve wants, since a confined host can start no process itself.
func StartWarmLauncher(warm int) (*Launcher, error) {
	return StartLauncherWith(LauncherOptions{Warm: warm})
}

// LauncherOptions configure a launcher.
type LauncherOptions struct {
	Warm int // wrappers kept warm (see StartWarmLauncher)
	// Scratch is a directory the launcher removes when it exits: a
	// confined host cannot remove its own scratch directory (its Landlock
	// layer grants nothing on the directory's parent), the launcher,
	// started before the host confined itself, can.
	Scratch string
}

// LauncherScratchEnv carries LauncherOptions.Scratch to the launcher.
const LauncherScratchEnv = "MOAT_LAUNCHER_SCRATCH"

// StartLauncherWith starts a launcher with o.
func StartLauncherWith(o LauncherOptions) (*Launcher, error) {
	warm := o.Warm
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
	sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		reqR.Close()
		reqW.Close()
		repR.Close()
		repW.Close()
		return nil, fmt.Errorf("native: launcher socket: %w", err)
	}
	hostSock, launcherSock := os.NewFile(uintptr(sp[0]), "launcher-socket"), os.NewFile(uintptr(sp[1]), "launcher-socket")
	cmd := exec.Command("/proc/self/exe", "moat-launcher")
	cmd.Env = append(os.Environ(), LauncherEnv+"=1", LauncherWarmEnv+"="+strconv.Itoa(max(warm, 0)), LauncherScratchEnv+"="+o.Scratch)
	cmd.ExtraFiles = []*os.File{reqR, repW, launcherSock} // fds 3, 4 and 5
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	reqR.Close()
	repW.Close()
	launcherSock.Close()
	if err != nil {
		reqW.Close()
		repR.Close()
		hostSock.Close()
		return nil, fmt.Errorf("native: start the launcher: %w", err)
	}
	l := &Launcher{cmd: cmd, w: reqW, sock: hostSock, wait: map[uint64]chan launchReply{}, dead: make(chan struct{})}
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
		if !rep.Started {
			delete(l.wait, rep.ID)
		}
		l.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
	// Reaped at once, not at Close: a launcher that exited early (killed)
	// is no zombie for the rest of the host's life.
	werr := l.cmd.Wait()
	l.mu.Lock()
	l.err = errors.New("native: the launcher exited")
	l.waitErr = werr
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
			return nil, replyError(rep, &spec)
		}
		return rep.Result, nil
	case <-ctx.Done():
		_ = l.send(launchRequest{ID: id, Cancel: true})
		select {
		case rep := <-ch:
			if rep.Result != nil {
				return rep.Result, nil
			}
			if rep.Survivors {
				return nil, replyError(rep, &spec)
			}
			return nil, ctx.Err()
		case <-l.dead:
			return nil, l.err
		}
	case <-l.dead:
		return nil, l.err
	}
}

// Close stops the launcher, which kills every job and worker it runs.
func (l *Launcher) Close() error {
	l.w.Close()
	<-l.dead
	l.sock.Close()
	return l.waitErr
}

// Workers returns a WorkerLauncher that starts supervised workers through
// the launcher, under the same kernel layers as ConfinedLauncher: what a
// confined host (which cannot execve) uses for native plugins. The
// worker's pipe ends and a stderr pipe travel to the launcher as
// SCM_RIGHTS over a unix socket; the worker inherits them as fds 3, 4, ...
// and the host keeps its own ends, so the pipe transport runs host to
// worker directly, never through the launcher.
func (l *Launcher) Workers(base Spec) WorkerLauncher {
	return func(ctx context.Context, ws *WorkerSpec, extra []*os.File, stderr io.Writer) (WorkerProcess, error) {
		spec := workerJobSpec(base, ws)
		er, ew, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		go func() {
			_, _ = io.Copy(stderr, er)
			er.Close()
		}()
		files := append(append([]*os.File{}, extra...), ew)
		ch := make(chan launchReply, 2)
		l.mu.Lock()
		if l.err != nil {
			l.mu.Unlock()
			ew.Close()
			return nil, l.err
		}
		l.next++
		id := l.next
		l.wait[id] = ch
		l.mu.Unlock()
		err = l.sendWithFiles(launchRequest{ID: id, Spec: &spec, Worker: true}, files)
		ew.Close() // the launcher has its copy
		if err != nil {
			return nil, fmt.Errorf("native: launcher: %w", err)
		}
		select {
		case rep := <-ch:
			if rep.Error != "" {
				return nil, errors.New(rep.Error)
			}
			return &launchedWorker{l: l, id: id, pid: rep.Pid, ch: ch}, nil
		case <-l.dead:
			return nil, l.err
		}
	}
}

// sendWithFiles sends files over the socket, then the request line; one
// lock keeps the pair in order for the launcher, which reads the socket
// when the line says files came with it.
func (l *Launcher) sendWithFiles(req launchRequest, files []*os.File) error {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var id [8]byte
	binary.LittleEndian.PutUint64(id[:], req.ID)
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := syscall.Sendmsg(int(l.sock.Fd()), id[:], syscall.UnixRights(fds...), nil, 0); err != nil {
		return fmt.Errorf("pass the worker's files: %w", err)
	}
	_, err = l.w.Write(append(b, '\n'))
	return err
}

// launchedWorker is a worker that the launcher started and watches.
type launchedWorker struct {
	l    *Launcher
	id   uint64
	pid  int
	ch   chan launchReply
	once sync.Once
	err  error
	res  *Result
}

func (w *launchedWorker) Wait() error {
	w.once.Do(func() {
		select {
		case rep := <-w.ch:
			w.res = rep.Result
			if rep.Survivors {
				w.err = &SurvivorsError{Err: errors.New(rep.Error)}
			} else if rep.Error != "" {
				w.err = errors.New(rep.Error)
			}
		case <-w.l.dead:
			w.err = w.l.err
		}
		if w.res == nil {
			w.res = &Result{Status: StatusKilled, ExitCode: -1}
		}
	})
	return w.err
}

func (w *launchedWorker) Kill()           { _ = w.l.send(launchRequest{ID: w.id, Cancel: true}) }
func (w *launchedWorker) Pid() int        { return w.pid }
func (w *launchedWorker) Result() *Result { return w.res }

// LauncherMain serves launch requests when this process was started by
// StartLauncher, and returns at once otherwise. Call it first thing in
// main (and in TestMain of tests that start a launcher).
func LauncherMain() {
	if os.Getenv(LauncherEnv) != "1" {
		return
	}
	os.Unsetenv(LauncherEnv)
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP) // see Launcher
	if os.Geteuid() == 0 {
		sweepOnce()
	}
	var pool *Pool
	if n, _ := strconv.Atoi(os.Getenv(LauncherWarmEnv)); n > 0 {
		pool = NewPool(n, "")
		UsePool(pool)
	}
	os.Unsetenv(LauncherWarmEnv)
	scratch := os.Getenv(LauncherScratchEnv)
	os.Unsetenv(LauncherScratchEnv)
	in := os.NewFile(3, "launch-requests")
	out := os.NewFile(4, "launch-replies")
	sock := os.NewFile(5, "launcher-socket")
	workers := map[uint64]*job{}
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
		if req.Signal != 0 {
			mu.Lock()
			if j := workers[req.ID]; j != nil {
				_ = j.cmd.Process.Signal(syscall.Signal(req.Signal))
			}
			mu.Unlock()
			continue
		}
		if req.Cancel {
			mu.Lock()
			if c := cancels[req.ID]; c != nil {
				c()
			}
			if j := workers[req.ID]; j != nil {
				j.kill()
			}
			mu.Unlock()
			continue
		}
		if req.Spec == nil {
			reply(launchReply{ID: req.ID, Error: "native: launcher: request without a spec"})
			continue
		}
		if req.Worker {
			files, err := receiveFiles(sock, req.ID)
			if err != nil {
				reply(launchReply{ID: req.ID, Error: "native: launcher: " + err.Error()})
				continue
			}
			stderr := files[len(files)-1]
			var j *job
			if req.Stdio && len(files) == 3 {
				j, err = startIO(nil, *req.Spec, nil, files[0], files[1], files[2])
			} else {
				j, err = start(*req.Spec, files[:len(files)-1], stderr, stderr)
			}
			for _, f := range files {
				f.Close() // the worker has its copies
			}
			if err != nil {
				reply(launchReply{ID: req.ID, Error: err.Error()})
				continue
			}
			mu.Lock()
			workers[req.ID] = j
			mu.Unlock()
			reply(launchReply{ID: req.ID, Started: true, Pid: j.cmd.Process.Pid})
			wg.Add(1)
			go func(id uint64, j *job) {
				defer wg.Done()
				werr := j.cmd.Wait()
				j.kill()
				res := j.exitResult()
				j.cleanup()
				mu.Lock()
				delete(workers, id)
				mu.Unlock()
				rep := launchReply{ID: id, Result: res}
				switch {
				case j.survivors != nil:
					rep.Error, rep.Survivors = j.survivors.Error(), true
				case werr != nil:
					rep.Error = werr.Error()
				}
				reply(rep)
			}(req.ID, j)
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
			var se *SurvivorsError
			if errors.As(err, &se) {
				rep.Error, rep.Survivors = se.Err.Error(), true
			} else if err != nil {
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
	for _, j := range workers {
		j.kill()
	}
	mu.Unlock()
	wg.Wait()
	if pool != nil {
		pool.Close() // idle wrappers and their cgroups
	}
	if scratch != "" {
		os.RemoveAll(scratch)
	}
	os.Exit(0)
}

// receiveFiles reads one message of files from the host: its payload is
// the request id, so a mix-up cannot hand one worker another's pipes.
func receiveFiles(sock *os.File, id uint64) ([]*os.File, error) {
	const maxFiles = 8
	var buf [8]byte
	oob := make([]byte, syscall.CmsgSpace(maxFiles*4))
	n, oobn, _, _, err := syscall.Recvmsg(int(sock.Fd()), buf[:], oob, syscall.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("receive the worker's files: %w", err)
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, fmt.Errorf("receive the worker's files: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "worker-pipe"))
		}
	}
	if n != 8 || binary.LittleEndian.Uint64(buf[:]) != id || len(files) < 2 {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("the files for request %d did not arrive with it (%d files)", id, len(files))
	}
	return files, nil
}
