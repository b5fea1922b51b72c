// Package egresstest holds what the egress tests of policy/kernel and
// host/native share: a probe a confined process runs, and listeners that
// report what reached them.
package egresstest

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// Probe is a python3 program that tries each "proto,host,port" of
// its argv and prints one line each: "connected" (TCP), "sent" (a UDP
// datagram left), "timeout", or the errno of the refusal.
const Probe = `import socket, sys
for spec in sys.argv[1:]:
    proto, host, port = spec.split(",")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        if proto == "udp":
            s.send(b"moat-egress-probe")
            print("sent")
        else:
            print("connected")
    except socket.timeout:
        print("timeout")
    except OSError as e:
        print(e.errno)
    s.close()
`

// Listener listens on one port on every address, IPv4 and IPv6, for
// TCP and UDP, and reports what reaches it, in order, on events: "tcp" or
// "udp" for a probe's connection or datagram, "tcp-sentinel" or
// "udp-sentinel" for the test's own (see Sync).
type Listener struct {
	Port   int
	events chan string
}

// NewListener finds a port free for TCP and UDP on [::] (both
// families) and serves it until the test ends.
func NewListener(t *testing.T) *Listener {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			pc.Close()
			continue // the TCP port is taken: another one
		}
		l := &Listener{Port: port, events: make(chan string, 64)}
		t.Cleanup(func() { ln.Close(); pc.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				// A probe sends nothing and closes; the sentinel sends "S".
				var b [1]byte
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, _ := c.Read(b[:])
				c.Close()
				if n == 1 && b[0] == 'S' {
					l.events <- "tcp-sentinel"
				} else {
					l.events <- "tcp"
				}
			}
		}()
		go func() {
			buf := make([]byte, 64)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				if string(buf[:n]) == "S" {
					l.events <- "udp-sentinel"
				} else {
					l.events <- "udp"
				}
			}
		}()
		return l
	}
	t.Fatal("no port free for both TCP and UDP after 20 tries")
	return nil
}

// Sync sends the listener a TCP connection and a datagram of the test's
// own, from outside any egress cgroup, and returns how many probe
// connections and datagrams reached it before them. Each socket delivers
// in order, so anything a probe got through is counted: no sleep decides.
func (l *Listener) Sync(t *testing.T) (tcp, udp int) {
	t.Helper()
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("S"))
	c.Close()
	u, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = u.Write([]byte("S"))
	u.Close()
	timeout := time.After(10 * time.Second)
	for seen := 0; seen < 2; {
		select {
		case ev := <-l.events:
			switch ev {
			case "tcp":
				tcp++
			case "udp":
				udp++
			default:
				seen++
			}
		case <-timeout:
			t.Fatalf("port %d: the test's own connection and datagram did not arrive in 10s", l.Port)
		}
	}
	return tcp, udp
}
