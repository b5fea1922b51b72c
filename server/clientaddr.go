package server

import (
	"net/http"
	"net/netip"
	"strings"
)

// maxForwardedHops bounds how many X-Forwarded-For entries clientAddr
// walks: a chain of trusted proxies is a few hops, and a header a client
// padded with thousands of trusted-looking entries costs no more.
const maxForwardedHops = 32

// clientAddr is the address a request comes from, as the server counts
// it (per-address buckets, piston.allow, the audit trail): the peer's,
// unless the peer is one of http.trusted_proxies; then the right-most
// X-Forwarded-For entry that is not a trusted proxy (entries right of it
// were added by proxies the operator trusts; left of it, by whoever sent
// the request, and may be forged). An entry that is not an address ends
// the walk at the last trusted hop: a proxy that wrote garbage is not
// believed further. The zero Addr when the peer's address cannot be read.
func (h *HTTPConfig) clientAddr(req *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	addr := ap.Addr().Unmap()
	if !h.isTrusted(addr) {
		return addr
	}
	var hops []string
	for _, v := range req.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i, n := len(hops)-1, 0; i >= 0 && n < maxForwardedHops; i, n = i-1, n+1 {
		a, ok := forwardedAddr(strings.TrimSpace(hops[i]))
		if !ok {
			return addr
		}
		addr = a
		if !h.isTrusted(a) {
			return a
		}
	}
	return addr
}

// isTrusted reports whether a is in one of http.trusted_proxies.
func (h *HTTPConfig) isTrusted(a netip.Addr) bool {
	for _, p := range h.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedAddr reads one X-Forwarded-For entry: an address, or (as some
// proxies write) an address and port, an IPv6 one in brackets.
func forwardedAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Zone() == "" {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		return forwardedAddr(s[1 : len(s)-1])
	}
	return netip.Addr{}, false
}
