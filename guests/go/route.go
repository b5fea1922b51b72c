package moat

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
)

// RouteRequest is the HTTP request an action bound to a route (moat.yaml
// routes:) receives as its input; read it with [Request]. Its fields are
// abi.RouteRequest's: Route, Auth, Method, Path, Params, Query, Headers
// (lower-case names, only those abi.RouteRequestHeaders lists: never
// Authorization or Cookie) and Remote (the source address of a public or
// webhook call). The body is [RouteRequest.Bytes].
type RouteRequest struct {
	abi.RouteRequest
}

// Request reads an action's input as the request of its route. It fails
// with abi.CodeInvalidArgument when the input is not one: the action was
// invoked directly, not through a route.
func Request(input []byte) (*RouteRequest, error) {
	var r RouteRequest
	if err := json.Unmarshal(input, &r.RouteRequest); err != nil || r.Moat != abi.RouteRequestKind {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "the input is not an HTTP request of a route (moat.yaml routes:)")
	}
	return &r, nil
}

// Bytes is the request's body.
func (r *RouteRequest) Bytes() ([]byte, error) {
	if r.BodyBase64 != "" {
		return base64.StdEncoding.DecodeString(r.BodyBase64)
	}
	return []byte(r.Body), nil
}

// Header is the request header name (any case), or "".
func (r *RouteRequest) Header(name string) string { return r.Headers[strings.ToLower(name)] }

// Param is the path parameter name ({name} in the route), or "".
func (r *RouteRequest) Param(name string) string { return r.Params[name] }

// QueryValue is the first value of the query parameter name, or "".
func (r *RouteRequest) QueryValue(name string) string {
	if v := r.Query[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Response is what an action answers its route with; return
// [Response.Encode] as the action's output. Status defaults to 200,
// ContentType to text/plain. Headers may be only those
// abi.RouteResponseHeaders lists (Location, Cache-Control, ETag, ...):
// the server refuses anything else, Set-Cookie above all. Media, the id
// of a media item of the organization, is served instead of Body with
// its own type.
type Response struct {
	Status      int
	ContentType string
	Headers     map[string]string
	Body        []byte
	Media       string
}

// Encode is the response as the action's output.
func (r Response) Encode() ([]byte, error) {
	out := abi.RouteResponse{Moat: abi.RouteResponseKind, Status: r.Status, ContentType: r.ContentType, Headers: r.Headers, Media: r.Media}
	if utf8.Valid(r.Body) {
		out.Body = string(r.Body)
	} else {
		out.BodyBase64 = base64.StdEncoding.EncodeToString(r.Body)
	}
	return json.Marshal(out)
}

// JSON is a response of status with v in JSON as its body.
func JSON(status int, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return Response{Status: status, ContentType: "application/json", Body: b}.Encode()
}
