package server

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/policy"
)

// HTTPConfig is the server's front door: which Host and Origin headers it
// answers, how many connections it keeps, and how long a client may take
// to send a request. The defaults hold against a hostile client on the
// same network and against a hostile web page in a browser on the same
// machine (a cross-site request, a DNS-rebound page).
type HTTPConfig struct {
	// AllowedHosts are the names the server answers to in the Host header,
	// besides localhost, any IP address and the name in listen. A request
	// naming another host is refused (403, code forbidden_host): it comes
	// from a page whose name was rebound to this server's address. Names
	// are matched without case and trailing dot; "*.example.com" matches
	// every name below example.com.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// AllowedOrigins are the web origins (scheme://host[:port]) whose pages
	// may send requests, besides the server's own. Any other Origin, or a
	// Sec-Fetch-Site of cross-site or same-site, is refused (403, code
	// forbidden_origin): browsers send a page's requests to any address,
	// with no credentials needed for the Piston routes.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// MaxConnections bounds the connections open at once. At the bound the
	// connection idle the longest is closed to make room; when none is
	// idle, new connections wait in the kernel's queue. Default 512; it
	// must leave room under the process's descriptor limit.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerSource bounds the connections open at once from one
	// client address (an IPv6 client's /64, which one host commonly
	// holds whole). At the bound the source's own connection idle the
	// longest is closed to make room; when none is idle, the new
	// connection is answered 429 and closed. Without it one client
	// holding connections busy (a body sent a byte a minute) took every
	// one of max_connections, and new clients, keyed or not, waited in
	// the kernel's queue. Default (0) max_connections/8 (64), but at least 16 (or max_connections when less); behind a proxy
	// every client is the proxy's address: raise it to max_connections.
	MaxConnectionsPerSource int `yaml:"max_connections_per_source"`
	// IdleTimeout closes a keep-alive connection idle this long. Default 30s.
	IdleTimeout policy.Duration `yaml:"idle_timeout"`
	// ReadHeaderTimeout bounds the time to send a request's headers.
	// Default 5s.
	ReadHeaderTimeout policy.Duration `yaml:"read_header_timeout"`
	// BodyTimeout bounds the time to send a request's body, from the end of
	// its headers. Default 60s (a 64 MiB upload at 1.1 MB/s).
	BodyTimeout policy.Duration `yaml:"body_timeout"`
	// WriteTimeout bounds the time a client may take to read a response,
	// from its first byte. Default 60s.
	WriteTimeout policy.Duration `yaml:"write_timeout"`
	// MaxHeaderBytes bounds a request's header block. Default 64KiB.
	MaxHeaderBytes policy.ByteSize `yaml:"max_header_bytes"`
	// TrustedProxies are the networks (CIDR, or one address) of the
	// proxies in front of the server — a Kubernetes ingress, a load
	// balancer — whose X-Forwarded-For the server believes. A request
	// from one of them is counted as coming from the address it names:
	// the right-most X-Forwarded-For entry that is not itself a trusted
	// proxy. That address is what a public route's per-address bucket,
	// piston.allow and the audit trail's remote see. From any other peer
	// the header is ignored (anyone can send it). Default none: behind a
	// proxy without it every client is the proxy's one address.
	TrustedProxies []string `yaml:"trusted_proxies"`

	allowedOrigins map[string]bool
	trusted        []netip.Prefix
}

// AdmissionConfig bounds the work running at once, per organization and
// over the whole server: invocations (and confirmations) of modules, and
// code-execution runs (/v1/runs and Piston's execute). A request past a
// bound waits up to Wait in a queue its organization shares fairly with
// the others (a freed slot goes to the organizations in turn, not to the
// one with the most requests waiting), then is refused: 429 when its
// organization's bound held it back, 503 when the server's did, both
// with Retry-After and naming the setting.
type AdmissionConfig struct {
	// MaxInvocations bounds the invocations running at once over all
	// organizations. Default 8 × GOMAXPROCS.
	MaxInvocations int `yaml:"max_invocations"`
	// OrgInvocations bounds those of one organization. Default
	// GOMAXPROCS/2 (at least 1): a guest computing without pause keeps a
	// CPU, so one organization never holds every CPU.
	OrgInvocations int `yaml:"org_invocations"`
	// MaxRuns and OrgRuns bound code-execution runs likewise. Defaults
	// 2 × GOMAXPROCS and GOMAXPROCS/2 (at least 1).
	MaxRuns int `yaml:"max_runs"`
	OrgRuns int `yaml:"org_runs"`
	// Wait bounds how long a request waits for a slot. Default 10s.
	Wait policy.Duration `yaml:"wait"`
	// Queue bounds the requests of one organization waiting at once;
	// more are refused at once. Default 64.
	Queue int `yaml:"queue"`
}

// MetricsConfig protects /metrics. Its series name every organization's
// modules and actions, so it answers only the operator: a request must
// carry Authorization: Bearer with the token in TokenFile. Without a
// token file /metrics is refused (403).
type MetricsConfig struct {
	// TokenFile is a file holding the operator's metrics token (its
	// first line, at least 16 characters).
	TokenFile string `yaml:"token_file"`
	// Token is the token itself, for programs embedding the server.
	Token string `yaml:"-"`
	// MaxSeries bounds the label sets of each labelled metric; past it,
	// new module and action names are counted under "other". Default 200.
	MaxSeries int `yaml:"max_series"`
}

func (h *HTTPConfig) fillDefaults() {
	if h.MaxConnections == 0 {
		h.MaxConnections = 512
	}
	if h.IdleTimeout == 0 {
		h.IdleTimeout = policy.Duration(30 * time.Second)
	}
	if h.ReadHeaderTimeout == 0 {
		h.ReadHeaderTimeout = policy.Duration(5 * time.Second)
	}
	if h.BodyTimeout == 0 {
		h.BodyTimeout = policy.Duration(60 * time.Second)
	}
	if h.WriteTimeout == 0 {
		h.WriteTimeout = policy.Duration(60 * time.Second)
	}
	if h.MaxHeaderBytes == 0 {
		h.MaxHeaderBytes = 64 << 10
	}
}

// defaultPerSource is http.max_connections_per_source's default for a
// max_connections of n: an eighth, so that eight clients at their bound
// still leave room, but at least 16, so that a small server still serves
// one browser's parallel requests.
func defaultPerSource(n int) int {
	return max(min(n, 16), n/8)
}

// perSource is MaxConnectionsPerSource, or its default (0 in the config:
// derived from max_connections, whatever that is set to).
func (h *HTTPConfig) perSource() int {
	if h.MaxConnectionsPerSource > 0 {
		return h.MaxConnectionsPerSource
	}
	return defaultPerSource(h.MaxConnections)
}

func (a *AdmissionConfig) fillDefaults() {
	procs := runtime.GOMAXPROCS(0)
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&a.MaxInvocations, 8*procs)
	def(&a.OrgInvocations, max(1, procs/2))
	def(&a.MaxRuns, 2*procs)
	def(&a.OrgRuns, max(1, procs/2))
	def(&a.Queue, 64)
	if a.Wait == 0 {
		a.Wait = policy.Duration(10 * time.Second)
	}
}

func (m *MetricsConfig) fillDefaults() {
	if m.MaxSeries == 0 {
		m.MaxSeries = 200
	}
}

type failFunc func(field, format string, args ...any) error

// validate checks the front door's settings; listen is the listen address.
func (h *HTTPConfig) validate(fail failFunc) error {
	for i, n := range h.AllowedHosts {
		name := strings.TrimPrefix(strings.TrimSuffix(strings.ToLower(n), "."), "*.")
		if name == "" || strings.ContainsAny(name, "/:@ *[]%") {
			return fail(fmt.Sprintf("http.allowed_hosts[%d]", i), "%q is not a host name; write it like moat.example.com or *.example.com, without scheme or port", n)
		}
	}
	h.allowedOrigins = map[string]bool{}
	for i, o := range h.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return fail(fmt.Sprintf("http.allowed_origins[%d]", i), "%q is not a web origin; write it like https://app.example.com or http://localhost:3000", o)
		}
		h.allowedOrigins[strings.ToLower(u.Scheme+"://"+u.Host)] = true
	}
	h.trusted = nil
	for i, n := range h.TrustedProxies {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			a, aerr := netip.ParseAddr(n)
			if aerr != nil || a.Zone() != "" {
				return fail(fmt.Sprintf("http.trusted_proxies[%d]", i), "%q is not a network or an address; write it like 10.0.0.0/8, fd00::/8 or 192.0.2.7", n)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Unmap().Is4() && p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		if p.Bits() == 0 {
			return fail(fmt.Sprintf("http.trusted_proxies[%d]", i), "%q trusts every address: any client could name any source in X-Forwarded-For; list the proxies' own networks", n)
		}
		h.trusted = append(h.trusted, p.Masked())
	}
	durations := []struct {
		field    string
		v        policy.Duration
		min, max time.Duration
	}{
		{"idle_timeout", h.IdleTimeout, time.Second, time.Hour},
		{"read_header_timeout", h.ReadHeaderTimeout, 100 * time.Millisecond, 5 * time.Minute},
		{"body_timeout", h.BodyTimeout, time.Second, time.Hour},
		{"write_timeout", h.WriteTimeout, time.Second, time.Hour},
	}
	for _, d := range durations {
		if time.Duration(d.v) < d.min || time.Duration(d.v) > d.max {
			return fail("http."+d.field, "%s is outside %s to %s; leave it out for the default", d.v, d.min, d.max)
		}
	}
	if h.MaxConnections < 1 || h.MaxConnections > 1_000_000 {
		return fail("http.max_connections", "%d is outside 1 to 1000000; leave it out for the default 512", h.MaxConnections)
	}
	if n := h.MaxConnectionsPerSource; n < 0 || n > h.MaxConnections {
		return fail("http.max_connections_per_source", "%d is outside 1 to %d (http.max_connections); leave it out for the default %d", n, h.MaxConnections, defaultPerSource(h.MaxConnections))
	}
	if h.MaxHeaderBytes < 4<<10 || h.MaxHeaderBytes > 16<<20 {
		return fail("http.max_header_bytes", "%s is outside 4KiB to 16MiB; leave it out for the default 64KiB", h.MaxHeaderBytes)
	}
	return nil
}

func (a *AdmissionConfig) validate(fail failFunc) error {
	for _, c := range []struct {
		field string
		v     int
	}{{"max_invocations", a.MaxInvocations}, {"org_invocations", a.OrgInvocations}, {"max_runs", a.MaxRuns}, {"org_runs", a.OrgRuns}, {"queue", a.Queue}} {
		if c.v < 1 || c.v > 100_000 {
			return fail("admission."+c.field, "%d is outside 1 to 100000; leave it out for the default", c.v)
		}
	}
	if a.OrgInvocations > a.MaxInvocations {
		return fail("admission.org_invocations", "%d is more than admission.max_invocations (%d): one organization could take the whole server", a.OrgInvocations, a.MaxInvocations)
	}
	if a.OrgRuns > a.MaxRuns {
		return fail("admission.org_runs", "%d is more than admission.max_runs (%d): one organization could take the whole server", a.OrgRuns, a.MaxRuns)
	}
	if time.Duration(a.Wait) < 0 || time.Duration(a.Wait) > 5*time.Minute {
		return fail("admission.wait", "%s is outside 0 to 5m; leave it out for the default 10s", a.Wait)
	}
	return nil
}

func (m *MetricsConfig) validate(fail failFunc) error {
	if m.TokenFile != "" && m.Token == "" {
		b, err := os.ReadFile(m.TokenFile)
		if err != nil {
			return fail("metrics.token_file", "%v", err)
		}
		m.Token, _, _ = strings.Cut(string(b), "\n")
		m.Token = strings.TrimSpace(m.Token)
	}
	if m.Token != "" && len(m.Token) < 16 {
		return fail("metrics.token_file", "the token is %d characters; use at least 16 (openssl rand -hex 16 makes one)", len(m.Token))
	}
	if m.MaxSeries < 1 || m.MaxSeries > 100_000 {
		return fail("metrics.max_series", "%d is outside 1 to 100000; leave it out for the default 200", m.MaxSeries)
	}
	return nil
}

// normalHost is a Host header's or a configured name's host part in the
// form it is compared in: lower case, without port, brackets or trailing
// dot.
func normalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}
