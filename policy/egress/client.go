package egress

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Defaults of Config.
const (
	DefaultMaxRedirects   = 5
	DefaultMaxHeaders     = 64
	DefaultMaxHeaderBytes = 16 << 10
	// MaxResponseHeaderBytes bounds the headers of a response.
	MaxResponseHeaderBytes = 64 << 10
)

// Config is a Client's.
type Config struct {
	// Guard decides on the address of every connection. Nil refuses every
	// special address.
	Guard *Guard
	// MaxRedirects is how many redirects one request follows (0:
	// DefaultMaxRedirects; negative: none).
	MaxRedirects int
	// MaxHeaders and MaxHeaderBytes bound a request's headers, in count and
	// in bytes of names and values (0: the defaults).
	MaxHeaders, MaxHeaderBytes int
	// Resolver resolves names (nil: net.DefaultResolver). The guard checks
	// what it answers, at connect time.
	Resolver *net.Resolver
	// DialTimeout bounds one connect (0: 10 s). The request's context
	// bounds the whole request.
	DialTimeout time.Duration
}

// Client sends requests under a Config. It is safe for concurrent use;
// its connections are pooled, each checked once, when it was dialled.
type Client struct {
	cfg       Config
	transport *http.Transport
	http      *http.Client
}

// NewClient makes a client.
func NewClient(cfg Config) *Client {
	switch {
	case cfg.MaxRedirects == 0:
		cfg.MaxRedirects = DefaultMaxRedirects
	case cfg.MaxRedirects < 0:
		cfg.MaxRedirects = 0
	}
	if cfg.MaxHeaders <= 0 {
		cfg.MaxHeaders = DefaultMaxHeaders
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	c := &Client{cfg: cfg}
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second, Resolver: cfg.Resolver, ControlContext: cfg.Guard.Control}
	c.transport = &http.Transport{
		Proxy:                  nil, // never HTTP_PROXY: the proxy would connect on the module's behalf, unchecked
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           16,
		IdleConnTimeout:        30 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
	}
	// Jar nil: no cookie is kept from one request to the next. Redirects
	// are Send's own (each hop is a request of its own, asked about and
	// given its own headers), so the http.Client follows none.
	c.http = &http.Client{Transport: c.transport, Jar: nil,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return c
}

// CloseIdleConnections closes the pooled connections.
func (c *Client) CloseIdleConnections() { c.transport.CloseIdleConnections() }

// Request is what a module asks to send.
type Request struct {
	Method string            // "" is GET; any case
	URL    string            // absolute http or https URL
	Header map[string]string // names in any case
	Body   []byte            // nil: no body
}

// Methods are the methods a request may use. CONNECT would make the server
// a tunnel, TRACE echoes what reaches it.
var Methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// hostHeaders are headers the client (the transport) writes itself: the
// request's framing, its connection, and its proxy, none the module's.
var hostHeaders = []string{"Connection", "Content-Length", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// routingHeaders are headers a server or the proxy in front of it may read
// as where the request came from or where it goes: the original host,
// path or method a front proxy rewrote (X-Original-URL reaches /admin
// behind a granted /v1 prefix on IIS and Symfony; X-Forwarded-Host makes
// an application build links and tenants for another host), and the
// client address (X-Forwarded-For passes an allow-list of internal
// callers). A proxy in front sets them, never a client; a module that
// sets one is asking for a request other than the one the grants were
// asked about, so it is refused like a Host that differs from the URL.
// Expect and HTTP2-Settings are the transport's, like the framing
// headers.
var routingHeaders = []string{
	"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Prefix",
	"X-Forwarded-Server", "X-Forwarded-Scheme", "X-Forwarded-Ssl", "X-Forwarded-Uri", "X-Forwarded-Path",
	"X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip",
	"X-Original-Url", "X-Original-Uri", "X-Rewrite-Url", "X-Original-Host", "X-Host", "X-Http-Host-Override",
	"X-Envoy-Original-Path", "X-Original-Method", "X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
	"Expect", "Http2-Settings", "Alt-Used",
}

// CheckInjectedHeader checks the name of a header the host itself adds to
// requests (one a grant injects): a token, and none of the headers the
// client writes (framing, connection, proxy) or Host.
func CheckInjectedHeader(name string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return refuse("header", "header name %q is not a token%s", clip(name), ctlNote(name))
	}
	ck := http.CanonicalHeaderKey(name)
	if ck == "Host" || slices.Contains(hostHeaders, ck) {
		return refuse("header", "header %s is the client's to set (the host, framing, connection or proxy); it cannot be injected", ck)
	}
	return nil
}

// header checks the module's headers and returns them as an http.Header:
// the one check of a module's headers, for http.fetch and Extism's
// http_request alike (both send through Send). Host is the URL's (a Host
// naming another is refused), and the framing, connection, proxy and
// routing headers (hostHeaders, routingHeaders) are refused.
func (c *Client) header(in map[string]string, d Dest) (http.Header, error) {
	if len(in) > c.cfg.MaxHeaders {
		return nil, refuse("header", "%d headers; the limit is %d", len(in), c.cfg.MaxHeaders)
	}
	names := make([]string, 0, len(in))
	size := 0
	for k, v := range in {
		names = append(names, k)
		size += len(k) + len(v)
	}
	if size > c.cfg.MaxHeaderBytes {
		return nil, refuse("header", "the headers are %d bytes; the limit is %d", size, c.cfg.MaxHeaderBytes)
	}
	slices.Sort(names) // the same refusal for the same headers, whatever the map's order
	h := make(http.Header, len(in))
	for _, k := range names {
		v := in[k]
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, refuse("header", "header name %q is not a token%s", clip(k), ctlNote(k))
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, refuse("header", "header %s: the value %q has a byte a header may not carry%s", clip(k), clip(v), ctlNote(v))
		}
		ck := http.CanonicalHeaderKey(k)
		if _, dup := h[ck]; dup {
			return nil, refuse("header", "header %s is given twice (names differ only in case)", ck)
		}
		switch {
		case ck == "Host":
			// Go sends the URL's host whatever the header says; a module
			// that says otherwise means another server than the one the
			// grants were asked about, so it is refused, not ignored.
			_, hd, err := ParseURL(d.Scheme + "://" + v)
			if strings.ContainsAny(v, "/?#@\\") || err != nil || hd.Host != d.Host || hd.Port != d.Port {
				return nil, refuse("header", "header Host: %q differs from the URL's host %s; a request goes to the host its URL names", clip(v), d.HostPort())
			}
			continue // the URL's host is sent
		case slices.Contains(hostHeaders, ck):
			return nil, refuse("header", "header %s is the client's to set (framing, connection or proxy), not the module's", ck)
		case slices.Contains(routingHeaders, ck) || strings.HasPrefix(ck, "Proxy-"):
			return nil, refuse("header", "header %s says where a request came from or goes (a proxy's to set, which servers route or trust by); a module may not set it: the request goes to its URL's host and path", ck)
		}
		h[ck] = []string{v}
	}
	return h, nil
}

// ctlNote names the bytes of s that would split a request, if any.
func ctlNote(s string) string {
	var found []string
	for _, c := range []struct{ b, name string }{{"\r", "CR"}, {"\n", "LF"}, {"\x00", "NUL"}} {
		if strings.Contains(s, c.b) {
			found = append(found, c.name)
		}
	}
	if len(found) == 0 {
		return ""
	}
	return "; it holds " + strings.Join(found, " and ") + ", which would end the header (header injection)"
}

// Hop is one request of a chain: the module's own, then each redirect's.
type Hop struct {
	N      int // 0 for the module's request, then 1, 2, ... for each redirect followed
	Method string
	URL    *url.URL // normalized (ParseURL)
	Dest   Dest
	// Header is what is sent: the module's headers (less the credentials
	// it set, once a redirect leaves its host), and what Hooks.Before
	// adds.
	Header http.Header
	Body   []byte
}

// Hooks let a caller decide on each hop and see each redirect.
type Hooks struct {
	// Before is asked about every hop before it is sent (the grants, for
	// the first request and every redirect); it may add headers to
	// h.Header. Its error ends the chain and is returned as it is.
	Before func(ctx context.Context, h *Hop) error
	// Redirected is told of each redirect response, whose body is
	// closed after it returns, before the next hop is asked about.
	Redirected func(h *Hop, resp *http.Response)
}

// credentialHeaders are the module's headers a redirect to another host
// does not carry, as browsers and net/http do.
var credentialHeaders = []string{"Authorization", "Cookie", "Cookie2", "Proxy-Authorization", "Www-Authenticate"}

// Send checks a request (the method, the URL normalized, the headers),
// sends it, and follows its redirects itself, each a hop of its own:
// normalized, asked about (hooks.Before), given its headers, and its
// connection checked by the guard; at most MaxRedirects are followed. It
// returns the final response (the caller closes its body) and its hop,
// or the error and the hop it happened on (nil when the request was
// refused before its first hop). An error is an *Error, Before's error,
// or the network's.
func (c *Client) Send(ctx context.Context, r Request, hooks Hooks) (*http.Response, *Hop, error) {
	method := strings.ToUpper(r.Method)
	if method == "" {
		method = http.MethodGet
	}
	if !slices.Contains(Methods, method) {
		return nil, nil, refuse("method", "method %q is not allowed; use one of %s", clip(r.Method), strings.Join(Methods, ", "))
	}
	u, d, err := ParseURL(r.URL)
	if err != nil {
		return nil, nil, err
	}
	h, err := c.header(r.Header, d)
	if err != nil {
		return nil, nil, err
	}
	hop := &Hop{Method: method, URL: u, Dest: d, Header: h.Clone(), Body: r.Body}
	for {
		if hooks.Before != nil {
			if err := hooks.Before(ctx, hop); err != nil {
				return nil, hop, err
			}
		}
		var body io.Reader
		if hop.Body != nil {
			body = bytes.NewReader(hop.Body)
		}
		req, err := http.NewRequestWithContext(ctx, hop.Method, hop.URL.String(), body)
		if err != nil {
			return nil, hop, refuse("destination", "%s: %v", hop.Dest, err)
		}
		req.Header = hop.Header
		resp, err := c.http.Do(req)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // url.Error repeats the URL, path and query included
			}
			return nil, hop, err
		}
		loc := resp.Header.Get("Location")
		if !isRedirect(resp.StatusCode) || loc == "" {
			return resp, hop, nil
		}
		if hooks.Redirected != nil {
			hooks.Redirected(hop, resp)
		}
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10) // lets the connection be reused
		resp.Body.Close()
		if hop.N >= c.cfg.MaxRedirects {
			return nil, hop, refuse("redirect", "stopped at a redirect past the limit of %d redirects", c.cfg.MaxRedirects)
		}
		next, err := hop.URL.Parse(loc)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, hop, refuse("destination", "redirect to (invalid URL): not a URL: %v", err)
		}
		nu, nd, err := ParseURL(next.String())
		if err != nil {
			e := err.(*Error)
			return nil, hop, &Error{Rule: e.Rule, Reason: "redirect to " + redact(next) + ": " + e.Reason}
		}
		n := &Hop{N: hop.N + 1, Method: hop.Method, URL: nu, Dest: nd, Header: h.Clone(), Body: hop.Body}
		if resp.StatusCode != http.StatusTemporaryRedirect && resp.StatusCode != http.StatusPermanentRedirect && hop.Method != http.MethodHead {
			// 301, 302 and 303 are followed with a GET and no body, as
			// browsers do; 307 and 308 repeat the method and the body.
			n.Method, n.Body = http.MethodGet, nil
			n.Header.Del("Content-Type")
		}
		if nd.Host != d.Host {
			for _, k := range credentialHeaders {
				n.Header.Del(k)
			}
		}
		hop = n
	}
}

func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// redact is a URL's scheme and host, for messages: its path, query and
// user information may carry secrets.
func redact(u *url.URL) string { return u.Scheme + "://" + clip(u.Host) }
