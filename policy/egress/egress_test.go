package egress_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy/egress"
)

// TestParseURL: every way of writing a host reaches one canonical form, and
// the forms that have no single meaning are refused, naming why.
func TestParseURL(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		dest string // the normalized destination
		url  string // the URL as it is sent
		err  string // a refusal (Rule destination) containing this
	}{
		{raw: "http://127.0.0.1:8080/x?y#z", dest: "http://127.0.0.1:8080", url: "http://127.0.0.1:8080/x?y"},
		{raw: "http://2130706433:8080/", dest: "http://127.0.0.1:8080", url: "http://127.0.0.1:8080/"},
		{raw: "http://0177.0.0.1:8080/", dest: "http://127.0.0.1:8080"},
		{raw: "http://0177.1:8080/", dest: "http://127.0.0.1:8080"},
		{raw: "http://0x7f.1:8080/", dest: "http://127.0.0.1:8080"},
		{raw: "http://0x7f000001/", dest: "http://127.0.0.1:80", url: "http://127.0.0.1/"},
		{raw: "http://0X7F.0.0.1/", dest: "http://127.0.0.1:80"},
		{raw: "http://127.1/", dest: "http://127.0.0.1:80"},
		{raw: "http://127.0.1/", dest: "http://127.0.0.1:80"},
		{raw: "http://127.0.0.1./", dest: "http://127.0.0.1:80"},
		{raw: "http://0/", dest: "http://0.0.0.0:80"},
		{raw: "http://0xa9fea9fe/", dest: "http://169.254.169.254:80"},
		{raw: "http://[::ffff:127.0.0.1]:81/", dest: "http://127.0.0.1:81", url: "http://127.0.0.1:81/"},
		{raw: "http://[::ffff:7f00:1]/", dest: "http://127.0.0.1:80"},
		{raw: "http://[0:0:0:0:0:0:0:1]/", dest: "http://[::1]:80", url: "http://[::1]/"},
		{raw: "http://[FD00:EC2::254]/", dest: "http://[fd00:ec2::254]:80"},
		{raw: "HTTP://Example.COM./a", dest: "http://example.com:80", url: "http://example.com/a"},
		{raw: "https://example.com:0443/", dest: "https://example.com:443", url: "https://example.com/"},
		{raw: "https://example.com:8443/", dest: "https://example.com:8443", url: "https://example.com:8443/"},
		{raw: "http://ｌｏｃａｌｈｏｓｔ/", dest: "http://localhost:80"},
		{raw: "http://１２７．０．０．１/", dest: "http://127.0.0.1:80"},
		{raw: "http://bücher.example/", dest: "http://xn--bcher-kva.example:80"},
		{raw: "http://b%C3%BCcher.example/", dest: "http://xn--bcher-kva.example:80"},
		{raw: "http://XN--BCHER-KVA.example/", dest: "http://xn--bcher-kva.example:80"},
		{raw: "http://_srv.example/", dest: "http://_srv.example:80"},

		{raw: "http://[::1%25lo]:80/", err: "[::1%lo]: an IPv6 zone (%lo) is not allowed in a destination"},
		{raw: "http://[::%25lo]/", err: "[::%lo]: an IPv6 zone (%lo) is not allowed"},
		{raw: "http://[fd00:ec2::254%25eth0]/", err: "an IPv6 zone (%eth0) is not allowed"},
		{raw: "http://[fe80::1%25en0]/", err: "an IPv6 zone (%en0) is not allowed"},
		{raw: "http://%31%32%37.0.0.1/", err: `not a URL: invalid URL escape "%31"`},
		{raw: "http://user:secret@127.0.0.1/", err: "http://…@127.0.0.1: user information (user@) in a URL is not allowed"},
		{raw: "http://granted.example:80@127.0.0.1/", err: "user information (user@) in a URL is not allowed"},
		{raw: "http://127.0.0.1:0/", err: "port 0 is not in 1-65535"},
		{raw: "http://127.0.0.1:65536/", err: "port 65536 is not in 1-65535"},
		{raw: "http://127.0.0.1:/", err: "the URL has an empty port"},
		{raw: "http://256.0.0.1/", err: `host "256.0.0.1" ends in a number but is not an IPv4 address`},
		{raw: "http://1.2.3.4.5/", err: "ends in a number but is not an IPv4 address"},
		{raw: "http://4294967296/", err: "ends in a number but is not an IPv4 address"},
		{raw: "http://0x/", err: "ends in a number but is not an IPv4 address"},
		{raw: "http://08.1/", err: "ends in a number but is not an IPv4 address"},
		{raw: "http://example.123/", err: "ends in a number but is not an IPv4 address"},
		{raw: "http://xn--zz--.example/", err: "is not a valid internationalized domain name"},
		{raw: "http://a..example/", err: `label "" must be 1-63 characters`},
		{raw: "http://-a.example/", err: `label "-a" must be 1-63 characters`},
		{raw: "http://" + strings.Repeat("a", 64) + ".example/", err: "must be 1-63 characters"},
		{raw: "file:///etc/passwd", err: `scheme "file": not an http or https URL`},
		{raw: "gopher://127.0.0.1/", err: `scheme "gopher": not an http or https URL`},
		{raw: "/relative", err: "not an http or https URL: it has no scheme"},
		{raw: "http:127.0.0.1", err: "URL has no //host part"},
		{raw: "http:///path", err: "the URL has no host"},
		{raw: "http://[127.0.0.1]/", err: "invalid IP-literal"},
		{raw: "http://exa mple.com/", err: "not a URL"},
		{raw: "http://example.com/\r\nX: y", err: "not a URL"},
		{raw: "http://" + strings.Repeat("a", egress.MaxURLBytes), err: "the limit is 8192"},
	} {
		t.Run(tt.raw[:min(len(tt.raw), 60)], func(t *testing.T) {
			u, d, err := egress.ParseURL(tt.raw)
			if tt.err != "" {
				var e *egress.Error
				if !errors.As(err, &e) || e.Rule != "destination" || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseURL(%q) = %v, %v; want a destination refusal containing %q", tt.raw, d, err, tt.err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("the refusal repeats the user information: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tt.raw, err)
			}
			if d.String() != tt.dest {
				t.Errorf("ParseURL(%q) = %s, want %s", tt.raw, d, tt.dest)
			}
			if tt.url != "" && u.String() != tt.url {
				t.Errorf("ParseURL(%q) sends %s, want %s", tt.raw, u, tt.url)
			}
			// Normalizing is idempotent: the sent URL means the same destination.
			_, d2, err := egress.ParseURL(u.String())
			if err != nil || d2 != d {
				t.Errorf("ParseURL(%q) = %v, %v; want %v", u, d2, err, d)
			}
		})
	}
}

// TestClassify: the special ranges, and the IPv6 forms that embed or
// translate IPv4 addresses, are what their IPv4 address is.
func TestClassify(t *testing.T) {
	for _, tt := range []struct{ addr, class string }{
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"2606:4700:4700::1111", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of a public address: IPv6-only networks use it
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::", "unspecified"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "reserved"},
		{"10.1.2.3", "private"},
		{"172.31.0.1", "private"},
		{"192.168.1.1", "private"},
		{"::ffff:10.0.0.1", "private"},
		{"100.64.0.1", "shared (CGNAT)"},
		{"169.254.169.254", "link-local (cloud metadata)"},
		{"::ffff:169.254.169.254", "link-local (cloud metadata)"},
		{"169.254.170.2", "link-local (container metadata)"},
		{"169.254.1.1", "link-local"},
		{"100.100.100.200", "shared (cloud metadata)"},
		{"fd00:ec2::254", "unique-local (cloud metadata)"},
		{"fd00:ec2::254%lo", "unique-local (cloud metadata)"},
		{"fd12::1", "unique-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"224.0.0.1", "multicast"},
		{"255.255.255.255", "reserved"},
		{"64:ff9b::7f00:1", "NAT64 form of a loopback"},
		{"64:ff9b::a9fe:a9fe", "NAT64 form of a link-local (cloud metadata)"},
		{"64:ff9b:1::7f00:1", "NAT64 (local use)"},
		{"::7f00:1", "IPv4-compatible"},
		{"::ffff:0:7f00:1", "IPv4-translated"},
		{"2002:7f00:1::", "6to4"},
		{"2001:0:4136:e378::", "Teredo"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"100::1", "discard"},
		{"4000::1", "reserved (not IPv6 global unicast)"},
	} {
		if got := egress.Classify(netip.MustParseAddr(tt.addr)); got != tt.class {
			t.Errorf("Classify(%s) = %q, want %q", tt.addr, got, tt.class)
		}
	}
}

// TestGuard: a special address passes only when a target names it, by its
// address and port (or port *); names and wildcards name no address.
func TestGuard(t *testing.T) {
	g := egress.NewGuard([]string{"http://127.0.0.1:8080", "https://[::1]:*", "http://localhost:9090", "http://*:7070", "*", "http://[fe80::1%eth0]:80", "junk"})
	for _, tt := range []struct {
		addr string
		err  string
	}{
		{"127.0.0.1:8080", ""},
		{"[::ffff:127.0.0.1]:8080", ""},
		{"[::1]:1", ""},
		{"[::1]:65535", ""},
		{"93.184.215.14:80", ""},
		{"127.0.0.1:8081", "127.0.0.1:8081 is a loopback address, and no granted target names it (a grant of http://127.0.0.1:8081 would)"},
		{"127.0.0.2:8080", "127.0.0.2:8080 is a loopback address"},
		{"127.0.0.1:9090", "127.0.0.1:9090 is a loopback address"},
		{"127.0.0.1:7070", "127.0.0.1:7070 is a loopback address"},
		{"[::1%lo]:8080", "[::1%lo]:8080 has an IPv6 zone"},
		{"[fe80::1%eth0]:80", "has an IPv6 zone"},
		{"[fe80::1]:80", "[fe80::1]:80 is a link-local address"},
		{"169.254.169.254:80", "169.254.169.254:80 is a link-local (cloud metadata) address"},
		{"0.0.0.0:8080", "0.0.0.0:8080 is an unspecified address"},
	} {
		err := g.Check(netip.MustParseAddrPort(tt.addr))
		if tt.err == "" {
			if err != nil {
				t.Errorf("Check(%s): %v", tt.addr, err)
			}
			continue
		}
		var e *egress.Error
		if !errors.As(err, &e) || e.Rule != "address" || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("Check(%s) = %v, want an address refusal containing %q", tt.addr, err, tt.err)
		}
	}
	var none *egress.Guard
	if err := none.Check(netip.MustParseAddrPort("127.0.0.1:8080")); err == nil {
		t.Error("a nil guard allowed a loopback address")
	}
	if err := g.Control(t.Context(), "udp4", "8.8.8.8:53", nil); err == nil || !strings.Contains(err.Error(), "network udp4 is not allowed") {
		t.Errorf("Control(udp4) = %v", err)
	}
}
