package server

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
)

// The policies every response carries. The API's documents are data,
// never pages: a browser that opens one runs nothing in it, frames it
// nowhere and sends no referrer. The console is a page of this origin's
// own files only: no inline script or style, nothing from elsewhere.
const (
	apiCSP     = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'; sandbox"
	consoleCSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

// isConsole reports whether a route serves the web console's page or files.
func isConsole(route string) bool { return route == "/" || route == "/console/*" }

// frontDoor is the middleware every request passes after observe: it
// refuses requests from other web origins and for unknown hosts, sets the
// browser policies on the response, keeps module output from being read
// as a page, and bounds the time to send the body and read the response.
func (s *Server) frontDoor(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		route := c.Path()
		h := c.Response().Header()
		// The keys are canonical and the values constant: they go into the
		// map directly, each a slice of the request state's one array
		// (Header.Set canonicalizes the key and allocates a slice per
		// value; a full slice, so an Add elsewhere copies, never writes
		// into the array).
		st := stateOf(c)
		v := st.hdr[1:]
		v[0], v[1], v[2], v[3] = "nosniff", "DENY", "no-referrer", "same-origin"
		h["X-Content-Type-Options"] = v[0:1:1]
		h["X-Frame-Options"] = v[1:2:2]
		h["Referrer-Policy"] = v[2:3:3]
		h["Cross-Origin-Resource-Policy"] = v[3:4:4]
		if isConsole(route) {
			v[4] = consoleCSP
			h["Cross-Origin-Opener-Policy"] = v[3:4:4] // same-origin too
		} else {
			v[4] = apiCSP
		}
		h["Content-Security-Policy"] = v[4:5:5]
		c.Response().Before(func() { s.beforeWrite(c, route) })
		// The body's deadline first: a request refused below is answered
		// before its body, which must not hold the connection open.
		s.bodyDeadline(c)

		// /healthz and /readyz say nothing worth reading across origins
		// and are probed by infrastructure under names of its own.
		if route != "/healthz" && route != "/readyz" {
			if p := s.checkHost(req); p != nil {
				s.metrics.denials.WithLabelValues(p.Code).Inc()
				return drainRefused(c, p)
			}
		}
		// A signed media URL is for pages, of any origin: the signature,
		// checked by the route, is its authority (media.go).
		if p := s.checkOrigin(req); p != nil && !signedMediaRequest(route, req) && route != pageFileRoute {
			s.metrics.denials.WithLabelValues(p.Code).Inc()
			return drainRefused(c, p)
		}
		return drainRefused(c, next(c))
	}
}

// drainWindow and drainBytes bound what the server reads of a body after
// it answered without it (beforeWrite): for at most drainWindow the rest
// of a small body is read and thrown away, then the answer goes out. Closing a connection whose client is still sending resets it, and
// a reset can discard the answer before the client reads it: a viewer's
// refused upload came back to Go's client as "connection reset by peer",
// not as its 403. A client that sends nothing more holds the connection
// for drainWindow, not http.body_timeout. A request with a valid key may
// have more read (drainBytesKeyed): a refused upload of a module of
// several MiB then reaches its client as the refusal.
const (
	drainWindow     = 250 * time.Millisecond
	drainBytes      = 1 << 20
	drainBytesKeyed = 64 << 20
)

// drainRefused writes err (the answer, when there is one), then reads
// what arrives of an unread HTTP/1 body within drainWindow; net/http sends
// the answer, with its length, when the handler returns. (Flushed before
// the drain, it went out chunked, its length unknown.)
func drainRefused(c echo.Context, err error) error {
	st := stateOf(c)
	b := st.pending
	if b == nil || b.done || c.Request().ProtoMajor != 1 || !c.Response().Committed && err == nil {
		return err
	}
	if err != nil {
		c.Error(err)
	}
	limit := int64(drainBytes)
	if st.keyID != "" {
		limit = drainBytesKeyed
	}
	_, _ = io.CopyN(io.Discard, b.ReadCloser, limit)
	return nil
}

// beforeWrite runs as the response's header goes out. Outside the
// console, a response is JSON, plain text or bytes, never a type a
// browser renders as a document: a module's output that sniffs as HTML
// or SVG would otherwise run as a page of this origin. And the client
// gets http.write_timeout to read the response.
func (s *Server) beforeWrite(c echo.Context, route string) {
	h := c.Response().Header()
	if !isConsole(route) {
		ct := h.Get(echo.HeaderContentType)
		switch ct {
		case "", echo.MIMEApplicationJSON, "application/problem+json", echo.MIMEOctetStream, "text/plain; charset=utf-8":
			// What the API's handlers write: served as it is (the
			// switch below would agree), without parsing it.
			ct = ""
		}
		mt, _, err := mime.ParseMediaType(ct)
		switch {
		case ct == "":
		case route == mediaRoute && err == nil && slices.Contains(abi.MediaTypes, mt):
			// A media item, with the type its bytes were sniffed as: an
			// image, audio, video or PDF, never a page, and served with
			// nosniff and the sandboxing policy above (media.go).
		case isModuleRoute(route) && err == nil:
			// A module's route: the type its action chose, checked
			// (routes.go), a document under routeHTMLCSP's sandbox.
		case route == pageFileRoute && c.Response().Header().Get("Content-Security-Policy") == pageCSP:
			// A module's page, with its type from moat's table and the
			// page's sandboxing policy (pages.go).
		case err == nil && (mt == "application/json" || mt == "application/problem+json" || mt == "application/octet-stream"):
		case err == nil && mt == "text/event-stream":
			// A stream of events: a browser renders none as a document.
		case strings.HasPrefix(route, e2bSandboxPrefix) && err == nil && (mt == "application/connect+json" || mt == "application/x-ndjson"):
			// E2B's data plane: Connect's streams and the code
			// interpreter's lines of JSON (e2b_sandbox.go).
		case err == nil && mt == "text/plain":
			h.Set(echo.HeaderContentType, "text/plain; charset=utf-8")
		default:
			h.Set(echo.HeaderContentType, "application/octet-stream")
			h.Set("Content-Disposition", "attachment")
		}
	}
	// A response sent before the request's body was read to its end (a
	// 401 for a missing key, a 403, a 413, a 429) closes the connection,
	// and the read deadline passes at once: otherwise net/http reads up to
	// 256 KiB of the rest of the body, before the response and again as
	// it closes the body, so that the connection can carry another
	// request, and a client sending nothing more held its refusal, and a
	// connection the cap cannot close (it is not idle), until
	// http.body_timeout. The client must reconnect, which a refused one
	// should. (HTTP/2 ends the stream alone; a Connection header is not
	// allowed there.)
	if b := stateOf(c).pending; b != nil && !b.done {
		if c.Request().ProtoMajor == 1 {
			h["Connection"] = []string{"close"}
		}
		_ = setDeadline(c.Response().Writer, true, time.Now().Add(drainWindow))
	}
	_ = setDeadline(c.Response().Writer, false, time.Now().Add(time.Duration(s.cfg.HTTP.WriteTimeout)))
}

// setDeadline sets the read (or the write) deadline of the connection
// under w, as http.ResponseController does (unwrapping w until a writer
// has the method), without allocating a controller for each request.
func setDeadline(w http.ResponseWriter, read bool, t time.Time) error {
	for {
		if read {
			if d, ok := w.(interface{ SetReadDeadline(time.Time) error }); ok {
				return d.SetReadDeadline(t)
			}
		} else if d, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
			return d.SetWriteDeadline(t)
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return fmt.Errorf("%T: %w", w, http.ErrNotSupported)
		}
		w = u.Unwrap()
	}
}

// checkHost refuses a Host header naming a host the server does not go
// by. A page whose DNS name an attacker rebinds to this server's address
// is same-origin with the name, so the browser lets it read the answers;
// its requests still carry the name in Host. IP addresses and localhost
// cannot be rebound; other names must be listed in http.allowed_hosts
// (or be the listen address's).
func (s *Server) checkHost(req *http.Request) *Problem {
	if req.Host == "" || s.hostAllowed(req.Host) {
		return nil
	}
	return problem(http.StatusForbidden, "forbidden_host",
		"the Host header %q names a host this server does not answer to; add it to http.allowed_hosts in the server config if it is this server's name",
		truncate(req.Host, 256))
}

func (s *Server) hostAllowed(hostport string) bool {
	name := normalHost(hostport)
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	if name == "localhost" || name == normalHost(s.cfg.Listen) {
		return true
	}
	if _, _, ok := s.cfg.Routes.moduleHost(name); ok {
		return true
	}
	for _, a := range s.cfg.HTTP.AllowedHosts {
		a = normalHost(a)
		if a == name || strings.HasPrefix(a, "*.") && strings.HasSuffix(name, a[1:]) {
			return true
		}
	}
	return false
}

// checkOrigin refuses a request a browser sent for a page of another
// origin: its Origin header names another origin (or is "null": a
// sandboxed frame, a file), or its Sec-Fetch-Site says cross-site or
// same-site. A browser sends "simple" requests (a text/plain POST) to
// any address without asking, and the Piston routes need no key, so
// without this any web page could run code here. Clients outside a
// browser send neither header.
func (s *Server) checkOrigin(req *http.Request) *Problem {
	origin := req.Header.Get("Origin")
	if origin != "" {
		if s.sameOrigin(req, origin) || s.cfg.HTTP.allowedOrigins[strings.ToLower(origin)] {
			return nil
		}
		return problem(http.StatusForbidden, "forbidden_origin",
			"the Origin header %q is not this server's origin: a page of another site sent this request; the operator lists the origins that may in http.allowed_origins",
			truncate(origin, 256))
	}
	switch site := req.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return problem(http.StatusForbidden, "forbidden_origin",
			"the Sec-Fetch-Site header is %q: a page of another site sent this request; the operator lists the origins that may in http.allowed_origins",
			truncate(site, 64))
	}
	return nil
}

// sameOrigin reports whether origin is the origin the request was sent
// to: its scheme, and the Host header (checked by checkHost).
func (s *Server) sameOrigin(req *http.Request, origin string) bool {
	scheme := "http"
	if req.TLS != nil {
		scheme = "https"
	}
	self := scheme + "://" + strings.ToLower(req.Host)
	o := strings.ToLower(origin)
	if o == self {
		return true
	}
	// A default port may be written or not.
	def := map[string]string{"http": ":80", "https": ":443"}[scheme]
	return strings.TrimSuffix(o, def) == strings.TrimSuffix(self, def)
}

// bodyDeadline gives the client http.body_timeout to send the request's
// body. The deadline is lifted once the body is read to its end, so that
// it does not end a long invocation: net/http watches the connection for
// the client going away once the body is read, and a read deadline
// passing there would cancel the request. It stays when the body is not
// read to its end, so that net/http's draining of the rest before the
// response is bounded too.
func (s *Server) bodyDeadline(c echo.Context) {
	req := c.Request()
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		return
	}
	w := c.Response().Writer
	if err := setDeadline(w, true, time.Now().Add(time.Duration(s.cfg.HTTP.BodyTimeout))); err != nil {
		return // not a connection with deadlines (a test recorder)
	}
	b := &deadlineBody{ReadCloser: req.Body, w: w, timeout: time.Duration(s.cfg.HTTP.BodyTimeout)}
	req.Body = b
	stateOf(c).pending = b
}

// deadlineBody lifts the read deadline at the end of the body and makes a
// passed deadline an error naming the setting.
type deadlineBody struct {
	io.ReadCloser
	w       http.ResponseWriter // whose connection's read deadline it lifts
	timeout time.Duration
	done    bool
}

// bodyTimeoutError is what reading a body past http.body_timeout returns.
type bodyTimeoutError struct{ timeout time.Duration }

func (e *bodyTimeoutError) Error() string {
	return "the request body did not arrive within " + e.timeout.String() + " (http.body_timeout)"
}

func (e *bodyTimeoutError) Timeout() bool { return true }

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.done:
		b.done = true
		_ = setDeadline(b.w, true, time.Time{})
	case err != nil && isTimeout(err):
		return n, &bodyTimeoutError{b.timeout}
	}
	return n, err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
