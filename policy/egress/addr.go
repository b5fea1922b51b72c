package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// special is one range a connection may reach only when a grant names the
// address. The list is ordered: the first range holding an address names
// its class, so the narrower ranges (metadata addresses) come first.
type special struct {
	p     netip.Prefix
	class string
}

var specials = func() []special {
	var out []special
	for _, s := range [][2]string{
		// Cloud metadata services: credentials of the machine's role.
		{"169.254.169.254/32", "link-local (cloud metadata)"},
		{"169.254.170.2/32", "link-local (container metadata)"},
		{"100.100.100.200/32", "shared (cloud metadata)"},
		{"fd00:ec2::254/128", "unique-local (cloud metadata)"},
		// IPv4.
		{"0.0.0.0/32", "unspecified"}, // connect(0.0.0.0) reaches this host
		{"0.0.0.0/8", "reserved"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "shared (CGNAT)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "reserved"},
		{"192.0.2.0/24", "documentation"},
		{"192.88.99.0/24", "reserved (6to4 relay)"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"198.51.100.0/24", "documentation"},
		{"203.0.113.0/24", "documentation"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"}, // and 255.255.255.255, broadcast
		// IPv6.
		{"::/128", "unspecified"}, // connect(::) reaches this host
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible"},            // deprecated; ::127.0.0.1
		{"::ffff:0:0:0/96", "IPv4-translated"},  // SIIT
		{"64:ff9b:1::/48", "NAT64 (local use)"}, // RFC 8215: a site's own translator
		{"100::/64", "discard"},
		{"2001::/32", "Teredo"}, // embeds an IPv4 server and client
		{"2001::/23", "reserved (IETF protocol assignments)"},
		{"2001:db8::/32", "documentation"},
		{"2002::/16", "6to4"}, // embeds an IPv4 address
		{"3fff::/20", "documentation"},
		{"fc00::/7", "unique-local"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local"},
		{"ff00::/8", "multicast"},
	} {
		out = append(out, special{netip.MustParsePrefix(s[0]), s[1]})
	}
	return out
}()

// nat64 is the well-known NAT64 prefix (RFC 6052): 64:ff9b::a.b.c.d reaches
// a.b.c.d through the network's translator, so it is what a.b.c.d is.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// globalUnicast is the only IPv6 range a connection may reach without a
// grant naming the address; the rest is not assigned for the internet.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// Classify says why a connection to a may not go out unless a grant names
// the address ("loopback", "private", "link-local (cloud metadata)", ...),
// or returns "" for a public unicast address. An IPv4-mapped IPv6 address
// is what its IPv4 address is, and so is a NAT64 one; an address with a
// zone is classified without it.
func Classify(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid"
	}
	a = a.WithZone("").Unmap()
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		if c := Classify(v4); c != "" {
			return "NAT64 form of a " + c
		}
		return ""
	}
	for _, s := range specials {
		if s.p.Contains(a) {
			return s.class
		}
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		return "reserved (not IPv6 global unicast)"
	}
	return ""
}

// Guard decides which addresses connections may reach. Its zero value and
// nil refuse every special address.
type Guard struct {
	named map[netip.AddrPort]bool // port 0: any port
}

// NewGuard makes the guard for a module's targets that a grant names by
// their address (policy's Evaluation.AddressTargets): "http://127.0.0.1:8080"
// lets connections reach 127.0.0.1 port 8080, "http://[::1]:*" any port
// of ::1. A target with a name or a wildcard host names no address, and is
// skipped, as is one that does not parse (targets are validated when
// manifests and profiles are loaded).
func NewGuard(targets []string) *Guard {
	g := &Guard{named: map[netip.AddrPort]bool{}}
	for _, t := range targets {
		_, hostport, ok := strings.Cut(t, "://")
		if !ok {
			continue
		}
		h, p, err := net.SplitHostPort(hostport)
		if err != nil {
			continue
		}
		a, err := netip.ParseAddr(h)
		if err != nil || a.Zone() != "" {
			continue
		}
		var port uint16
		if p != "*" {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				continue
			}
			port = uint16(n)
		}
		g.named[netip.AddrPortFrom(a.Unmap(), port)] = true
	}
	return g
}

// Check decides on one address a connection is about to reach: a public
// unicast address passes, a special one only when a grant names it. An
// address of one of the host's own interfaces is special too, whatever
// its range: it reaches the host's own services. The refusal is an
// *Error with Rule "address".
func (g *Guard) Check(ap netip.AddrPort) error {
	a := ap.Addr()
	if a.Zone() != "" {
		return &Error{Rule: "address", Addr: ap, Class: "zoned",
			Reason: fmt.Sprintf("%s has an IPv6 zone; a connection may not name a local interface", ap)}
	}
	ap = netip.AddrPortFrom(a.Unmap(), ap.Port())
	class := Classify(ap.Addr())
	if class == "" {
		own, err := ownAddrs.holds(ap.Addr())
		switch {
		case err != nil:
			return &Error{Rule: "address", Addr: ap, Class: "unknown",
				Reason: fmt.Sprintf("%s: the host could not list its own interface addresses to tell whether it is one of them (%v); refused", ap, err)}
		case !own:
			return nil
		}
		class = ownClass
	}
	if g != nil && (g.named[ap] || g.named[netip.AddrPortFrom(ap.Addr(), 0)]) {
		return nil
	}
	what := article(class) + " " + class + " address"
	if class == ownClass {
		what = "an address of one of this host's own interfaces (it reaches the host's own services)"
	}
	return &Error{Rule: "address", Addr: ap, Class: class,
		Reason: fmt.Sprintf("%s is %s, and no granted target names it (a grant of http://%s would)", ap, what, ap)}
}

// ownClass is the class of a public address of one of the host's own
// interfaces. Loopback and private ranges are refused by their range; a
// public address the host answers on is not in any of them, yet a
// connection to it reaches the host's own services (an admin port bound
// to 0.0.0.0, moat serve itself), so a wildcard grant or a name that
// resolves to it must not reach it either.
const ownClass = "this host's own"

// ownAddrTTL is how long a listing of the host's interface addresses is
// used before it is read again: an address added later (DHCP, a VIP
// moved onto this machine) is refused within a second.
const ownAddrTTL = time.Second

// ownAddrs is the host's interface addresses, read at the first check
// and again on a check past ownAddrTTL.
var ownAddrs = &addrCache{list: net.InterfaceAddrs}

type addrCache struct {
	list func() ([]net.Addr, error)
	mu   sync.Mutex
	at   time.Time
	set  map[netip.Addr]bool
}

// holds reports whether a is one of the host's interface addresses. A
// listing that fails is an error, not "no": the check fails closed.
func (c *addrCache) holds(a netip.Addr) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set == nil || time.Since(c.at) > ownAddrTTL {
		addrs, err := c.list()
		if err != nil {
			return false, err
		}
		set := make(map[netip.Addr]bool, len(addrs))
		for _, ad := range addrs {
			var ip net.IP
			switch v := ad.(type) {
			case *net.IPNet:
				ip = v.IP
			case *net.IPAddr:
				ip = v.IP
			}
			if x, ok := netip.AddrFromSlice(ip); ok {
				set[x.Unmap().WithZone("")] = true
			}
		}
		c.set, c.at = set, time.Now()
	}
	return c.set[a.WithZone("")], nil
}

func article(s string) string {
	if s != "" && strings.ContainsRune("aeiouAEIOU", rune(s[0])) {
		return "an"
	}
	return "a"
}

// Control is a net.Dialer ControlContext: it runs after the name was
// resolved, before each connect, with the address the socket connects to,
// and refuses what Check refuses and every network but TCP.
func (g *Guard) Control(_ context.Context, network, address string, _ syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return &Error{Rule: "address", Reason: fmt.Sprintf("network %s is not allowed; only TCP", network)}
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &Error{Rule: "address", Reason: fmt.Sprintf("dial %s: %v", address, err)}
	}
	return g.Check(ap)
}
