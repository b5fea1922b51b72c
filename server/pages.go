package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/guests"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// Pages: a module's own user interface (policy.Page), shown by the
// console to the people its access requirements admit.
//
//	GET  /v1/pages                                  the pages the caller may open, of every module
//	GET  /v1/modules/{name}/pages                   those of one module
//	GET  /v1/modules/{name}/pages/{page}/files/{f}  one of a page's files (key)
//	POST /v1/modules/{name}/pages/{page}/url        a signed URL of the page's entry, for a frame
//	GET  /v1/pages/{token}/{file}                   a page's file by its signed URL (no key)
//	POST /v1/modules/{name}/pages/{page}/actions/{action}
//	                                                an action called by the page (the console's bridge)
//
// A page the caller may not open is a 404, like a module of another
// organization: whether it exists is not the caller's to learn.
//
// Why a signed URL rather than srcdoc: a frame's srcdoc document inherits
// the console's Content-Security-Policy, which allows no inline script,
// so a page would have to be rewritten or the console's policy loosened.
// A page's own URL gets its own policy (pageCSP): its sandbox makes its
// origin opaque wherever it is opened, so it reads neither the console's
// storage (the key) nor another page's; connect-src 'none' leaves it no
// network but the console's postMessage bridge (moat-page.js). The URL's
// token is an HMAC under the server's media URL key, of the principal,
// the module's digest and the page, for pageURLTTL: it opens that page's
// files, of that version, for that person, and nothing else.

// pageFileRoute serves a page's files by their signed URL; the front door
// lets its documents be HTML and its requests come from the page's opaque
// origin (frontdoor.go).
const pageFileRoute = "/v1/pages/:token/:file"

// pageCSP is every page file's policy. sandbox allow-scripts makes the
// document's origin opaque (no storage, no cookies of this origin) and
// allows no top navigation, popups, forms or modals; connect-src 'none'
// leaves no fetch, XHR, WebSocket or beacon; images and scripts come only
// from this server (the page's own files, signed media URLs); only this
// origin's console may frame it.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; media-src 'self'; " +
	"connect-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'; sandbox allow-scripts"

// pageURLTTL is how long a page's signed URL opens its files: long
// enough to load the page, short enough that a leaked URL soon opens
// nothing. The console asks for a new one each time it opens a page.
const pageURLTTL = 10 * time.Minute

// pageSigPrefix separates the MAC of a page URL from the media URLs' the
// same key makes.
const pageSigPrefix = "moat page url v1\x00"

// maxPageTokenLen bounds the token a request may carry before it is
// decoded.
const maxPageTokenLen = 2048

// pageBridge is moat-page.js, as the SDKs ship it.
var pageBridge = guests.PageBridge()

// PageJSON is a page as the API lists it.
type PageJSON struct {
	Module      string   `json:"module"`
	Name        string   `json:"name"`
	Title       string   `json:"title"`
	Entry       string   `json:"entry"`
	Files       []string `json:"files,omitempty"`
	Roles       []string `json:"roles,omitempty"`
	Permissions []string `json:"permissions,omitempty"`
}

// pageClaims are what a page URL's token stands for.
type pageClaims struct {
	Org    string   `json:"o"`
	User   string   `json:"u"`
	Roles  []string `json:"r,omitempty"`
	Module string   `json:"m"`
	Digest string   `json:"d"`
	Page   string   `json:"p"`
	Exp    int64    `json:"e"`
}

func (s *Server) pageSig(payload string) []byte {
	m := hmac.New(sha256.New, s.mediaKey)
	m.Write([]byte(pageSigPrefix))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

func (s *Server) pageToken(c pageClaims) string {
	b, _ := json.Marshal(c)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.pageSig(payload))
}

// pageTokenClaims checks a token's MAC (in constant time, before reading
// anything of it) and expiry.
func (s *Server) pageTokenClaims(token string, now time.Time) (pageClaims, bool) {
	var c pageClaims
	payload, sig, ok := strings.Cut(token, ".")
	if !ok || len(token) > maxPageTokenLen {
		return c, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.pageSig(payload)) {
		return c, false
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, false
	}
	exp := time.Unix(c.Exp, 0)
	return c, now.Before(exp) && !exp.After(now.Add(pageURLTTL))
}

// pageNotFound is the answer for a page that does not exist and for one
// the caller may not open alike.
func pageNotFound(module, page string) *Problem {
	return problem(http.StatusNotFound, "not_found", "no page %q in module %q that you may open; GET /v1/modules/%s/pages lists them", page, module, module)
}

// manifestOf parses a stored version's manifest; nil without one.
func manifestOf(v store.ModuleVersion) *policy.Manifest {
	if v.Manifest == nil {
		return nil
	}
	mf, err := policy.ParseManifest(policy.ManifestFile, v.Manifest)
	if err != nil {
		return nil
	}
	return mf
}

// pagesOf lists the pages of v that p may open.
func (s *Server) pagesOf(v store.ModuleVersion, p policy.Principal) []PageJSON {
	mf := manifestOf(v)
	if mf == nil {
		return nil
	}
	prof := s.hostFor(p.Org).Profile()
	var out []PageJSON
	for _, pg := range mf.Pages {
		if prof.AuthorizePage(mf, pg.Name, p) != nil {
			continue
		}
		out = append(out, PageJSON{Module: v.Name, Name: pg.Name, Title: pg.Title, Entry: pg.Entry, Files: pg.Files, Roles: pg.Roles, Permissions: pg.Permissions})
	}
	return out
}

// listPages answers the pages the caller may open, of every module of
// its organization (the console's menu).
func (s *Server) listPages(c echo.Context) error {
	p := principalOf(c)
	versions, err := s.store.Modules(c.Request().Context(), p.Org)
	if err != nil {
		return err
	}
	out := []PageJSON{}
	scopes := stateOf(c).keyScopes
	for _, v := range versions {
		if inScope(scopes, v.Name) {
			out = append(out, s.pagesOf(v, p)...)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"pages": out})
}

// modulePages answers the pages of one module the caller may open.
func (s *Server) modulePages(c echo.Context) error {
	p := principalOf(c)
	v, err := s.currentVersion(c)
	if err != nil {
		return err
	}
	out := s.pagesOf(*v, p)
	if out == nil {
		out = []PageJSON{}
	}
	return c.JSON(http.StatusOK, map[string]any{"pages": out})
}

// currentVersion is the current stored version of the module the route
// names, in the caller's organization; 404 when there is none.
func (s *Server) currentVersion(c echo.Context) (*store.ModuleVersion, error) {
	org, name := principalOf(c).Org, c.Param("name")
	v, err := s.modules.current(c.Request().Context(), org, name)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, problem(http.StatusNotFound, "not_found", "no module %q in organization %s; GET /v1/modules lists them", name, org)
	}
	return v, nil
}

// openPage finds the page the route names and decides whether the caller
// may open it: a refusal is audited, and answered as a page that does
// not exist.
func (s *Server) openPage(c echo.Context) (*store.ModuleVersion, *policy.Manifest, *policy.Page, error) {
	p := principalOf(c)
	v, err := s.currentVersion(c)
	if err != nil {
		return nil, nil, nil, err
	}
	name := c.Param("page")
	mf := manifestOf(*v)
	if mf == nil {
		return nil, nil, nil, pageNotFound(v.Name, name)
	}
	pg, ok := mf.Page(name)
	if !ok {
		return nil, nil, nil, pageNotFound(v.Name, name)
	}
	if err := s.hostFor(p.Org).Profile().AuthorizePage(mf, name, p); err != nil {
		var d *policy.DeniedError
		ev := audit.Event{Kind: audit.KindDecision, Decision: audit.Deny, CorrelationID: correlationID(c), Module: v.Name,
			Action: c.Param("action"), User: p.User, Org: p.Org, Reason: err.Error(), Code: "denied", Attrs: map[string]string{"page": name}}
		if errors.As(err, &d) {
			ev.Rule = d.Rule
		}
		s.audit.Record(c.Request().Context(), ev)
		return nil, nil, nil, pageNotFound(v.Name, name)
	}
	return v, mf, pg, nil
}

// pageURL signs a URL of the page's entry for the caller, for the
// console's frame.
func (s *Server) pageURL(c echo.Context) error {
	p := principalOf(c)
	v, _, pg, err := s.openPage(c)
	if err != nil {
		return err
	}
	exp := time.Now().Add(pageURLTTL).Unix()
	tok := s.pageToken(pageClaims{Org: p.Org, User: p.User, Roles: p.Roles, Module: v.Name, Digest: v.Digest, Page: pg.Name, Exp: exp})
	return c.JSON(http.StatusOK, map[string]any{
		"url":        "/v1/pages/" + tok + "/" + pg.Entry,
		"expires_at": time.Unix(exp, 0).UTC(),
	})
}

// pageFileByKey serves one of a page's files to a caller with a key.
func (s *Server) pageFileByKey(c echo.Context) error {
	v, _, pg, err := s.openPage(c)
	if err != nil {
		return err
	}
	return s.servePageFile(c, *v, pg, c.Param("file"))
}

// pageFileSigned serves one of a page's files by its signed URL: the
// token's principal must still be allowed to open the page, of the same
// version (a module replaced since answers 404: reopen the page).
func (s *Server) pageFileSigned(c echo.Context) error {
	cl, ok := s.pageTokenClaims(c.Param("token"), time.Now())
	if !ok {
		return problem(http.StatusNotFound, "not_found", "this page URL is unknown or expired; open the page again from the console")
	}
	p := policy.Principal{User: cl.User, Org: cl.Org, Roles: cl.Roles}
	v, err := s.modules.current(c.Request().Context(), cl.Org, cl.Module)
	if err != nil {
		return err
	}
	if v == nil || v.Digest != cl.Digest {
		return problem(http.StatusNotFound, "not_found", "module %s changed since this page was opened; open the page again from the console", cl.Module)
	}
	mf := manifestOf(*v)
	if mf == nil || s.hostFor(cl.Org).Profile().AuthorizePage(mf, cl.Page, p) != nil {
		return pageNotFound(cl.Module, cl.Page)
	}
	pg, _ := mf.Page(cl.Page)
	return s.servePageFile(c, *v, pg, c.Param("file"))
}

// servePageFile sends file of page pg of version v, with the page's
// policy: its type from moat's table (policy.PageFileType), never sniffed.
// moat-page.js is the server's bridge, whatever the plugin holds.
func (s *Server) servePageFile(c echo.Context, v store.ModuleVersion, pg *policy.Page, file string) error {
	var body []byte
	typ, _ := policy.PageFileType(file)
	switch {
	case file == policy.PageBridgeFile:
		body = pageBridge
	case pg.HasFile(file):
		files, err := s.pageFiles(c.Request().Context(), v)
		if err != nil {
			return err
		}
		var ok bool
		if body, ok = files[file]; !ok {
			return problem(http.StatusNotFound, "not_found", "page %s of module %s lists %s, which the module's files do not hold", pg.Name, v.Name, file)
		}
	default:
		return problem(http.StatusNotFound, "not_found", "page %s of module %s has no file %q; its files are %s and %s", pg.Name, v.Name,
			file, strings.Join(append([]string{pg.Entry}, pg.Files...), ", "), policy.PageBridgeFile)
	}
	h := c.Response().Header()
	// The front door set the API's policies; a page's are its own.
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Frame-Options", "SAMEORIGIN")
	// The page's origin is opaque: its requests for its own files are
	// cross-origin ones, which the token, not the origin, authorizes.
	h.Set("Cross-Origin-Resource-Policy", "cross-origin")
	h.Set("Cache-Control", "private, no-store")
	return c.Blob(http.StatusOK, typ, body)
}

// pageFilesCache holds the files of the versions whose pages were opened
// lately, by digest, so that a page's files are not unpacked from the
// store at every request. It keeps at most pageFilesCacheSize versions.
type pageFilesCache struct {
	mu    sync.Mutex
	order []string
	files map[string]map[string][]byte
}

const pageFilesCacheSize = 16

// pageFiles returns the files of version v as package bundle reads them
// from the store (the pages' files are in an interpreted or native
// plugin's pack, or in a compiled module's moat.pages section).
func (s *Server) pageFiles(ctx context.Context, v store.ModuleVersion) (map[string][]byte, error) {
	pc := &s.pageFilesCache
	pc.mu.Lock()
	f, ok := pc.files[v.Digest]
	pc.mu.Unlock()
	if ok {
		return f, nil
	}
	raw, err := s.modules.bytes(ctx, v)
	if err != nil {
		return nil, err
	}
	b, err := bundle.FromStored(v.Name, v.Manifest, raw, v.Signature, func(tar []byte) (map[string][]byte, error) {
		return unpack("application/x-tar", tar, s.cfg.Limits.Archive)
	})
	if err != nil {
		return nil, fmt.Errorf("module %s: its page files: %w", v.Name, err)
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if _, ok := pc.files[v.Digest]; !ok {
		if len(pc.order) >= pageFilesCacheSize {
			delete(pc.files, pc.order[0])
			pc.order = slices.Delete(pc.order, 0, 1)
		}
		if pc.files == nil {
			pc.files = map[string]map[string][]byte{}
		}
		pc.order = append(pc.order, v.Digest)
		pc.files[v.Digest] = b.Files
	}
	return b.Files, nil
}

// pageInvoke runs an action for a page: the caller must be allowed to
// open the page (else 404), and the action must be of the page's module
// (the route names it); then it is an invocation like any other
// (authorized, rate-limited, confirmed and audited by the host), and an
// audit decision with the page's name (attrs.page) and the invocation's
// correlation id records that the page asked for it; every event of the
// invocation itself carries attrs.page as well (audit.WithOrigin).
func (s *Server) pageInvoke(c echo.Context) error {
	p := principalOf(c)
	v, mf, pg, err := s.openPage(c)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(mf.Pages, func(x policy.Page) bool { return x.Name == pg.Name })
	s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindDecision, Decision: audit.Allow,
		CorrelationID: correlationID(c), Module: v.Name, Action: c.Param("action"), User: p.User, Org: p.Org,
		Rule: fmt.Sprintf("manifest pages[%d]", i), Reason: "called from page " + pg.Name, Attrs: map[string]string{"page": pg.Name}})
	// The invocation's own events (its end, its decisions, its ops) carry
	// the page too: a reader of the trail needs no join to see it.
	c.SetRequest(c.Request().WithContext(audit.WithOrigin(c.Request().Context(), "page", pg.Name)))
	return s.invoke(c)
}
