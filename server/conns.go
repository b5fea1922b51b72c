package server

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// connLimit bounds the connections open at once (net/http has no bound:
// each connection is a descriptor, and idle keep-alive connections once
// used up the process's). At the bound, the connection idle the longest
// (between requests, or not yet sending its first) is closed to make room
// for the new one; when every connection is busy with a request, Accept
// waits for one to end, and new clients wait in the kernel's queue.
//
// One source (a client address; an IPv6 /64) holds at most perSource of
// them: at its bound its own longest idle connection is closed for the
// new one, and when none of its connections is idle the new one is
// answered 429 and closed. Busy connections cannot be closed to make
// room (a request is in flight on them), so without this bound one client
// keeping max connections busy, each sending its body a byte at a time
// until http.body_timeout, left every other client waiting.
type connLimit struct {
	net.Listener
	max, perSource int

	mu      sync.Mutex
	cond    *sync.Cond
	open    map[net.Conn]*connInfo
	sources map[netip.Addr]int // open connections by source
	closed  bool
	refused uint64 // connections refused at the per-source bound
}

type connInfo struct {
	state http.ConnState
	since time.Time
	src   netip.Addr
}

func newConnLimit(ln net.Listener, max, perSource int) *connLimit {
	l := &connLimit{Listener: ln, max: max, perSource: perSource, open: map[net.Conn]*connInfo{}, sources: map[netip.Addr]int{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// sourceOf is the source a connection counts against: its peer's IP
// address, an IPv6 one's /64 (a host commonly holds a whole /64, so a
// bound per address would bound nothing).
func sourceOf(c net.Conn) netip.Addr {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{} // not TCP/IP (a test's pipe): one source
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// Accept waits for room, then accepts. The accepted connection counts
// from here until it is closed (the server's ConnState hook says so).
func (l *connLimit) Accept() (net.Conn, error) {
	l.mu.Lock()
	for len(l.open) >= l.max && !l.closed {
		if !l.evictIdleLocked(netip.Addr{}) {
			l.cond.Wait()
		}
	}
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, net.ErrClosed
	}
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c)
		l.mu.Lock()
		if l.sources[src] >= l.perSource && !l.evictIdleLocked(src) {
			l.refused++
			l.mu.Unlock()
			go refuseConn(c, l.perSource)
			continue
		}
		l.open[c] = &connInfo{state: http.StateNew, since: time.Now(), src: src}
		l.sources[src]++
		l.mu.Unlock()
		return c, nil
	}
}

// refuseConn answers a connection past its source's bound with a 429 and
// closes it, without reading its request: the client is told why rather
// than left to guess from a reset.
func refuseConn(c net.Conn, perSource int) {
	defer c.Close()
	body := fmt.Sprintf(`{"type":"about:blank","title":"Too Many Requests","status":429,"code":"rate_limited",`+
		`"detail":"this address already has %d connections open, none of them idle (http.max_connections_per_source in the server config); reuse a connection or close one"}`, perSource)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
}

// Close closes the listener and ends an Accept waiting for room.
func (l *connLimit) Close() error {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// evictIdleLocked closes the connection idle the longest, if any: of
// source src, or of any source when src is the zero Addr. It is counted
// out here; the server's report of it closed finds it gone.
func (l *connLimit) evictIdleLocked(src netip.Addr) bool {
	var victim net.Conn
	var oldest time.Time
	for c, info := range l.open {
		if info.state != http.StateIdle && info.state != http.StateNew {
			continue
		}
		if src.IsValid() && info.src != src {
			continue
		}
		if victim == nil || info.since.Before(oldest) {
			victim, oldest = c, info.since
		}
	}
	if victim == nil {
		return false
	}
	l.dropLocked(victim)
	victim.Close()
	return true
}

// dropLocked counts c out.
func (l *connLimit) dropLocked(c net.Conn) {
	info := l.open[c]
	delete(l.open, c)
	if n := l.sources[info.src] - 1; n > 0 {
		l.sources[info.src] = n
	} else {
		delete(l.sources, info.src)
	}
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
			l.dropLocked(c)
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

// refusals is the number of connections refused at the per-source bound.
func (l *connLimit) refusals() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

// count is the number of connections open, for metrics and tests.
func (l *connLimit) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}
