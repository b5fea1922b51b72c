package server

import (
	_ "embed"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host/server/console"
)

// openAPIDoc is the API's description, written by hand next to the routes
// it describes; TestOpenAPIMatchesRoutes fails when the two drift apart.
//
//go:embed openapi.json
var openAPIDoc []byte

// pistonPaths are the document's Piston routes, at the default prefix.
var pistonPaths = []string{"/api/v2/runtimes", "/api/v2/execute"}

// openAPI serves the document as this server is configured: the Piston
// routes at their prefix, or not at all when they are off.
func (s *Server) openAPI(c echo.Context) error {
	var doc map[string]any
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		return err
	}
	paths := doc["paths"].(map[string]any)
	for _, p := range pistonPaths {
		op := paths[p]
		delete(paths, p)
		if s.cfg.Piston.Enabled {
			paths[s.cfg.Piston.Prefix+strings.TrimPrefix(p, "/api/v2")] = op
		}
	}
	return c.JSON(http.StatusOK, doc)
}

// consoleIndex serves the web console's page. It holds no secrets: the
// API key a person signs in with stays in the browser's sessionStorage.
func (s *Server) consoleIndex(c echo.Context) error {
	b, err := fs.ReadFile(console.Files, "index.html")
	if err != nil {
		return err
	}
	setConsoleHeaders(c)
	return c.HTMLBlob(http.StatusOK, b)
}

func (s *Server) consoleAsset(c echo.Context) error {
	name := path.Clean(c.Param("*"))
	b, err := fs.ReadFile(console.Files, name)
	if err != nil || strings.HasPrefix(name, ".") || name == "index.html" {
		return problem(http.StatusNotFound, "not_found", "no console file %q", name)
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = http.DetectContentType(b)
	}
	setConsoleHeaders(c)
	return c.Blob(http.StatusOK, ct, b)
}

// setConsoleHeaders keeps the console to its own origin: no inline or
// foreign scripts (a module's output is shown as text, and even if it were
// not, a script in it would not run), no framing.
func setConsoleHeaders(c echo.Context) {
	h := c.Response().Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}
