package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/server/internal/mcpserver"
)

// mcpRoutes answers MCP at /mcp (package server/internal/mcpserver): the
// caller's tools, each call a request to this server's own API with the
// caller's key, in process.
func (s *Server) mcpRoutes(e *echo.Echo) {
	h := echo.WrapHandler(mcpserver.NewHandler(mcpserver.Options{
		API:     mcpserver.InProcess(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) })),
		Version: "moat", Logger: s.log,
	}))
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
		module, action, _ = strings.Cut(label(tool), ".") // an action's tool: module.action
	}
	s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindMCP, Decision: decision, CorrelationID: correlationID(c),
		Module: module, Action: action, User: p.User, Org: p.Org, Rule: "mcp tool " + label(tool),
		Reason: c.Request().Method + " " + c.Request().URL.Path + " answered " + strconv.Itoa(status),
		Attrs:  map[string]string{"tool": label(tool), "client": label(c.Request().Header.Get(mcpserver.HeaderClient)), "status": strconv.Itoa(status)}})
}

// label is a caller's claim cut to a printable label of at most 128
// bytes, fit for the audit trail.
func label(s string) string {
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
