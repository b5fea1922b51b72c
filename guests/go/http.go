package moat

import (
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// HTTPClient sends HTTP requests through the host (the op http.fetch). Use
// the package variable [HTTP]. The host, not the plugin, makes the
// connection: the URL must be covered by one of the module's http grants
// (capabilities: {http: ["https://api.example.com:443"]}), on every
// redirect too, and the address it reaches is checked after DNS, so a
// plugin reaches loopback, private or metadata addresses only where a
// grant names them. Headers a grant injects (a secret as a bearer token)
// are added by the host and never shown to the plugin. The limits
// (request and response sizes, time, headers, redirects) are those of
// abi/http.go.
type HTTPClient struct{}

// HTTP sends HTTP requests through the host.
var HTTP HTTPClient

// HTTPRequest is one request. Method is GET when empty; Headers are the
// plugin's own (names case-insensitive). Timeout bounds the whole request,
// redirects and body included (0: abi.DefaultHTTPTimeoutMS; it is sent in
// whole milliseconds, rounded up); MaxBytes bounds the response body (0:
// abi.DefaultHTTPResponseBytes; a longer body fails with abi.CodeTooLarge).
type HTTPRequest struct {
	Method   string
	URL      string
	Headers  map[string]string
	Body     []byte
	Timeout  time.Duration
	MaxBytes int64
}

// HTTPResponse is the final response, after redirects. A status of 4xx or
// 5xx is a response, not an error: only a request the host refuses or
// cannot complete returns an error. Headers have lower-case names (read
// them with Header); URL is where the body came from.
type HTTPResponse struct {
	Status  int
	Headers map[string]string
	Body    []byte
	URL     string
}

// Header returns the value of the response header name (any case), or
// "" when the response has none. A header sent more than once is its
// values joined by ", ".
func (r *HTTPResponse) Header(name string) string {
	if v, ok := r.Headers[name]; ok {
		return v
	}
	return r.Headers[strings.ToLower(name)]
}

// Fetch sends req and returns the response. An *abi.Error says why the
// host refused or failed it: abi.CodeDenied for a URL no grant covers (or
// a redirect to one), abi.CodeTooLarge for a body over its limit,
// abi.CodeUnavailable when the server could not be reached or timed out.
func (HTTPClient) Fetch(req HTTPRequest) (*HTTPResponse, error) {
	wire := abi.HTTPFetchRequest{Method: req.Method, URL: req.URL, Headers: req.Headers, Body: req.Body, MaxBytes: req.MaxBytes}
	if req.Timeout < 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "op %s: timeout %v is negative; leave it 0 for the host's default (%d ms)", abi.OpHTTPFetch, req.Timeout, abi.DefaultHTTPTimeoutMS)
	}
	if req.Timeout > 0 {
		ms := (req.Timeout + time.Millisecond - 1) / time.Millisecond
		if ms > abi.MaxHTTPTimeoutMS {
			// Sent as it is, the host refuses it; clamping here would hide
			// the mistake, and an int could overflow on the way.
			ms = abi.MaxHTTPTimeoutMS + 1
		}
		wire.TimeoutMS = int(ms)
	}
	var resp abi.HTTPFetchResponse
	if err := callBytes(abi.OpHTTPFetch, &wire, &resp, "body", func(b []byte) { resp.Body = b }); err != nil {
		return nil, err
	}
	if resp.Body == nil {
		resp.Body = []byte{}
	}
	return &HTTPResponse{Status: resp.Status, Headers: resp.Headers, Body: resp.Body, URL: resp.URL}, nil
}

// Get fetches url with GET and the host's default time and size limits.
func (c HTTPClient) Get(url string) (*HTTPResponse, error) {
	return c.Fetch(HTTPRequest{URL: url})
}
