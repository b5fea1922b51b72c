// Package egress decides where a module's outbound HTTP requests may go,
// and sends them. Every path out of the sandbox over HTTP (Extism's
// http_request today, the http.fetch op and media fetches next) uses it, so
// there is one decision, made the same way everywhere:
//
//  1. The destination is normalized before anything is decided about it
//     (ParseURL, Host): a host may be written in many ways that reach the
//     same server — 2130706433, 0177.1, 0x7f.1 and 127.1 are 127.0.0.1;
//     [::ffff:127.0.0.1] is 127.0.0.1 too; LOCALHOST. and localhost are one
//     name; ｌｏｃａｌｈｏｓｔ (full width) and punycode are IDNA forms of
//     names. A check on the form as written, and a dial of the form the
//     resolver reads, disagree. So every form is turned into one canonical
//     host (a dotted-quad IPv4 address, an RFC 5952 IPv6 address, or a
//     lower-case ASCII name without a trailing dot), and forms that have
//     no single meaning are refused: IPv6 zones ([::1%25lo] dials ::1 on
//     the interface lo, but looks like no address a grant names), user
//     information (http://granted@elsewhere/), percent-encoded hosts,
//     invalid punycode, ports that are not 1-65535.
//  2. The request's URL is rewritten to the canonical form, so what the
//     grants were asked about is what is sent.
//  3. The address each connection goes to is checked when it is dialled
//     (Guard.Control, after DNS, on the IP the socket connects to): a name
//     that resolves to a loopback address, or a DNS answer that changes
//     between a check and the dial (rebinding), gains nothing, because
//     there is no earlier check to fool. Loopback, private, link-local,
//     unique-local, shared (CGNAT), multicast, unspecified, reserved and
//     documentation ranges, the cloud metadata addresses, and the IPv6
//     forms that embed or translate such IPv4 addresses (mapped,
//     compatible, NAT64, 6to4, Teredo), are refused by default: only a
//     target that a grant names by that very address (http://127.0.0.1:8080)
//     lets a connection reach one. A wildcard or a host name never does.
//  4. Every redirect is a new request: normalized, asked about, and its
//     connection checked; at most MaxRedirects are followed.
//  5. What the guest adds to a request is checked: the method is one of
//     the ordinary ones, header names are tokens and values carry no CR,
//     LF or NUL (which would split the request), framing and hop-by-hop
//     headers are the host's, a Host header may not differ from the URL,
//     and the headers are bounded in count and size.
//  6. Nothing is kept between requests: no cookie jar, no proxy from the
//     environment (a proxy would connect on the module's behalf,
//     unchecked).
//
// What the caller decides itself is the grant: Config.Check is asked
// about every hop's normalized destination (package policy's
// Evaluation.CheckOp, with its audit record).
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// Error is a request refused by this package: its destination cannot be
// normalized, the address a connection would reach is not allowed, or a
// method, header or redirect is not. The message never holds a URL's path,
// query or user information, which may carry secrets.
type Error struct {
	// Rule names the check that refused: "destination", "address",
	// "method", "header" or "redirect".
	Rule string
	// Reason says what was refused and why, and what would allow it.
	Reason string
	// Addr and Class are set for Rule "address": the address dialled and
	// its kind ("loopback", "private", "link-local (cloud metadata)", ...).
	Addr  netip.AddrPort
	Class string
}

func (e *Error) Error() string { return e.Reason }

func refuse(rule, format string, args ...any) *Error {
	return &Error{Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// Dest is a normalized destination: the unit the grants decide on.
type Dest struct {
	Scheme string     // "http" or "https"
	Host   string     // canonical: dotted-quad IPv4, RFC 5952 IPv6 (no brackets, no zone), or a lower-case ASCII name without a trailing dot
	Port   uint16     // 1-65535; the scheme's default when the URL has none
	Addr   netip.Addr // the address when Host is an IP literal (IPv4 for IPv4-mapped IPv6); invalid for a name
}

// String is scheme://host:port, IPv6 in brackets.
func (d Dest) String() string { return d.Scheme + "://" + d.HostPort() }

// HostPort is host:port, IPv6 in brackets.
func (d Dest) HostPort() string {
	h := d.Host
	if d.Addr.Is6() {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(int(d.Port))
}

// MaxURLBytes bounds a URL; longer ones are refused before they are
// parsed.
const MaxURLBytes = 8 << 10

// ParseURL normalizes an http or https URL. It returns the URL rewritten to
// the canonical host and port (the form to send: the port is left out when
// it is the scheme's default, and the fragment is dropped) and the
// destination. A URL that cannot be normalized is an *Error with Rule
// "destination".
func ParseURL(raw string) (*url.URL, Dest, error) {
	if len(raw) > MaxURLBytes {
		return nil, Dest{}, refuse("destination", "the URL is %d bytes; the limit is %d", len(raw), MaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, path and query included
		}
		return nil, Dest{}, refuse("destination", "not a URL: %v", err)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		if scheme == "" {
			return nil, Dest{}, refuse("destination", "not an http or https URL: it has no scheme")
		}
		return nil, Dest{}, refuse("destination", "scheme %q: not an http or https URL", clip(scheme))
	}
	if u.Opaque != "" {
		return nil, Dest{}, refuse("destination", "%s: URL has no //host part", scheme)
	}
	if u.User != nil {
		return nil, Dest{}, refuse("destination", "%s://…@%s: user information (user@) in a URL is not allowed; it makes the URL read as one host while it goes to another, and credentials belong in a header",
			scheme, clip(u.Host))
	}
	d := Dest{Scheme: scheme}
	host, err := canonicalHost(u.Hostname(), strings.HasPrefix(u.Host, "["))
	if err != nil {
		return nil, Dest{}, err
	}
	d.Host = host
	if a, err := netip.ParseAddr(host); err == nil {
		d.Addr = a
	}
	def := uint16(443)
	if scheme == "http" {
		def = 80
	}
	d.Port = def
	if p := u.Port(); p != "" {
		// url.Parse has checked the port is digits; it may still be 0,
		// too large, or padded with zeros.
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, Dest{}, refuse("destination", "%s://%s: port %s is not in 1-65535", scheme, host, clip(p))
		}
		d.Port = uint16(n)
	} else if strings.HasSuffix(u.Host, ":") {
		return nil, Dest{}, refuse("destination", "%s://%s: the URL has an empty port", scheme, host)
	}
	out := *u
	out.Scheme, out.Fragment, out.RawFragment = scheme, "", ""
	out.Host = d.HostPort()
	if d.Port == def {
		out.Host = strings.TrimSuffix(out.Host, ":"+strconv.Itoa(int(def)))
	}
	return &out, d, nil
}

// Host normalizes a host as a target or a Host header writes it (an IPv6
// address may be in brackets; no port). It returns the canonical host and,
// for an IP literal, the address.
func Host(h string) (string, netip.Addr, error) {
	bracketed := strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]")
	if bracketed {
		h = h[1 : len(h)-1]
	}
	host, err := canonicalHost(h, bracketed)
	if err != nil {
		return "", netip.Addr{}, err
	}
	a, _ := netip.ParseAddr(host)
	return host, a, nil
}

// canonicalHost is the host's one form (see the package comment).
func canonicalHost(h string, bracketed bool) (string, error) {
	if h == "" {
		return "", refuse("destination", "the URL has no host")
	}
	if bracketed || strings.Contains(h, ":") {
		if strings.Contains(h, "%") {
			return "", refuse("destination", "[%s]: an IPv6 zone (%%%s) is not allowed in a destination; it names a local interface, and the address with it is no address a grant names",
				clip(h), clip(h[strings.Index(h, "%")+1:]))
		}
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() {
			return "", refuse("destination", "[%s] is not an IPv6 address", clip(h))
		}
		return a.Unmap().String(), nil // ::ffff:127.0.0.1 is 127.0.0.1
	}
	if strings.Contains(h, "%") {
		return "", refuse("destination", "host %q: a host may not be percent-encoded", clip(h))
	}
	name := h
	if !isASCII(name) || hasPunycode(name) {
		// IDNA (UTS #46) maps full-width and other compatibility forms
		// and upper case, and checks punycode labels.
		ascii, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return "", refuse("destination", "host %q is not a valid internationalized domain name: %v", clip(h), err)
		}
		name = ascii
	}
	name = strings.ToLower(name)
	name = strings.TrimSuffix(name, ".") // the root label: a.example. is a.example
	if endsInNumber(name) {
		// As a browser reads URLs (WHATWG URL, "ends in a number"): the
		// host is an IPv4 address in one of inet_aton's forms, or nothing.
		a, ok := parseIPv4(name)
		if !ok {
			return "", refuse("destination", "host %q ends in a number but is not an IPv4 address", clip(h))
		}
		return a.String(), nil
	}
	if err := checkName(name); err != nil {
		return "", refuse("destination", "host %q is not a host name: %v", clip(h), err)
	}
	return name, nil
}

// checkName validates a lower-case ASCII host name: labels of 1-63
// characters a-z 0-9 - _ (not starting or ending with -), 253 at most.
func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("a name has 1-253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		ok := label != "" && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for i := 0; ok && i < len(label); i++ {
			c := label[i]
			ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
		}
		if !ok {
			return fmt.Errorf("label %q must be 1-63 characters a-z 0-9 - _", clip(label))
		}
	}
	return nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func hasPunycode(s string) bool {
	for _, l := range strings.Split(s, ".") {
		if len(l) >= 4 && strings.EqualFold(l[:4], "xn--") {
			return true
		}
	}
	return false
}

// endsInNumber reports whether the last label is a number (decimal, or
// hexadecimal after 0x): such a host is read as an IPv4 address.
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		for i := 2; i < len(last); i++ {
			if !isHex(last[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// parseIPv4 reads every form inet_aton (and so a resolver, a browser, curl)
// accepts: one to four parts, each decimal, octal (leading 0) or
// hexadecimal (0x), the last filling the remaining bytes: 2130706433,
// 0177.1, 0x7f.1, 127.1 and 127.0.0.1 are one address.
func parseIPv4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := parseIPv4Number(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(5-len(parts))) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

func parseIPv4Number(p string) (uint64, bool) {
	base := 10
	switch {
	case p == "":
		return 0, false
	case strings.HasPrefix(p, "0x"):
		base, p = 16, p[2:]
		if p == "" {
			return 0, false
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	n, err := strconv.ParseUint(p, base, 64)
	return n, err == nil && n <= 0xffffffff
}

// clip bounds a piece of hostile input quoted in a message.
func clip(s string) string {
	if len(s) <= 100 {
		return s
	}
	return s[:100] + "…"
}
