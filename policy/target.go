package policy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/policy/egress"
)

// httpTarget is a parsed HTTP target: "scheme://host:port", optionally
// followed by a path prefix ("https://api.example.com:443/v1/"), or "*"
// for any target.
//
// The unit of trust is still the server: a path prefix narrows which of
// its paths a module may ask for, compared on whole decoded segments
// (egress.PathSegments: a path with dot segments, encoded slashes or
// other forms a server may resolve elsewhere is refused, not cleaned),
// but it is no boundary on the server, which decides what its paths mean
// (an /v1/ endpoint that proxies, redirects or reads another resource is
// the server's business). See RATIONALE, "Why may an http target carry a
// path prefix?".
type httpTarget struct {
	any    bool     // "*": every http and https target
	scheme string   // "http" or "https"
	host   string   // lower-case name, canonical IP, "*" or "*.suffix"
	port   string   // "1".."65535" or "*"
	path   []string // the prefix's decoded segments; nil: every path
	// pathText is the path as written ("/v1/"), for String; "" with no
	// prefix.
	pathText string
	// pathErr is set for a URL (urlTarget) whose path cannot be read as
	// segments: no target with a path prefix covers it.
	pathErr error
}

// wild reports whether t matches any host at all: the targets that need
// allow_any.
func (t httpTarget) wild() bool { return t.any || t.host == "*" }

// parseTarget parses a target from a manifest or a profile. Its errors say
// how to write the target.
func parseTarget(s string) (httpTarget, error) {
	if s == "*" {
		return httpTarget{any: true}, nil
	}
	// Refused first, so that no message below repeats a line break or a
	// control character of the value outside its quotes.
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return httpTarget{}, fmt.Errorf("%q contains spaces or control characters; a target is scheme://host:port, like https://api.example.com:443", s)
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		ex := strings.TrimSuffix(s, "/")
		return httpTarget{}, fmt.Errorf("%q is not a target; write it as scheme://host:port, like https://%s:443", s, ex)
	}
	if scheme != "http" && scheme != "https" {
		return httpTarget{}, fmt.Errorf("%q: scheme %s is not allowed; only http and https are, like https://%s", s, scheme, rest)
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		return httpTarget{}, fmt.Errorf("%q has a query or fragment; a target is scheme://host:port with an optional path prefix, like %s://%s", s, scheme, rest[:i])
	}
	var pathText string
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest, pathText = rest[:i], rest[i:]
	}
	if strings.Contains(rest, "@") {
		return httpTarget{}, fmt.Errorf("%q has user information; a target is only scheme://host:port", s)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		def := "443"
		if scheme == "http" {
			def = "80"
		}
		return httpTarget{}, fmt.Errorf("%q needs a port; write %s://%s:%s%s", s, scheme, strings.Trim(rest, "[]"), def, pathText)
	}
	if port != "*" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return httpTarget{}, fmt.Errorf("%q: port %s is not in 1-65535 (or * for any port)", s, port)
		}
		port = strconv.Itoa(n)
	}
	h, err := checkHost(host)
	if err != nil {
		return httpTarget{}, fmt.Errorf("%q: %v", s, err)
	}
	t := httpTarget{scheme: scheme, host: h, port: port}
	if pathText != "" && pathText != "/" {
		u, err := url.Parse("http://x" + pathText)
		if err != nil {
			return httpTarget{}, fmt.Errorf("%q: the path prefix %s is not a URL path", s, pathText)
		}
		segs, err := egress.PathSegments(u)
		if err != nil {
			var ee *egress.Error
			if errors.As(err, &ee) {
				err = errors.New(ee.Reason)
			}
			return httpTarget{}, fmt.Errorf("%q: %v; write the prefix as plain segments, like /v1/", s, err)
		}
		t.path, t.pathText = segs, pathText
	}
	return t, nil
}

// checkHost validates a target host: a wildcard, or a host in the one
// form package egress normalizes every destination to, so that a target
// reads as what it grants. Another form of the same host is refused,
// naming the canonical one: a grant of 127.1 or [::ffff:7f00:1] would
// otherwise say one thing and compare as another.
func checkHost(h string) (string, error) {
	if h == "*" {
		return h, nil
	}
	name, wild := strings.CutPrefix(h, "*.")
	if strings.Contains(name, "*") {
		return "", fmt.Errorf("host %s: a wildcard is only allowed as the whole first label, like *.example.com", h)
	}
	canon, addr, err := egress.Host(name)
	if err != nil {
		var ee *egress.Error
		if errors.As(err, &ee) {
			return "", errors.New(ee.Reason)
		}
		return "", err
	}
	if wild && addr.IsValid() {
		return "", fmt.Errorf("host %s: a wildcard only goes before a name, not an address", h)
	}
	if canon != strings.Trim(name, "[]") {
		if canon == strings.ToLower(name) {
			return "", fmt.Errorf("host %s: write host names in lower case: %s", h, strings.ToLower(h))
		}
		if addr.Is6() {
			canon = "[" + canon + "]"
		}
		if wild {
			canon = "*." + canon
		}
		return "", fmt.Errorf("host %s is written in a form of its own; write it as %s", h, canon)
	}
	return h, nil
}

// isAddress reports whether a canonical target host is an IP address.
func isAddress(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

// covers reports whether the granted target g allows everything the
// requested target r allows: the scheme, the port, the host, and, when g
// has a path prefix, r's path (or prefix) on whole segments under it.
func (g httpTarget) covers(r httpTarget) bool {
	switch {
	case g.any:
		return true
	case r.any:
		return false
	case g.scheme != r.scheme:
		return false
	case g.port != "*" && g.port != r.port:
		return false
	case !hostCovers(g.host, r.host):
		return false
	}
	return g.coversPath(r)
}

// coversPath reports whether g's path prefix (if any) covers r's path.
func (g httpTarget) coversPath(r httpTarget) bool {
	if g.path == nil {
		return true
	}
	return r.pathErr == nil && egress.HasPathPrefix(r.path, g.path)
}

// coversServer is covers without the path: the scheme, port and host.
func (g httpTarget) coversServer(r httpTarget) bool {
	g.path = nil
	return g.covers(r)
}

// hostCovers: "*" covers every host; "*.example.com" covers every name
// ending in ".example.com" (including narrower wildcards like
// "*.eu.example.com") but not "example.com" itself, matching how TLS
// wildcard certificates read.
func hostCovers(g, r string) bool {
	switch {
	case g == r || g == "*":
		return true
	case strings.HasPrefix(g, "*."):
		return r != "*" && strings.HasSuffix(r, g[1:])
	}
	return false
}

// urlTarget parses the URL an http.fetch op asks for into the concrete
// target it reaches, normalized by package egress (the same normalization
// as the request that is sent): the port defaults to 80 or 443 by scheme,
// and the path is read as segments (egress.PathSegments; a path that
// cannot be read keeps its error in pathErr, for the grants with a path
// prefix to refuse).
func urlTarget(raw string) (httpTarget, error) {
	u, d, err := egress.ParseURL(raw)
	if err != nil {
		return httpTarget{}, err
	}
	t := httpTarget{scheme: d.Scheme, host: d.Host, port: strconv.Itoa(int(d.Port))}
	t.path, t.pathErr = egress.PathSegments(u)
	if t.path == nil && t.pathErr == nil {
		t.path = []string{} // the root: under no prefix but the root's
	}
	return t, nil
}

// String is the target as written: scheme://host:port and the path
// prefix, if any.
func (t httpTarget) String() string {
	if t.any {
		return "*"
	}
	return t.origin() + t.pathText
}

// origin is scheme://host:port, without the path prefix.
func (t httpTarget) origin() string {
	h := t.host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return t.scheme + "://" + h + ":" + t.port
}

// TargetPorts returns the TCP ports the HTTP targets can reach, for a
// kernel layer that filters connections by port (Landlock's TCP rules).
// anyPort is true when a target matches every port ("*", or a port of
// "*"): such a grant cannot be narrowed by port, so the caller leaves
// connections unfiltered by the kernel and relies on the dial-time check.
// Targets that do not parse are skipped: manifests and profiles are
// validated when loaded, and an unparsed target grants nothing.
func TargetPorts(targets []string) (ports []uint16, anyPort bool) {
	for _, s := range targets {
		t, err := parseTarget(s)
		if err != nil {
			continue
		}
		if t.any || t.port == "*" {
			anyPort = true
			continue
		}
		n, _ := strconv.Atoi(t.port)
		if !slices.Contains(ports, uint16(n)) {
			ports = append(ports, uint16(n))
		}
	}
	slices.Sort(ports)
	return ports, anyPort
}

// HTTPTargets returns every HTTP target any layer of the profile grants
// (default, per module, per key, trusted-only): the most a module on this
// host could ever reach, for confining a host that loads modules later.
func (p *Profile) HTTPTargets() []string {
	var out []string
	p.eachGrant(func(g *Grant) { out = append(out, g.Capabilities.HTTP.Targets...) })
	return out
}
