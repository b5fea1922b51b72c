package server

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/server/console"
)

// openAPIDoc is the API's description, written by hand next to the routes
// it describes; TestOpenAPIMatchesRoutes fails when the two drift apart.
//
//go:embed openapi.json
var openAPIDoc []byte

// pistonPaths are the document's Piston routes, at the default prefix.
var pistonPaths = []string{"/api/v2/runtimes", "/api/v2/execute"}

// judge0Paths are the document's Judge0 routes, at the default prefix.
var judge0Paths = []string{"/judge0/about", "/judge0/version", "/judge0/statuses", "/judge0/languages", "/judge0/languages/all",
	"/judge0/languages/{id}", "/judge0/config_info", "/judge0/submissions", "/judge0/submissions/batch", "/judge0/submissions/{token}"}

// openAPI serves the document as this server is configured: the Piston
// and Judge0 routes at their prefixes, or not at all when they are off.
func (s *Server) openAPI(c echo.Context) error {
	var doc map[string]any
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		return err
	}
	paths := doc["paths"].(map[string]any)
	move := func(documented []string, defaultPrefix string, on bool, prefix string) {
		for _, p := range documented {
			op := paths[p]
			delete(paths, p)
			if on {
				paths[prefix+strings.TrimPrefix(p, defaultPrefix)] = op
			}
		}
	}
	move(pistonPaths, "/api/v2", s.cfg.Piston.Enabled, s.cfg.Piston.Prefix)
	move(judge0Paths, "/judge0", s.cfg.Judge0.Enabled, s.cfg.Judge0.Prefix)
	return c.JSON(http.StatusOK, doc)
}

// consoleFile is an embedded console file as it is served: its bytes,
// their gzip when that is smaller (editor.js: 690 KB, 240 KB gzipped),
// its type and an ETag naming its content.
type consoleFile struct {
	raw, gz []byte
	ctype   string
	etag    string
}

// consoleFiles prepares the console's files once: compressing them per
// request would cost more than they do to send on a local network, and
// they never change while the binary runs.
var consoleFiles = sync.OnceValues(func() (map[string]*consoleFile, error) {
	entries, err := fs.ReadDir(console.Files, ".")
	if err != nil {
		return nil, err
	}
	out := map[string]*consoleFile{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := fs.ReadFile(console.Files, e.Name())
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		f := &consoleFile{raw: b, etag: `"` + hex.EncodeToString(sum[:16]) + `"`, ctype: mime.TypeByExtension(path.Ext(e.Name()))}
		if f.ctype == "" {
			f.ctype = http.DetectContentType(b)
		}
		var z bytes.Buffer
		w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		w.Write(b)
		if err := w.Close(); err != nil {
			return nil, err
		}
		if z.Len() < len(b)*9/10 {
			f.gz = z.Bytes()
		}
		out[e.Name()] = f
	}
	return out, nil
})

// consoleIndex serves the web console's page. It holds no secrets: the
// API key a person signs in with stays in the browser's sessionStorage.
func (s *Server) consoleIndex(c echo.Context) error { return serveConsoleFile(c, "index.html") }

func (s *Server) consoleAsset(c echo.Context) error {
	name := path.Clean(c.Param("*"))
	if strings.HasPrefix(name, ".") || name == "index.html" {
		return problem(http.StatusNotFound, "not_found", "no console file %q", name)
	}
	return serveConsoleFile(c, name)
}

// serveConsoleFile sends one of the console's files: 304 when the
// browser's copy is current (If-None-Match), gzipped when it accepts that.
// The browser policies (CSP, nosniff, no referrer, no framing) are the
// front door's for console routes (frontdoor.go); "no-cache" makes the
// browser revalidate, so a new binary's console is seen at once.
func serveConsoleFile(c echo.Context, name string) error {
	files, err := consoleFiles()
	if err != nil {
		return err
	}
	f, ok := files[name]
	if !ok {
		return problem(http.StatusNotFound, "not_found", "no console file %q", name)
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.etag)
	h.Set("Vary", "Accept-Encoding")
	if etagMatches(c.Request().Header.Get("If-None-Match"), f.etag) {
		return c.NoContent(http.StatusNotModified)
	}
	if f.gz != nil && acceptsGzip(c.Request().Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		return c.Blob(http.StatusOK, f.ctype, f.gz)
	}
	return c.Blob(http.StatusOK, f.ctype, f.raw)
}

// etagMatches reports whether an If-None-Match header names etag (or is
// "*"), weak or strong: the console's files are the same bytes either way.
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip: it
// is listed without q=0.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
