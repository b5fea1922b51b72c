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
	// Check decides whether a request may go to its destination, for the
	// first request and each redirect: the grants. Its error is returned
	// as it is (wrapped by nothing), so a caller can return its own kind.
	// Nil allows every destination (the guard still applies).
	Check func(ctx context.Context, u *url.URL, d Dest) error
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
	// Jar nil: no cookie is kept from one request to the next.
	c.http = &http.Client{Transport: c.transport, CheckRedirect: c.redirect, Jar: nil}
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

// Prepare checks a request and builds it: the method, the URL normalized
// (ParseURL) and rewritten, and the headers. It asks nothing of Check and
// dials nothing; Do does. A refusal is an *Error.
func (c *Client) Prepare(ctx context.Context, r Request) (*http.Request, Dest, error) {
	method := strings.ToUpper(r.Method)
	if method == "" {
		method = http.MethodGet
	}
	if !slices.Contains(Methods, method) {
		return nil, Dest{}, refuse("method", "method %q is not allowed; use one of %s", clip(r.Method), strings.Join(Methods, ", "))
	}
	u, d, err := ParseURL(r.URL)
	if err != nil {
		return nil, Dest{}, err
	}
	h, err := c.header(r.Header, d)
	if err != nil {
		return nil, Dest{}, err
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body) // NewRequest sets ContentLength and GetBody (for 307 and 308 redirects)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, Dest{}, refuse("destination", "%s: %v", d, err)
	}
	req.Header = h
	return req, d, nil
}

// header checks the module's headers and returns them as an http.Header.
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

// Do sends a request prepared by Prepare: Check is asked about its
// destination, then about every redirect's, and every connection passes
// the guard. The caller closes the response's body. An error is an *Error,
// Check's error, or the network's.
func (c *Client) Do(req *http.Request, d Dest) (*http.Response, error) {
	if c.cfg.Check != nil {
		if err := c.cfg.Check(req.Context(), req.URL, d); err != nil {
			return nil, err
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, err
	}
	return resp, nil
}

// redirect normalizes a redirect's URL and asks Check about it.
func (c *Client) redirect(req *http.Request, via []*http.Request) error {
	if len(via) > c.cfg.MaxRedirects {
		return refuse("redirect", "stopped at a redirect past the limit of %d redirects", c.cfg.MaxRedirects)
	}
	u, d, err := ParseURL(req.URL.String())
	if err != nil {
		e := err.(*Error)
		return &Error{Rule: e.Rule, Reason: "redirect to " + redact(req.URL) + ": " + e.Reason}
	}
	req.URL, req.Host = u, ""
	if c.cfg.Check != nil {
		return c.cfg.Check(req.Context(), u, d)
	}
	return nil
}

// redact is a URL's scheme and host, for messages: its path, query and
// user information may carry secrets.
func redact(u *url.URL) string { return u.Scheme + "://" + clip(u.Host) }
