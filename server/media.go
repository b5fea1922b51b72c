package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
)

// The media routes: clients receive media only from moat, never from
// where it came from.
//
//	GET    /v1/media                list the organization's items (key)
//	GET    /v1/media/{id}           an item's bytes: with a key of its
//	                                organization, or with a signed URL's
//	                                org, exp and sig and no key
//	POST   /v1/media/{id}/url       a signed URL for pages: {url, expires_at}
//	DELETE /v1/media/{id}           delete an item (permission media.delete)
//
// What serving promises (docs/SECURITY.md): the item's sniffed type and
// nothing a browser may second-guess (X-Content-Type-Options: nosniff),
// the API's sandboxing Content-Security-Policy, so that a PDF or a
// polyglot opened at moat's origin runs no script there, inline only for
// images and attachment for the rest, the id as ETag, Range requests
// (http.ServeContent). An id the organization does not hold is a 404
// whether or not another organization holds it.
//
// A signed URL is an HMAC-SHA256, under the server's media URL key
// (MediaConfig.URLKeyFile, $MOAT_MEDIA_KEY), of the organization, the id
// and the expiry: it opens that item of that organization until then and
// nothing else. It is checked, in constant time, before the item is
// looked up, so a forged one learns nothing; one claiming to last longer
// than media.url_ttl allows is refused.

// PermMediaDelete is the permission DELETE /v1/media/{id} needs: a role
// that role_permissions gives it, or, when none does, DefaultModuleRole.
const PermMediaDelete = "media.delete"

// mediaRoute is the route of an item's bytes, which the front door lets
// carry the item's own type and (signed) reach across origins.
const mediaRoute = "/v1/media/:id"

// mediaSigPrefix separates the MAC of a media URL from any other the key
// might make.
const mediaSigPrefix = "moat media url v1\x00"

// mediaSig is the signature of a URL for org's item id until exp (unix
// seconds): base64url, unpadded.
func mediaSig(key []byte, org, id string, exp int64) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(mediaSigPrefix))
	m.Write([]byte(org))
	m.Write([]byte{0})
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write([]byte(strconv.FormatInt(exp, 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signedMediaRequest reports whether a request for an item's bytes
// carries a signature rather than a key.
func signedMediaRequest(route string, req *http.Request) bool {
	return route == mediaRoute && req.Method == http.MethodGet && req.Header.Get(echo.HeaderAuthorization) == "" &&
		req.URL.Query().Has("sig")
}

// MediaItemJSON is an item as the API shows it.
type MediaItemJSON struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Width   int       `json:"width,omitempty"`
	Height  int       `json:"height,omitempty"`
	Module  string    `json:"module"`
	User    string    `json:"user"`
	Created time.Time `json:"created"`
}

func mediaJSON(it store.MediaItem) MediaItemJSON {
	return MediaItemJSON{ID: it.ID, Type: it.Type, Size: it.Size, Width: it.Width, Height: it.Height,
		Module: it.Module, User: it.User, Created: it.Created.UTC()}
}

// listMedia lists the caller's organization's items, newest first, of
// ?module= when given, a page of ?limit= after ?after= (an id).
func (s *Server) listMedia(c echo.Context) error {
	p := principalOf(c)
	q := c.QueryParams()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxMediaList {
			return problem(http.StatusBadRequest, "invalid_argument", "limit=%q: give a number from 1 to %d", clip(v), store.MaxMediaList)
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" && !store.ValidMediaID(after) {
		return problem(http.StatusBadRequest, "invalid_argument", "after=%q is not a media item id (64 lowercase hex digits)", clip(after))
	}
	items, err := s.store.MediaList(c.Request().Context(), p.Org, q.Get("module"), after, limit+1)
	if errors.Is(err, store.ErrMediaNotFound) {
		return problem(http.StatusBadRequest, "invalid_argument", "after=%q is no media item of organization %s", clip(after), p.Org)
	}
	if err != nil {
		return fromHostError(err)
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = items[limit-1].ID
	}
	out := make([]MediaItemJSON, len(items))
	for i, it := range items {
		out[i] = mediaJSON(it)
	}
	return c.JSON(http.StatusOK, map[string]any{"items": out, "next": next})
}

// getMedia serves an item's bytes to a caller with a key of its
// organization, or to anyone holding a signed URL of it.
func (s *Server) getMedia(c echo.Context) error {
	if !signedMediaRequest(mediaRoute, c.Request()) {
		return s.authenticate(func(c echo.Context) error {
			return s.serveMedia(c, principalOf(c).Org, "private, max-age=3600")
		})(c)
	}
	q := c.Request().URL.Query()
	org, id, sig := q.Get("org"), c.Param("id"), q.Get("sig")
	exp, err := strconv.ParseInt(q.Get("exp"), 10, 64)
	if err != nil || org == "" {
		return problem(http.StatusForbidden, "forbidden", "a signed media URL carries org, exp and sig; ask POST /v1/media/{id}/url for one")
	}
	now := time.Now()
	ttl := time.Duration(s.cfg.Media.URLTTL)
	switch {
	case now.Unix() > exp:
		return problem(http.StatusForbidden, "forbidden", "the signed media URL expired at %s; ask POST /v1/media/{id}/url for a new one",
			time.Unix(exp, 0).UTC().Format(time.RFC3339))
	case exp > now.Add(ttl+time.Minute).Unix():
		return problem(http.StatusForbidden, "forbidden", "the signed media URL claims to last past what media.url_ttl (%s) allows; ask for a new one", ttl)
	case !hmac.Equal([]byte(sig), []byte(mediaSig(s.mediaKey, org, id, exp))):
		return problem(http.StatusForbidden, "forbidden", "the signature of the media URL does not match its org, item and expiry")
	}
	// The URL stands for the organization that signed it: its rate.
	if ok, wait, err := s.orgRate.take(c.Request().Context(), org, now); err != nil {
		return rateUnavailable(err)
	} else if !ok {
		return rateLimited("organization", wait)
	}
	// Pages of another origin show it (an <img> of an application's own
	// site): the signature is the authority, not the origin.
	c.Response().Header().Set("Cross-Origin-Resource-Policy", "cross-origin")
	maxAge := max(0, exp-now.Unix())
	return s.serveMedia(c, org, "private, max-age="+strconv.FormatInt(maxAge, 10))
}

// serveMedia writes org's item (the route's id) with the headers the
// package comment promises.
func (s *Server) serveMedia(c echo.Context, org, cacheControl string) error {
	id := c.Param("id")
	if !store.ValidMediaID(id) {
		return mediaNotFound(id)
	}
	it, r, err := s.store.MediaOpen(c.Request().Context(), org, id)
	if errors.Is(err, store.ErrMediaNotFound) {
		return mediaNotFound(id)
	}
	if err != nil {
		return fromHostError(err)
	}
	defer r.Close()
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, it.Type)
	h.Set("ETag", `"`+it.ID+`"`)
	h.Set("Cache-Control", cacheControl)
	disposition := "attachment"
	if strings.HasPrefix(it.Type, "image/") {
		disposition = "inline"
	}
	h.Set(echo.HeaderContentDisposition, disposition+`; filename="`+it.ID[:16]+mediaExt(it.Type)+`"`)
	http.ServeContent(c.Response(), c.Request(), "", it.Created, r)
	return nil
}

func mediaNotFound(id string) *Problem {
	return problem(http.StatusNotFound, "not_found", "no media item %q in your organization", clip(id))
}

// mediaExt is the file name extension of a type the host keeps.
func mediaExt(typ string) string {
	switch typ {
	case "image/jpeg":
		return ".jpg"
	case "audio/mpeg":
		return ".mp3"
	case "application/pdf":
		return ".pdf"
	}
	_, sub, _ := strings.Cut(typ, "/")
	return "." + sub
}

// mediaURLRequest is the optional body of POST /v1/media/{id}/url.
type mediaURLRequest struct {
	TTLSeconds int64 `json:"ttl_seconds"`
}

// mediaURL signs a URL of an item of the caller's organization, relative
// to this server (the client knows the origin it reached), valid for
// media.url_ttl or the shorter ttl_seconds the body asks for.
func (s *Server) mediaURL(c echo.Context) error {
	p := principalOf(c)
	id := c.Param("id")
	if !store.ValidMediaID(id) {
		return mediaNotFound(id)
	}
	ttl := time.Duration(s.cfg.Media.URLTTL)
	body, err := readBody(c, 4<<10, "a media URL request is at most 4 KiB")
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		var req mediaURLRequest
		if err := decodeJSONBody(body, &req, true); err != nil {
			return problem(http.StatusBadRequest, "invalid_argument", "the body is not a media URL request ({\"ttl_seconds\": N}): %v", err)
		}
		if req.TTLSeconds < 1 || time.Duration(req.TTLSeconds)*time.Second > ttl {
			return problem(http.StatusBadRequest, "invalid_argument", "ttl_seconds %d is outside 1 to %d (media.url_ttl)", req.TTLSeconds, int64(ttl/time.Second))
		}
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	if _, err := s.store.MediaGet(c.Request().Context(), p.Org, id); errors.Is(err, store.ErrMediaNotFound) {
		return mediaNotFound(id)
	} else if err != nil {
		return fromHostError(err)
	}
	exp := time.Now().Add(ttl).Unix()
	q := url.Values{"org": {p.Org}, "exp": {strconv.FormatInt(exp, 10)}, "sig": {mediaSig(s.mediaKey, p.Org, id, exp)}}
	return c.JSON(http.StatusOK, map[string]any{
		"url":        "/v1/media/" + id + "?" + q.Encode(),
		"expires_at": time.Unix(exp, 0).UTC(),
	})
}

// deleteMedia deletes an item of the caller's organization, and audits
// it as a mutation.
func (s *Server) deleteMedia(c echo.Context) error {
	p := principalOf(c)
	id := c.Param("id")
	if err := s.mayManage(c, PermMediaDelete, ""); err != nil {
		return err
	}
	if !store.ValidMediaID(id) {
		return mediaNotFound(id)
	}
	deleted, err := s.store.MediaDelete(c.Request().Context(), p.Org, id)
	if err != nil {
		return fromHostError(err)
	}
	if !deleted {
		return mediaNotFound(id)
	}
	s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindDecision, Decision: audit.Allow,
		CorrelationID: correlationID(c), User: p.User, Org: p.Org, Rule: "api " + PermMediaDelete, MutationID: audit.NewID(),
		Attrs: map[string]string{"api": PermMediaDelete, "id": id}})
	return c.NoContent(http.StatusNoContent)
}
