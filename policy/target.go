package policy

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// httpTarget is a parsed HTTP target: "scheme://host:port", or "*" for any
// target. A target deliberately has no path: the unit of trust is the
// server, and a path filter would only look like a boundary, since the
// server decides what its paths mean.
type httpTarget struct {
	any    bool   // "*": every http and https target
	scheme string // "http" or "https"
	host   string // lower-case name, canonical IP, "*" or "*.suffix"
	port   string // "1".."65535" or "*"
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
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		ex := strings.TrimSuffix(s, "/")
		return httpTarget{}, fmt.Errorf("%q is not a target; write it as scheme://host:port, like https://%s:443", s, ex)
	}
	if scheme != "http" && scheme != "https" {
		return httpTarget{}, fmt.Errorf("%q: scheme %s is not allowed; only http and https are, like https://%s", s, scheme, rest)
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return httpTarget{}, fmt.Errorf("%q has a path; a target is only scheme://host:port (the module may fetch any path there), so write %s://%s", s, scheme, rest[:i])
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
		return httpTarget{}, fmt.Errorf("%q needs a port; write %s://%s:%s", s, scheme, strings.Trim(rest, "[]"), def)
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
	return httpTarget{scheme: scheme, host: h, port: port}, nil
}

// checkHost validates and canonicalizes a target host.
func checkHost(h string) (string, error) {
	if h == "*" {
		return h, nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String(), nil
	}
	name := strings.TrimPrefix(h, "*.")
	if strings.Contains(name, "*") {
		return "", fmt.Errorf("host %s: a wildcard is only allowed as the whole first label, like *.example.com", h)
	}
	if name != strings.ToLower(name) {
		return "", fmt.Errorf("host %s: write host names in lower case: %s", h, strings.ToLower(h))
	}
	if name == "" || len(name) > 253 {
		return "", fmt.Errorf("host %q is not a host name", h)
	}
	for _, label := range strings.Split(name, ".") {
		ok := label != "" && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for _, r := range label {
			ok = ok && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}
		if !ok {
			return "", fmt.Errorf("host %s is not a host name: label %q must be 1-63 characters a-z 0-9 - _", h, label)
		}
	}
	return h, nil
}

// covers reports whether the granted target g allows everything the
// requested target r allows.
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
	}
	return hostCovers(g.host, r.host)
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
// target it reaches: the port defaults to 80 or 443 by scheme.
func urlTarget(raw string) (httpTarget, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return httpTarget{}, fmt.Errorf("%q is not a URL", raw)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return httpTarget{}, fmt.Errorf("%q is not an http or https URL", raw)
	}
	host := strings.ToLower(u.Hostname())
	if host == "" || strings.Contains(host, "*") {
		return httpTarget{}, fmt.Errorf("%q has no host", raw)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.String()
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if scheme == "http" {
			port = "80"
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return httpTarget{}, fmt.Errorf("%q has an invalid port", raw)
	}
	return httpTarget{scheme: scheme, host: host, port: strconv.Itoa(n)}, nil
}

func (t httpTarget) String() string {
	if t.any {
		return "*"
	}
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
	var walk func(g *Grant)
	walk = func(g *Grant) {
		if g == nil {
			return
		}
		out = append(out, g.Capabilities.HTTP.Targets...)
		walk(g.Trusted)
	}
	walk(p.Default)
	for _, g := range p.Modules {
		walk(&g)
	}
	for _, g := range p.Keys {
		walk(&g)
	}
	return out
}
