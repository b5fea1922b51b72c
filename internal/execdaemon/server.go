package execdaemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// DefaultIdle is how long a daemon waits for a job before it exits: long
// enough to serve a person's edit-run loop, short enough that a warm host
// (a few hundred MiB of machine code and images) does not stay for nothing.
const DefaultIdle = 10 * time.Minute

// Handler runs one job with the client's stdin, stdout and stderr, and
// returns the exit status the client exits with. ctx is canceled when the
// client asks (its Ctrl-C) or goes away (it was killed).
type Handler func(ctx context.Context, job []byte, stdio [3]*os.File) int

// Server answers the jobs of one user on one socket.
type Server struct {
	// Identity is the daemon's own (SelfIdentity): a client must present
	// the same.
	Identity Identity
	// Idle is how long the server waits without a job before Serve
	// returns; zero is DefaultIdle.
	Idle time.Duration
	// Handle runs a job.
	Handle Handler
	// Admit, when set, says whether the daemon takes a job: one it
	// does not is answered unstarted, and the client runs it itself.
	Admit func(job []byte) bool
	// Socket, when set, is the path the server listens on: when it is
	// gone (the data directory was removed, another daemon took the
	// name), no client can reach the server, and Serve returns.
	Socket string

	mu      sync.Mutex
	active  int
	lastEnd time.Time
	stale   bool
}

// ErrRunning is Listen's answer when another daemon holds the socket.
var ErrRunning = errors.New("execdaemon: a daemon already serves this socket")

// Listen binds socket for one daemon: it holds an exclusive lock on
// socket+".lock" for the life of the process (another daemon gets
// ErrRunning), removes a socket a dead daemon left, and binds a new one
// with mode 0600 in its 0700 directory.
func Listen(socket string) (*net.UnixListener, error) {
	lock, err := os.OpenFile(socket+".lock", os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("execdaemon: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrRunning
		}
		return nil, fmt.Errorf("execdaemon: lock: %w", err)
	}
	// The lock stays held by the open file until the process ends.
	keepLock = append(keepLock, lock)
	os.Remove(socket)
	addr, done, err := sockaddr(socket)
	if err != nil {
		return nil, fmt.Errorf("execdaemon: %w", err)
	}
	defer done()
	old := syscall.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("execdaemon: %w", err)
	}
	// Closing the listener must not remove the path through the
	// /proc/self/fd name, which is gone by then; the daemon removes it.
	l.SetUnlinkOnClose(false)
	return l, nil
}

var keepLock []*os.File

// checkEvery is how often an idle server looks whether its binary was
// replaced or its socket removed.
var checkEvery = 5 * time.Second

// Serve answers connections on l until the server has been idle for
// Idle, or its binary was replaced (Identity.Changed), and returns once
// the jobs under way have ended.
func (s *Server) Serve(l *net.UnixListener) {
	idle := s.Idle
	if idle <= 0 {
		idle = DefaultIdle
	}
	s.lastEnd = time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		s.mu.Lock()
		quiet, stale := s.active == 0 && time.Since(s.lastEnd) >= idle, s.stale
		wake := s.lastEnd.Add(idle)
		s.mu.Unlock()
		if stale || quiet || s.Identity.Changed() || s.socketGone() {
			return
		}
		// Wake at the idle deadline, and every few seconds to see
		// whether the binary was replaced.
		if max := time.Now().Add(checkEvery); wake.After(max) || !wake.After(time.Now()) {
			wake = max
		}
		l.SetDeadline(wake)
		c, err := l.AcceptUnix()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		s.mu.Lock()
		s.active++
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			s.active--
			s.lastEnd = time.Now()
			s.mu.Unlock()
		}()
	}
}

func (s *Server) socketGone() bool {
	if s.Socket == "" {
		return false
	}
	_, err := os.Lstat(s.Socket)
	return err != nil
}

// PeerUID is the uid of the process at the other end of c.
func PeerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

func (s *Server) serveConn(c *net.UnixConn) {
	defer c.Close()
	// Another user's process gets nothing, not even a refusal to read.
	if uid, err := PeerUID(c); err != nil || uid != os.Geteuid() {
		return
	}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	var h hello
	if _, err := readFrame(c, &h, 0); err != nil {
		return
	}
	if reason := s.refuse(h.Identity); reason != "" {
		writeFrame(c, welcome{Reason: reason}, nil)
		return
	}
	if err := writeFrame(c, welcome{OK: true}, nil); err != nil {
		return
	}
	var req request
	files, err := readFrame(c, &req, 3)
	if err != nil {
		return
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if len(files) != 3 || (s.Admit != nil && !s.Admit(req.Job)) {
		return // not started: the client runs the job itself
	}
	c.SetDeadline(time.Time{})
	if err := writeFrame(c, event{Started: true}, nil); err != nil {
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		// A cancel frame, or the connection's end: the client is gone or
		// asks the run to stop.
		for {
			var ev event
			if _, err := readFrame(c, &ev, 0); err != nil {
				cancel(errors.New("the client went away"))
				return
			}
			if ev.Cancel != "" {
				// The client's own cause (its signal), so the run's
				// message reads as it would in the client's process.
				cancel(errors.New(ev.Cancel))
			}
		}
	}()
	code := s.Handle(ctx, req.Job, [3]*os.File{files[0], files[1], files[2]})
	writeFrame(c, event{Exit: &code}, nil)
}

// refuse says why a client of identity id may not be served, or "".
// A client of another binary also tells the daemon that its own binary
// may be the stale one: when it was replaced, the daemon stops.
func (s *Server) refuse(id Identity) string {
	own := s.Identity
	switch {
	case id.Protocol != own.Protocol:
		return fmt.Sprintf("protocol %d, the daemon speaks %d", id.Protocol, own.Protocol)
	case id.Binary != own.Binary || id.Size != own.Size || id.ModTime != own.ModTime:
		if own.Changed() {
			s.mu.Lock()
			s.stale = true
			s.mu.Unlock()
		}
		return "another moat binary: " + own.Binary
	case id.Config != own.Config:
		return "another configuration"
	}
	return ""
}
