// Package egresstest is a real DNS server on a loopback UDP port, for
// tests of what a client does with the answers: a name that resolves to a
// loopback address, or whose answer changes between one query and the next
// (DNS rebinding).
package egresstest

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// Answer returns the addresses for the n-th query (from 1) of a name
// (lower case, no trailing dot) and type (A: IPv4 addresses are used; AAAA:
// IPv6 ones); none is NXDOMAIN.
type Answer func(name string, n int) []netip.Addr

// DNS is a DNS server answering A and AAAA queries over UDP.
type DNS struct {
	conn   net.PacketConn
	answer Answer
	mu     sync.Mutex
	counts map[string]int // "name A" → queries so far
}

// NewDNS starts a server on 127.0.0.1; it stops when the test ends.
func NewDNS(t testing.TB, answer Answer) *DNS {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &DNS{conn: conn, answer: answer, counts: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.serve()
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return d
}

// Queries is how many A (or AAAA, by qtype "AAAA") queries name had.
func (d *DNS) Queries(name, qtype string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[name+" "+qtype]
}

// Resolver is a pure-Go resolver that asks only this server (the machine's
// /etc/hosts still comes first, as for every Go resolver).
func (d *DNS) Resolver() *net.Resolver {
	addr := d.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", addr)
	}}
}

func (d *DNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := d.reply(buf[:n]); resp != nil {
			_, _ = d.conn.WriteTo(resp, from)
		}
	}
}

const (
	typeA    = 1
	typeAAAA = 28
)

// reply answers one query: its first question only.
func (d *DNS) reply(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) < 1 {
		return nil
	}
	var labels []string
	i := 12
	for {
		if i >= len(q) {
			return nil
		}
		l := int(q[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i:i+l]))
		i += l
	}
	if i+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i : i+2])
	question := q[12 : i+4]
	name := strings.ToLower(strings.Join(labels, "."))
	kind := "A"
	if qtype == typeAAAA {
		kind = "AAAA"
	}
	d.mu.Lock()
	d.counts[name+" "+kind]++
	n := d.counts[name+" "+kind]
	d.mu.Unlock()
	var addrs []netip.Addr
	all := d.answer(name, n)
	for _, a := range all {
		if qtype == typeA && a.Is4() || qtype == typeAAAA && a.Is6() {
			addrs = append(addrs, a)
		}
	}
	resp := make([]byte, 12, 512)
	copy(resp, q[:2])       // id
	flags := uint16(0x8180) // response, recursion desired and available
	if len(all) == 0 {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(resp[2:], flags)
	binary.BigEndian.PutUint16(resp[4:], 1)
	binary.BigEndian.PutUint16(resp[6:], uint16(len(addrs)))
	resp = append(resp, question...)
	for _, a := range addrs {
		rd := a.AsSlice()
		resp = append(resp, 0xc0, 12) // the name: a pointer to the question's
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, 1) // IN
		resp = binary.BigEndian.AppendUint32(resp, 0) // TTL: no cache may keep it
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(rd)))
		resp = append(resp, rd...)
	}
	return resp
}
