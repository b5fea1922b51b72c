package server

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit bounds the connections open at once (net/http has no bound:
// each connection is a descriptor, and idle keep-alive connections once
// used up the process's). At the bound, the connection idle the longest
// (between requests, or not yet sending its first) is closed to make room
// for the new one; when every connection is busy with a request, Accept
// waits for one to end, and new clients wait in the kernel's queue.
type connLimit struct {
	net.Listener
	max int

	mu     sync.Mutex
	cond   *sync.Cond
	open   map[net.Conn]*connInfo
	closed bool
}

type connInfo struct {
	state http.ConnState
	since time.Time
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	l := &connLimit{Listener: ln, max: max, open: map[net.Conn]*connInfo{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Accept waits for room, then accepts. The accepted connection counts
// from here until it is closed (the server's ConnState hook says so).
func (l *connLimit) Accept() (net.Conn, error) {
	l.mu.Lock()
	for len(l.open) >= l.max && !l.closed {
		if !l.evictIdleLocked() {
			l.cond.Wait()
		}
	}
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open[c] = &connInfo{state: http.StateNew, since: time.Now()}
	l.mu.Unlock()
	return c, nil
}

// Close closes the listener and ends an Accept waiting for room.
func (l *connLimit) Close() error {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// evictIdleLocked closes the connection idle the longest, if any. It is
// counted out when the server reports it closed.
func (l *connLimit) evictIdleLocked() bool {
	var victim net.Conn
	var oldest time.Time
	for c, info := range l.open {
		if info.state != http.StateIdle && info.state != http.StateNew {
			continue
		}
		if victim == nil || info.since.Before(oldest) {
			victim, oldest = c, info.since
		}
	}
	if victim == nil {
		return false
	}
	delete(l.open, victim)
	victim.Close()
	return true
}

// connState is the http.Server's ConnState hook.
func (l *connLimit) connState(c net.Conn, st http.ConnState) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn() // a TLS connection over the one accepted
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateClosed, http.StateHijacked:
		if _, ok := l.open[c]; ok {
			delete(l.open, c)
			l.cond.Signal()
		}
	default:
		if info, ok := l.open[c]; ok {
			if st == http.StateIdle || st == http.StateActive {
				info.since = time.Now()
			}
			info.state = st
			// A connection going idle can make room for a waiting Accept.
			if st == http.StateIdle {
				l.cond.Signal()
			}
		}
	}
}

// count is the number of connections open, for metrics and tests.
func (l *connLimit) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}
