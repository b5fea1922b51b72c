package abi

// The HTTP route contract (moat.yaml routes:). moat serve answers
// METHOD /m/{org}/{module}/{path} with the action the route names; the
// action's input is a RouteRequest in JSON, and its output may be a
// RouteResponse in JSON, told from plain output by its "moat" field.
// An action whose output is anything else answers 200 text/plain, as
// POST /v1/modules/M/actions/A does.
//
// The types live here, beside the ops' wire types, so that the server
// and every SDK read one definition: the Go SDK imports them, the other
// SDKs write the same JSON (guests/*/README.md).

// Discriminators of the route documents (the "moat" field).
const (
	RouteRequestKind  = "http.request"
	RouteResponseKind = "http.response"
)

// Bounds of a route's request and response.
const (
	// MaxRouteBodyBytes is the most a route's request body may be
	// (routes[].max_body; the server's limits.max_request_bytes bounds
	// it too). Default DefaultRouteBodyBytes.
	MaxRouteBodyBytes     = 16 << 20
	DefaultRouteBodyBytes = 1 << 20
	// MaxRouteHeaders bounds the request headers an action receives and
	// the response headers it may set.
	MaxRouteHeaders = 32
	// MaxRouteHeaderBytes bounds one header value, either way.
	MaxRouteHeaderBytes = 4096
)

// RouteRequest is what an action bound to a route receives as its input.
//
// Headers hold only the request headers of RouteRequestHeaders (lower
// case; several values joined by ", "): never Authorization, Cookie or a
// webhook's signature, which are the server's to check and not the
// module's to keep. Body is the request's body when it is UTF-8 text;
// otherwise BodyBase64 holds it (standard encoding) and Body is empty.
type RouteRequest struct {
	Moat       string              `json:"moat"`  // RouteRequestKind
	Route      string              `json:"route"` // as the manifest writes it: "GET /items/{id}"
	Auth       string              `json:"auth"`  // key, public or webhook
	Method     string              `json:"method"`
	Path       string              `json:"path"` // below /m/{org}/{module}, starting with /
	Params     map[string]string   `json:"params,omitempty"`
	Query      map[string][]string `json:"query,omitempty"`
	Headers    map[string]string   `json:"headers,omitempty"`
	Body       string              `json:"body,omitempty"`
	BodyBase64 string              `json:"body_base64,omitempty"`
	// Remote is the source address of a public or webhook route's
	// caller (as the server sees it); empty for key routes.
	Remote string `json:"remote,omitempty"`
}

// RouteResponse is what an action may return to answer a route. Status
// defaults to 200 and must be 200-599 (1xx is the server's); ContentType
// to text/plain. Headers may set only those of RouteResponseHeaders;
// anything else (Set-Cookie above all: a module shares its origin with
// every other module) fails the call. Body is text; BodyBase64 bytes
// (standard encoding); Media the id of a media item of the organization,
// served with its own sniffed type. At most one of the three.
type RouteResponse struct {
	Moat        string            `json:"moat"` // RouteResponseKind
	Status      int               `json:"status,omitempty"`
	ContentType string            `json:"content_type,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Body        string            `json:"body,omitempty"`
	BodyBase64  string            `json:"body_base64,omitempty"`
	Media       string            `json:"media,omitempty"`
}

// RouteRequestHeaders are the request headers an action receives (lower
// case). Everything else stays with the server: credentials, cookies,
// signatures, hop-by-hop and proxy headers.
var RouteRequestHeaders = []string{
	"accept", "accept-language", "content-type", "if-match", "if-modified-since",
	"if-none-match", "user-agent",
	// The event's kind and delivery, as webhook senders name them (the
	// signature headers are not among them).
	"x-github-event", "x-github-delivery", "webhook-id", "webhook-timestamp",
}

// RouteResponseHeaders are the response headers an action may set
// (compared case-insensitively). Content-Type is the field ContentType;
// the server sets the security headers itself.
var RouteResponseHeaders = []string{
	"cache-control", "content-language", "etag", "expires", "last-modified",
	"link", "location", "retry-after", "vary",
}
