package abi

// The http family: one outbound HTTP request, sent by the host for the
// guest. The host decides everything about it that matters to safety: the
// URL must be covered by one of the module's effective http grants (scheme,
// host, port and path prefix), on every redirect too; the address each
// connection reaches is checked after DNS, so loopback, private,
// link-local and metadata addresses are reached only when a grant names
// that address; headers a grant injects (a secret as a bearer token) are
// added by the host, are never shown to the guest, and are scrubbed from
// what comes back. Each request is audited with its method, host, path,
// status, bytes, duration and the invocation's correlation id.
const OpHTTPFetch = "http.fetch"

// HTTP limits, enforced by the host. A request over them is refused with
// CodeTooLarge or CodeInvalidArgument before anything is sent; a response
// body over MaxBytes is refused with CodeTooLarge as soon as it passes it.
const (
	// MaxHTTPRequestBody bounds a request body (it must fit in one op
	// request, base64 in JSON, under MaxRequestBytes).
	MaxHTTPRequestBody = 2 << 20
	// DefaultHTTPResponseBytes is the response body limit of a request
	// that names none; MaxHTTPResponseBytes the most one may name (the
	// body returns to the guest inside one op reply).
	DefaultHTTPResponseBytes = 1 << 20
	MaxHTTPResponseBytes     = 2 << 20
	// DefaultHTTPTimeoutMS is the whole request's time (connect, TLS,
	// redirects, body) when the request names none; MaxHTTPTimeoutMS the
	// most it may name. The invocation's own deadline applies as well.
	DefaultHTTPTimeoutMS = 10_000
	MaxHTTPTimeoutMS     = 60_000
	// MaxHTTPHeaders and MaxHTTPHeaderBytes bound the headers of a
	// request (names and values together), and those of a response.
	MaxHTTPHeaders     = 64
	MaxHTTPHeaderBytes = 16 << 10
	// MaxHTTPRedirects is how many redirects one request follows.
	MaxHTTPRedirects = 5
)

// HTTPFetchRequest sends one request. Method is GET when empty. Headers
// are the guest's own (a grant may add more, which the guest never sees);
// names are case-insensitive. Body is base64 in JSON. TimeoutMS is
// 1..MaxHTTPTimeoutMS (0: DefaultHTTPTimeoutMS) and MaxBytes
// 1..MaxHTTPResponseBytes (0: DefaultHTTPResponseBytes).
type HTTPFetchRequest struct {
	Method    string            `json:"method,omitempty"`
	URL       string            `json:"url"`
	Headers   map[string]string `json:"headers,omitempty"`
	Body      []byte            `json:"body,omitempty"`
	TimeoutMS int               `json:"timeout_ms,omitempty"`
	MaxBytes  int64             `json:"max_bytes,omitempty"`
}

// OpTarget is the URL: http is granted per target.
func (r *HTTPFetchRequest) OpTarget() string { return r.URL }

// HTTPFetchResponse is the final response, after redirects. Headers have
// lower-case names; a header sent more than once is its values joined by
// ", ". URL is where the body came from (the last redirect's target).
// Body is base64 in JSON.
type HTTPFetchResponse struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    []byte            `json:"body,omitempty"`
	URL     string            `json:"url,omitempty"`
}
