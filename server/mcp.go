package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/server/internal/mcpserver"
)

// MCPConfig is the mcp: section of moat-server.yaml.
type MCPConfig struct {
	// Disabled turns /mcp off (moat mcp, a client of the API, still works).
	Disabled bool `yaml:"disabled"`
	// AuthorizationServers are the OAuth 2.1 authorization servers that
	// /.well-known/oauth-protected-resource/mcp names (RFC 9728), for MCP
	// clients that discover where to get a token. The bearer token is
	// still a moat API key: an operator whose authorization server issues
	// moat keys lists it here. Empty: no metadata is served.
	AuthorizationServers []string `yaml:"authorization_servers"`
}

// check refuses authorization servers that are not https URLs (http on
// this machine aside), and more than 8.
func (m MCPConfig) check() error {
	if len(m.AuthorizationServers) > 8 {
		return fmt.Errorf("%d servers; list at most 8", len(m.AuthorizationServers))
	}
	for _, a := range m.AuthorizationServers {
		u, err := url.Parse(a)
		if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" ||
			!(u.Scheme == "https" || u.Scheme == "http" && (u.Hostname() == "localhost" || net.ParseIP(u.Hostname()).IsLoopback())) {
			return fmt.Errorf("%q is not an https:// URL of an authorization server (its issuer, like https://auth.example.com)", a)
		}
	}
	return nil
}

// mcpRoutes answers MCP at /mcp (package server/internal/mcpserver): the
// caller's tools, each call a request to this server's own API with the
// caller's key, in process.
func (s *Server) mcpRoutes(e *echo.Echo) {
	if s.cfg.MCP.Disabled {
		return
	}
	h := echo.WrapHandler(mcpserver.NewHandler(mcpserver.Options{
		API:     mcpserver.InProcess(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) })),
		Version: "moat", Logger: s.log, AuthorizationServers: s.cfg.MCP.AuthorizationServers,
		WriteTimeout: time.Duration(s.cfg.HTTP.WriteTimeout),
	}))
	if len(s.cfg.MCP.AuthorizationServers) > 0 {
		e.GET(mcpserver.MetadataPath, h)
	}
	// Stateless: no GET stream, no session to DELETE (the handler would
	// answer 405); a cross-origin browser's preflight gets no CORS answer.
	e.POST("/mcp", h)
}

// ServeMCP serves one MCP session on in and out (`moat mcp`: stdin and
// stdout) for the holder of key, each tool call a request to the moat
// server at base with that key, as `moat deploy` reaches it.
func ServeMCP(ctx context.Context, base, key, version string, in io.ReadCloser, out io.WriteCloser, log *slog.Logger) error {
	api, err := mcpserver.Remote(base, &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}})
	if err != nil {
		return err
	}
	return mcpserver.ServeIO(ctx, mcpserver.Options{API: api, Version: version, Logger: log}, key, in, out)
}

// auditMCP records a request an MCP tool call made (mcpserver.HeaderTool):
// the tool, the client that said it called it, the answer's status. The
// host's own events for the call (decision, invocation, confirmation)
// carry the same correlation id.
func (s *Server) auditMCP(c echo.Context, tool string, err error) {
	status := c.Response().Status
	if err != nil {
		var p *Problem
		var he *echo.HTTPError
		switch {
		case errors.As(err, &p):
			status = p.Status
		case errors.As(err, &he):
			status = he.Code
		default:
			status = http.StatusInternalServerError
		}
	}
	decision := audit.Allow
	if status >= 400 {
		decision = audit.Deny
	}
	p := principalOf(c)
	module, action := "", ""
	if path := c.Request().URL.Path; strings.HasPrefix(path, "/v1/modules/") || strings.HasPrefix(path, "/v1/confirmations/") {
		module, action, _ = strings.Cut(mcpserver.Label(tool), ".") // an action's tool: module.action
	}
	s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindMCP, Decision: decision, CorrelationID: correlationID(c),
		Module: module, Action: action, User: p.User, Org: p.Org, Rule: "mcp tool " + mcpserver.Label(tool),
		Reason: c.Request().Method + " " + c.Request().URL.Path + " answered " + strconv.Itoa(status),
		Attrs:  map[string]string{"tool": mcpserver.Label(tool), "client": mcpserver.Label(c.Request().Header.Get(mcpserver.HeaderClient)), "status": strconv.Itoa(status)}})
}
