// Package mcpserver is moat as a Model Context Protocol server: the
// actions a caller may invoke, run_code and the session tools, as MCP
// tools, over streamable HTTP (`moat serve`'s /mcp) or stdio (`moat mcp`).
//
// It is an adapter over moat's HTTP API and nothing else: every tool call
// is a request to the API with the caller's own key (API), in process for
// /mcp and over the network for `moat mcp`. So an agent reaches exactly
// what its key reaches by curl — the same authentication, grants,
// admission, limits, schemas, confirmations and audit, checked where they
// are checked for every other caller — and there is no second
// authorization path to keep in step. The HTTP server is stateless (any
// replica answers any request): the tools are worked out per request from
// the caller's key.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// API sends a request to moat's HTTP API and returns its answer. The
// request carries the caller's key; the answer's body is read whole and
// bounded by the API's own limits and maxAnswer.
type API func(*http.Request) (*http.Response, error)

// Headers the MCP server sets on its API requests, so that the server
// audits each tool call with the client that made it (server records a
// KindMCP event for a request carrying HeaderTool). Both are the caller's
// claims, like the MCP clientInfo they come from: labels in the trail,
// never used for a decision.
const (
	HeaderClient = "X-Moat-Mcp-Client"
	HeaderTool   = "X-Moat-Mcp-Tool"
)

// maxAnswer bounds what a tool reads of one API answer.
const maxAnswer = 32 << 20

// Options configure a Server.
type Options struct {
	// API reaches moat's HTTP API (InProcess or Remote).
	API API
	// Version is moat's, shown to clients as the server's.
	Version string
	// AuthorizationServers, when set, are the OAuth 2.1 authorization
	// servers the protected-resource metadata names (RFC 9728), for
	// clients that discover how to get a token; the token is still a
	// moat API key.
	AuthorizationServers []string
	Logger               *slog.Logger
	// WriteTimeout is how long a client may take to read each write of
	// an event stream (the server's http.write_timeout); 0 leaves the
	// connection's deadline as it is.
	WriteTimeout time.Duration
}

// maxPeek bounds what of a request body is read to learn whether it asks
// for progress: the SDK's own bound on a body (MaxRequestBodyBytes'
// default). A longer body is passed on whole, and the SDK refuses it.
const maxPeek = 4 << 20

// asksProgress reports whether the request is one JSON-RPC request whose
// params carry _meta.progressToken, and the client takes event streams.
// The body is read (bounded) and put back.
func asksProgress(r *http.Request) bool {
	if r.Method != http.MethodPost || r.Body == nil || !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, maxPeek+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	if err != nil || len(head) > maxPeek {
		return false
	}
	var msg struct {
		Params struct {
			Meta struct {
				ProgressToken any `json:"progressToken"`
			} `json:"_meta"`
		} `json:"params"`
	}
	return json.Unmarshal(head, &msg) == nil && msg.Params.Meta.ProgressToken != nil
}

// deadlineWriter moves the connection's write deadline on before each
// write of an event stream, so a call that runs longer than the write
// timeout keeps its stream while it sends progress, and a client that
// stops reading is dropped a timeout later.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) Flush() { _ = w.rc.Flush() }

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// NewHandler returns the streamable HTTP handler of /mcp: stateless, each
// answer one JSON document, except a request that asks for progress (a
// progressToken), answered as an event stream that carries the progress
// notifications before the result (each write moving the connection's
// write deadline on by Options.WriteTimeout, as the API's own streams do);
// cross-origin requests refused (a browser page of another origin cannot
// drive a local agent's tools), and no tools without a key (401, with
// the WWW-Authenticate header that points at the resource metadata).
func NewHandler(o Options) http.Handler {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	server := func(r *http.Request) *mcp.Server {
		c, _ := r.Context().Value(callerKey{}).(*caller)
		if c == nil {
			return nil
		}
		return c.server
	}
	streamable := mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, Logger: logger})
	streaming := mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{Stateless: true, Logger: logger})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := bearer(r)
		if !ok {
			unauthorized(w, r, o, "send a moat API key as Authorization: Bearer <key>; create one with `moat keys create`")
			return
		}
		c := &caller{api: o.API, key: key, version: o.Version, logger: logger, remoteAddr: r.RemoteAddr, chargeOnce: true, writeTimeout: o.WriteTimeout}
		if status, err := c.build(r.Context()); err != nil {
			if status == http.StatusUnauthorized {
				unauthorized(w, r, o, err.Error())
				return
			}
			if status == http.StatusTooManyRequests {
				http.Error(w, err.Error(), status)
				return
			}
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
		if asksProgress(r) {
			streaming.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: o.WriteTimeout}, r)
			return
		}
		streamable.ServeHTTP(w, r)
	})
	cop := http.NewCrossOriginProtection()
	mux := http.NewServeMux()
	mux.Handle("/mcp", cop.Handler(h))
	if len(o.AuthorizationServers) > 0 {
		mux.HandleFunc("GET "+MetadataPath, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"resource":                 resourceURL(r),
				"authorization_servers":    o.AuthorizationServers,
				"bearer_methods_supported": []string{"header"},
				"resource_name":            "moat",
			})
		})
	}
	return mux
}

// ServeStdio serves one MCP session on t (stdin and stdout, for `moat
// mcp`) for the holder of key. The tools are worked out once, at start.
func ServeStdio(ctx context.Context, o Options, key string, t mcp.Transport) error {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &caller{api: o.API, key: key, version: o.Version, logger: logger}
	if _, err := c.build(ctx); err != nil {
		return err
	}
	return c.server.Run(ctx, t)
}

// ServeIO is ServeStdio over a reader and a writer of newline-delimited
// JSON-RPC messages (os.Stdin and os.Stdout for `moat mcp`).
func ServeIO(ctx context.Context, o Options, key string, in io.ReadCloser, out io.WriteCloser) error {
	return ServeStdio(ctx, o, key, &mcp.IOTransport{Reader: in, Writer: out})
}

// MetadataPath is where the protected-resource metadata of /mcp is
// served (RFC 9728), when there are authorization servers to name.
const MetadataPath = "/.well-known/oauth-protected-resource/mcp"

type callerKey struct{}

// caller is one request's (or one stdio session's) view of moat: the
// key it holds and the tools that key may call.
type caller struct {
	api        API
	key        string
	version    string
	logger     *slog.Logger
	remoteAddr string
	server     *mcp.Server
	// chargeOnce: this caller serves one MCP request (/mcp, stateless),
	// whose first API request takes the key's rate token; the others it
	// makes carry Charged, and the API does not charge them again. A
	// stdio session's callers charge every request (it lives on).
	chargeOnce bool
	charged    atomic.Bool
	// writeTimeout is /mcp's event streams' (Options.WriteTimeout).
	writeTimeout time.Duration
	// languages caches GET /v1/languages for run_code (a stdio session
	// asks once).
	languages []language
}

type chargedKey struct{}

// Charged is the API key whose rate token the MCP request that made this
// in-process API request already took, or "". The API's authentication
// does not charge such a request again, so an MCP request costs one token
// however many API requests it takes (the tools' listing, a call, a
// page's files). It is a context value: only code in this process can set
// it, never a request from the network.
func Charged(ctx context.Context) string {
	k, _ := ctx.Value(chargedKey{}).(string)
	return k
}

func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// unauthorized is a 401 whose WWW-Authenticate names the resource
// metadata when there is some (RFC 9728), so an OAuth client finds the
// authorization server.
func unauthorized(w http.ResponseWriter, r *http.Request, o Options, msg string) {
	v := "Bearer"
	if len(o.AuthorizationServers) > 0 {
		v += fmt.Sprintf(` resource_metadata=%q`, wellKnown(r))
	}
	w.Header().Set("WWW-Authenticate", v)
	http.Error(w, msg, http.StatusUnauthorized)
}

func resourceURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/mcp"
}

func wellKnown(r *http.Request) string {
	u := resourceURL(r)
	return strings.TrimSuffix(u, "/mcp") + MetadataPath
}

// answer is an API answer: its status and body.
type answer struct {
	status int
	body   []byte
	ctype  string
}

// problem is the API's error body (server.Problem's fields the tools read).
type problem struct {
	Title        string `json:"title"`
	Detail       string `json:"detail"`
	Code         string `json:"code"`
	Confirmation *struct {
		Token   string `json:"token"`
		Summary string `json:"summary"`
	} `json:"confirmation"`
}

func (a *answer) problem() problem {
	var p problem
	if json.Unmarshal(a.body, &p) != nil || p.Title == "" {
		p.Title = http.StatusText(a.status)
		p.Detail = string(bytes.ToValidUTF8(a.body, nil))
	}
	return p
}

func (a *answer) err() error {
	p := a.problem()
	reason := p.Detail
	if reason == "" {
		reason = p.Title
	}
	if p.Code != "" {
		return fmt.Errorf("%s (%d %s)", reason, a.status, p.Code)
	}
	return fmt.Errorf("%s (%d)", reason, a.status)
}

// do sends one request to the API as the caller, labelled with the client
// and tool for the audit trail.
func (c *caller) do(ctx context.Context, method, path string, body []byte, client, tool string) (*answer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return nil, fmt.Errorf("mcp: %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil && method != http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	if client != "" {
		req.Header.Set(HeaderClient, client)
	}
	if tool != "" {
		req.Header.Set(HeaderTool, tool)
	}
	req.RemoteAddr = c.remoteAddr
	if c.charged.Load() {
		req = req.WithContext(context.WithValue(ctx, chargedKey{}, c.key))
	}
	res, err := c.api(req)
	if err != nil {
		return nil, fmt.Errorf("mcp: %s %s: %w", method, path, err)
	}
	// Only an answer of success is sure to have been charged: a refusal
	// may come before the rate buckets are (a bad key, a key scope, the
	// rate itself), and marking the MCP request charged then would let
	// its next requests through free.
	if c.chargeOnce && res.StatusCode/100 == 2 {
		c.charged.Store(true)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("mcp: %s %s: reading the answer: %w", method, path, err)
	}
	if len(raw) > maxAnswer {
		return nil, fmt.Errorf("mcp: %s %s: the answer is over %d bytes", method, path, maxAnswer)
	}
	return &answer{status: res.StatusCode, body: raw, ctype: res.Header.Get("Content-Type")}, nil
}

// module and action are the parts of GET /v1/modules the tools need.
type module struct {
	Name    string   `json:"name"`
	State   string   `json:"state"`
	Actions []action `json:"actions"`
}

type action struct {
	Name         string          `json:"name"`
	Confirm      bool            `json:"confirm"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
	Callable     *bool           `json:"callable"`
}

// build checks the key and makes the caller's MCP server with its tools.
// The status is the API's when it refused (401 for a bad key).
func (c *caller) build(ctx context.Context) (int, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/modules", nil, "", "")
	if err != nil {
		return 0, err
	}
	var list struct {
		Modules []module `json:"modules"`
	}
	switch a.status {
	case http.StatusOK:
		if err := json.Unmarshal(a.body, &list); err != nil {
			return 0, fmt.Errorf("mcp: GET /v1/modules: %w", err)
		}
	case http.StatusForbidden:
		// A key that may not list modules (a key scope, say) calls no
		// action through MCP; it may still run code or read resources.
	default:
		return a.status, a.err()
	}
	var pages struct {
		Pages []page `json:"pages"`
	}
	if err := c.getJSON(ctx, "/v1/pages", &pages); err != nil {
		return 0, err
	}
	var who struct {
		MayRunCode *bool `json:"may_run_code"`
	}
	if err := c.getJSON(ctx, "/v1/whoami", &who); err != nil {
		return 0, err
	}
	// A page linked from a module's tools: its first the principal may
	// open (MCP Apps links one UI to a tool).
	ui := map[string]string{}
	for _, p := range pages.Pages {
		if _, ok := ui[p.Module]; !ok {
			ui[p.Module] = p.uri()
		}
	}
	caps := &mcp.ServerCapabilities{} // no logging: moat sends clients no log messages
	if len(pages.Pages) > 0 {
		caps.AddExtension(AppsExtension, map[string]any{"mimeTypes": []string{AppMIMEType}})
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "moat", Title: "moat sandbox", Version: c.version}, &mcp.ServerOptions{
		Logger: c.logger, Capabilities: caps,
		Instructions: "moat runs code in sandboxes. Each module.action tool is a deployed plugin action this key may call; " +
			"run_code runs a program once; the session_* tools keep a sandbox with files and state between calls.",
	})
	for _, m := range list.Modules {
		if m.State != "" {
			continue // loading or not loadable here: not callable now
		}
		for _, act := range m.Actions {
			if act.Callable == nil || !*act.Callable {
				continue
			}
			c.addAction(s, m.Name, act, ui[m.Name])
		}
	}
	// run_code and the session tools only for a principal the profile's
	// exec_roles allow (the rule of /v1/runs and /v1/sessions; a server
	// before whoami said so: shown, and the API decides).
	if who.MayRunCode == nil || *who.MayRunCode {
		c.addRunCode(s)
		c.addSessionTools(s)
	}
	c.addTaskTool(s)
	c.addPages(s, pages.Pages)
	c.addResources(s)
	c.server = s
	return 0, nil
}

// getJSON decodes the API's answer to GET path into v; a 403 (the key
// may not read it) leaves v as it is.
func (c *caller) getJSON(ctx context.Context, path string, v any) error {
	a, err := c.do(ctx, http.MethodGet, path, nil, "", "")
	if err != nil {
		return err
	}
	if a.status == http.StatusForbidden {
		return nil
	}
	if a.status != http.StatusOK {
		return fmt.Errorf("mcp: GET %s: %w", path, a.err())
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("mcp: GET %s: %w", path, err)
	}
	return nil
}

// clientName is the calling client's name and version, as it says, cut
// to a label: printable, at most 128 bytes.
func clientName(req *mcp.CallToolRequest) string {
	info := req.ClientInfo()
	if info == nil {
		return "unknown"
	}
	s := info.Name
	if info.Version != "" {
		s += "/" + info.Version
	}
	return Label(s)
}

// Label is a caller's claim (a client's name, a tool's) cut to a label
// fit for the audit trail: printable runes only, at most 128 bytes.
func Label(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, s)
	if len(s) > 128 {
		s = strings.ToValidUTF8(s[:128], "")
	}
	return s
}

func toolError(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func ptr[T any](v T) *T { return &v }

// escape is a path segment.
func escape(s string) string { return url.PathEscape(s) }

// queryEscape is a query value.
func queryEscape(s string) string { return url.QueryEscape(s) }

var errNoArgs = errors.New("the arguments must be a JSON object")

// objectArgs decodes a tool's arguments into v (unknown fields refused).
func objectArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", errNoArgs, err)
	}
	return nil
}
