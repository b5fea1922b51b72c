package execdaemon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// Client is one connection to a daemon, for one job.
type Client struct {
	conn *net.UnixConn
}

// Dial connects to the daemon at socket and makes the handshake. Every
// error wraps ErrUnavailable: no daemon, a stale one, one of another
// configuration; the caller then runs the job itself.
func Dial(socket string, id Identity) (*Client, error) {
	addr, done, err := sockaddr(socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
	done()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := writeFrame(c, hello{Identity: id}, nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: handshake: %v", ErrUnavailable, err)
	}
	var w welcome
	if _, err := readFrame(c, &w, 0); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: handshake: %v", ErrUnavailable, err)
	}
	if !w.OK {
		c.Close()
		return nil, fmt.Errorf("%w: refused: %s", ErrUnavailable, w.Reason)
	}
	c.SetDeadline(time.Time{})
	return &Client{conn: c}, nil
}

// PeerPID is the daemon's process id (SO_PEERCRED), or -1: for a
// message, and for tests that must end the daemon they started.
func (c *Client) PeerPID() int {
	raw, err := c.conn.SyscallConn()
	if err != nil {
		return -1
	}
	pid := -1
	raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// Close ends the connection; a job still running is canceled.
func (c *Client) Close() error { return c.conn.Close() }

// Run hands the daemon job and the client's stdin, stdout and stderr,
// and returns the exit status the daemon reports. A name sent on cancel
// (the cause of the client's cancellation, as the run's message should
// say it: "interrupt signal received") cancels the run. An error wrapping
// ErrUnavailable means the daemon did not start the job (the caller may
// run it itself); any other, that it started it and ended without a
// status.
func (c *Client) Run(job []byte, stdio [3]*os.File, cancel <-chan string) (int, error) {
	fds := make([]int, len(stdio))
	for i, f := range stdio {
		fds[i] = int(f.Fd())
	}
	c.conn.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := writeFrame(c.conn, request{Job: job}, fds); err != nil {
		return 0, fmt.Errorf("%w: sending the job: %v", ErrUnavailable, err)
	}
	var ev event
	if _, err := readFrame(c.conn, &ev, 0); err != nil || !ev.Started {
		if err == nil {
			err = errors.New("no start")
		}
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	c.conn.SetDeadline(time.Time{})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case sig, ok := <-cancel:
				if !ok {
					return
				}
				writeFrame(c.conn, event{Cancel: sig}, nil)
			case <-stop:
				return
			}
		}
	}()
	for {
		var ev event
		if _, err := readFrame(c.conn, &ev, 0); err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("it ended without an exit status")
			}
			return 0, fmt.Errorf("the warm moat running the job: %w", err)
		}
		if ev.Exit != nil {
			return *ev.Exit, nil
		}
	}
}
