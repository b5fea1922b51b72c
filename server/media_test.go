package server_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/media"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// keep stores data for org as a plugin's media.put would: through
// media.Ingest, then the store.
func keep(t *testing.T, st *store.Store, org string, data []byte) store.MediaItem {
	t.Helper()
	it, err := media.Ingest(data, "")
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := st.MediaPut(context.Background(), store.MediaNew{Org: org, Module: "gallery", User: "ann", Type: it.Type,
		Width: it.Width, Height: it.Height, Data: it.Data}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func pngBytes(t *testing.T, w, h int) []byte {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range m.Pix {
		m.Pix[i] = uint8(i * 3)
	}
	var b bytes.Buffer
	png.Encode(&b, m)
	return b.Bytes()
}

// polyglot is a JPEG that is also an HTML page: the script in a comment
// segment and again after the end of the image, where a sniffing browser
// would find it.
func polyglot(t *testing.T) []byte {
	var b bytes.Buffer
	jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, 8, 8)), nil)
	j := b.Bytes()
	html := "<html><script>fetch('/v1/modules').then(r=>r.text()).then(alert)</script>"
	com := append([]byte{0xFF, 0xFE, 0, byte(len(html) + 2)}, html...)
	out := append(append(append([]byte{}, j[:2]...), com...), j[2:]...)
	return append(out, html...)
}

// signedURL signs a media URL with the server's own key, as the server
// does, to make URLs it would not give out (expired, too long-lived).
func signedURL(t *testing.T, dir, org, id string, exp int64) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "media-url.key"))
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, bytes.TrimSpace(b))
	fmt.Fprintf(m, "moat media url v1\x00%s\x00%s\x00%d", org, id, exp)
	q := url.Values{"org": {org}, "exp": {strconv.FormatInt(exp, 10)}, "sig": {base64.RawURLEncoding.EncodeToString(m.Sum(nil))}}
	return "/v1/media/" + id + "?" + q.Encode()
}

// TestMediaRoutes: an item is served to its organization's keys and to
// signed URLs only, with the headers that keep it inert at moat's origin;
// another organization's item is a 404 like nobody's; signatures cannot
// be forged, stretched, replayed for another item or organization, or
// used after they expire; lists are per organization; deletes need the
// permission and are audited.
func TestMediaRoutes(t *testing.T) {
	ts := start(t, "", nil)
	st := ts.Store()
	ann, bob, gus := ts.key(t, "acme", "ann", "admin"), ts.key(t, "acme", "bob"), ts.key(t, "globex", "gus", "admin")
	pic := keep(t, st, "acme", pngBytes(t, 40, 20))
	pdfData := append([]byte("%PDF-1.7\n"), bytes.Repeat([]byte("0123456789"), 10000)...)
	pdf := keep(t, st, "acme", pdfData)
	poly := keep(t, st, "acme", polyglot(t))
	theirs := keep(t, st, "globex", pngBytes(t, 41, 20))

	res := ts.do(t, "GET", "/v1/media/"+pic.ID, ann, nil)
	h := res.header
	if res.status != 200 || h.Get("Content-Type") != "image/png" || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(h.Get("Content-Security-Policy"), "sandbox") || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") ||
		!strings.HasPrefix(h.Get("Content-Disposition"), "inline") || h.Get("ETag") != `"`+pic.ID+`"` || h.Get("Cross-Origin-Resource-Policy") != "same-origin" {
		t.Errorf("GET the image: %d %v", res.status, h)
	}
	if sum := sha256.Sum256(res.body); fmt.Sprintf("%x", sum) != pic.ID {
		t.Error("the bytes served are not the item's")
	}
	if res := ts.do(t, "GET", "/v1/media/"+pic.ID, ann, nil, "If-None-Match", `"`+pic.ID+`"`); res.status != http.StatusNotModified {
		t.Errorf("If-None-Match: %d", res.status)
	}
	res = ts.do(t, "GET", "/v1/media/"+pdf.ID, ann, nil, "Range", "bytes=9-18")
	if res.status != http.StatusPartialContent || string(res.body) != "0123456789" || res.header.Get("Content-Type") != "application/pdf" ||
		!strings.HasPrefix(res.header.Get("Content-Disposition"), "attachment") || !strings.Contains(res.header.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("a range of the PDF: %d %q %v", res.status, res.body, res.header)
	}
	res = ts.do(t, "GET", "/v1/media/"+poly.ID, ann, nil)
	if res.status != 200 || bytes.Contains(res.body, []byte("<script")) || res.header.Get("Content-Type") != "image/jpeg" || res.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("the polyglot: %d, script kept %v, %v", res.status, bytes.Contains(res.body, []byte("<script")), res.header)
	}

	// Absent, whatever the reason, and the same absence.
	nobody := strings.Repeat("0", 64)
	want := ts.do(t, "GET", "/v1/media/"+nobody, gus, nil)
	for _, path := range []string{"/v1/media/" + pic.ID, "/v1/media/" + strings.ToUpper(pic.ID), "/v1/media/..%2F..%2Fmoat.db",
		"/v1/media/%2e%2e", "/v1/media/" + pic.ID[:63], "/v1/media/" + pic.ID + "%00"} {
		res := ts.do(t, "GET", path, gus, nil)
		if res.status != http.StatusNotFound || res.json(t)["code"] != "not_found" || want.status != 404 {
			t.Errorf("globex GET %s: %d %s", path, res.status, res.body)
		}
	}
	if res := ts.do(t, "GET", "/v1/media/"+pic.ID, "", nil); res.status != http.StatusUnauthorized {
		t.Errorf("no key, no signature: %d", res.status)
	}
	if res := ts.do(t, "POST", "/v1/media/"+theirs.ID+"/url", ann, nil); res.status != http.StatusNotFound {
		t.Errorf("signing another organization's item: %d", res.status)
	}

	// Signed URLs.
	res = ts.do(t, "POST", "/v1/media/"+pic.ID+"/url", ann, nil)
	var signed struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if res.status != 200 || json.Unmarshal(res.body, &signed) != nil || !strings.HasPrefix(signed.URL, "/v1/media/"+pic.ID+"?") ||
		time.Until(signed.ExpiresAt) > 10*time.Minute+time.Second || time.Until(signed.ExpiresAt) < 9*time.Minute {
		t.Fatalf("POST url: %d %s", res.status, res.body)
	}
	for _, hdrs := range [][]string{nil, {"Origin", "https://shop.example", "Sec-Fetch-Site", "cross-site"}} {
		res := ts.do(t, "GET", signed.URL, "", nil, hdrs...)
		if res.status != 200 || res.header.Get("Content-Type") != "image/png" || res.header.Get("Cross-Origin-Resource-Policy") != "cross-origin" ||
			res.header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(res.header.Get("Cache-Control"), "private") {
			t.Errorf("GET the signed URL (%v): %d %v %s", hdrs, res.status, res.header, res.body)
		}
	}
	u, _ := url.Parse(signed.URL)
	q := u.Query()
	sig, exp := q.Get("sig"), q.Get("exp")
	flip := []byte(sig)
	flip[3] ^= 1
	expN, _ := strconv.ParseInt(exp, 10, 64)
	hostile := map[string]string{
		"a forged signature":          "/v1/media/" + pic.ID + "?" + url.Values{"org": {"acme"}, "exp": {exp}, "sig": {string(flip)}}.Encode(),
		"replayed for another item":   "/v1/media/" + pdf.ID + "?" + q.Encode(),
		"replayed for another org":    "/v1/media/" + pic.ID + "?" + url.Values{"org": {"globex"}, "exp": {exp}, "sig": {sig}}.Encode(),
		"another org's item":          "/v1/media/" + theirs.ID + "?" + url.Values{"org": {"globex"}, "exp": {exp}, "sig": {sig}}.Encode(),
		"a later expiry":              "/v1/media/" + pic.ID + "?" + url.Values{"org": {"acme"}, "exp": {strconv.FormatInt(expN+60, 10)}, "sig": {sig}}.Encode(),
		"expired":                     signedURL(t, ts.dir, "acme", pic.ID, time.Now().Add(-time.Second).Unix()),
		"lasting past media.url_ttl":  signedURL(t, ts.dir, "acme", pic.ID, time.Now().Add(24*time.Hour).Unix()),
		"no org":                      "/v1/media/" + pic.ID + "?" + url.Values{"exp": {exp}, "sig": {sig}}.Encode(),
		"an expiry that is no number": "/v1/media/" + pic.ID + "?" + url.Values{"org": {"acme"}, "exp": {exp + "0x"}, "sig": {sig}}.Encode(),
		"an empty signature":          "/v1/media/" + pic.ID + "?" + url.Values{"org": {"acme"}, "exp": {exp}, "sig": {""}}.Encode(),
	}
	for name, path := range hostile {
		res := ts.do(t, "GET", path, "", nil)
		if res.status != http.StatusForbidden || bytes.Contains(res.body, []byte("\x89PNG")) {
			t.Errorf("%s: %d %s", name, res.status, res.body)
		}
	}
	// A signed URL is checked before its item is looked up, and an item
	// gone since is gone.
	gone := keep(t, st, "acme", pngBytes(t, 3, 3))
	res = ts.do(t, "POST", "/v1/media/"+gone.ID+"/url", ann, strings.NewReader(`{"ttl_seconds": 30}`), "Content-Type", "application/json")
	json.Unmarshal(res.body, &signed)
	if time.Until(signed.ExpiresAt) > 31*time.Second {
		t.Errorf("ttl_seconds 30 gave %v", time.Until(signed.ExpiresAt))
	}
	if res := ts.do(t, "DELETE", "/v1/media/"+gone.ID, ann, nil); res.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.status, res.body)
	}
	if res := ts.do(t, "GET", signed.URL, "", nil); res.status != http.StatusNotFound {
		t.Errorf("a signed URL of a deleted item: %d", res.status)
	}
	for _, body := range []string{`{"ttl_seconds": 601}`, `{"ttl_seconds": 0}`, `{"ttl": 5}`, `{"ttl_seconds": 5, "ttl_seconds": 6}`, `[`} {
		if res := ts.do(t, "POST", "/v1/media/"+pic.ID+"/url", ann, strings.NewReader(body), "Content-Type", "application/json"); res.status != http.StatusBadRequest {
			t.Errorf("POST url %s: %d", body, res.status)
		}
	}

	// Lists, per organization, in pages.
	res = ts.do(t, "GET", "/v1/media?limit=2", ann, nil)
	var page struct {
		Items []server.MediaItemJSON `json:"items"`
		Next  string                 `json:"next"`
	}
	if res.status != 200 || json.Unmarshal(res.body, &page) != nil || len(page.Items) != 2 || page.Next != page.Items[1].ID || page.Items[0].ID != poly.ID {
		t.Fatalf("list: %d %s", res.status, res.body)
	}
	res = ts.do(t, "GET", "/v1/media?limit=2&after="+page.Next, ann, nil)
	json.Unmarshal(res.body, &page)
	if len(page.Items) != 1 || page.Items[0].ID != pic.ID || page.Next != "" || page.Items[0].Width != 40 || page.Items[0].Module != "gallery" {
		t.Errorf("second page: %s", res.body)
	}
	res = ts.do(t, "GET", "/v1/media", gus, nil)
	json.Unmarshal(res.body, &page)
	if len(page.Items) != 1 || page.Items[0].ID != theirs.ID {
		t.Errorf("globex's list: %s", res.body)
	}
	for _, q := range []string{"limit=0", "limit=101", "after=../x", "after=" + theirs.ID} {
		if res := ts.do(t, "GET", "/v1/media?"+q, ann, nil); res.status != http.StatusBadRequest {
			t.Errorf("list ?%s: %d", q, res.status)
		}
	}

	// Deletes: the permission, another organization's item, the audit.
	if res := ts.do(t, "DELETE", "/v1/media/"+pic.ID, bob, nil); res.status != http.StatusForbidden {
		t.Errorf("bob deletes: %d", res.status)
	}
	if res := ts.do(t, "DELETE", "/v1/media/"+theirs.ID, ann, nil); res.status != http.StatusNotFound {
		t.Errorf("ann deletes globex's item: %d", res.status)
	}
	if res := ts.do(t, "DELETE", "/v1/media/"+pic.ID, ann, nil, "X-Request-Id", "media-del"); res.status != http.StatusNoContent {
		t.Errorf("ann deletes: %d", res.status)
	}
	if res := ts.do(t, "GET", "/v1/media/"+theirs.ID, gus, nil); res.status != 200 {
		t.Errorf("globex's item after acme's deletes: %d", res.status)
	}
	var evs []map[string]any
	for range 50 { // the audit trail is written in batches
		if evs = ts.auditEvents(t, ann, "media-del"); len(evs) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(evs) != 1 || evs[0]["attrs"].(map[string]any)["id"] != pic.ID || evs[0]["mutation_id"] == "" || evs[0]["decision"] != "allow" {
		t.Errorf("the delete's audit: %+v", evs)
	}
}

// TestMediaPlugin: the whole path, as the README tells it: a plugin's
// media.put through an invocation of the server, then the item from
// GET /v1/media/{id}.
func TestMediaPlugin(t *testing.T) {
	ts := start(t, "", func(c *server.Config) { c.Profile = "dev" })
	key := ts.key(t, "acme", "ann", "admin")
	wasm := testwasm.BuildGo(t, "./testdata/mediaguest", true)
	manifest := []byte("name: gallery\nversion: 1.0.0\nactions: [{name: media}]\ncapabilities: {media: true}\n")
	if res := ts.upload(t, key, wasm, manifest); res.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", res.status, res.body)
	}
	data := pngBytes(t, 30, 30)
	in, _ := json.Marshal(map[string]any{"op": "media.put", "req": map[string]any{"data": data}})
	res := ts.do(t, "POST", "/v1/modules/gallery/actions/media", key, bytes.NewReader(in), "Content-Type", "application/json")
	var info struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if res.status != 200 || json.Unmarshal(res.body, &info) != nil || info.Type != "image/png" {
		t.Fatalf("invoke: %d %s", res.status, res.body)
	}
	res = ts.do(t, "GET", "/v1/media/"+info.ID, key, nil)
	if res.status != 200 || !bytes.Equal(res.body, data) {
		t.Errorf("GET the item the plugin stored: %d, %d bytes", res.status, len(res.body))
	}
}

// TestMediaURLKey: the server's own key survives a restart (a URL signed
// before it is served after it); a configured key is what replicas share:
// a URL signed by one replica of a PostgreSQL database is served by
// another, and a replica with another key refuses it.
func TestMediaURLKey(t *testing.T) {
	dir := t.TempDir()
	ts := start(t, dir, nil)
	key := ts.key(t, "acme", "ann")
	it := keep(t, ts.Store(), "acme", pngBytes(t, 5, 5))
	res := ts.do(t, "POST", "/v1/media/"+it.ID+"/url", key, nil)
	signed := res.json(t)["url"].(string)
	if fi, err := os.Stat(filepath.Join(dir, "media-url.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the server's own key file: %v %v", fi, err)
	}
	ts.stop(t)
	ts = start(t, dir, nil)
	if res := ts.do(t, "GET", signed, "", nil); res.status != 200 {
		t.Errorf("a URL signed before a restart: %d", res.status)
	}

	db := pgtest.Database(t)
	shared := strings.Repeat("k", 40)
	replica := func(k string) *testServer {
		return start(t, "", func(c *server.Config) { c.DatabaseURL, c.Media.URLKey, c.CacheDir = db, k, t.TempDir() })
	}
	a, b, other := replica(shared), replica(shared), replica(strings.Repeat("z", 40))
	akey := a.key(t, "acme", "ann")
	it = keep(t, a.Store(), "acme", pngBytes(t, 7, 7))
	signed = a.do(t, "POST", "/v1/media/"+it.ID+"/url", akey, nil).json(t)["url"].(string)
	if res := b.do(t, "GET", signed, "", nil); res.status != 200 || res.header.Get("Content-Type") != "image/png" {
		t.Errorf("replica b serves replica a's URL: %d %s", res.status, res.body)
	}
	if res := other.do(t, "GET", signed, "", nil); res.status != http.StatusForbidden {
		t.Errorf("a replica with another key: %d", res.status)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "media-url.key")); !os.IsNotExist(err) {
		t.Errorf("a configured key left a key file: %v", err)
	}
}

// TestMediaConfig: the media settings are checked, each refusal naming
// its field.
func TestMediaConfig(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	good := filepath.Join(dir, "good")
	os.WriteFile(short, []byte("0123456789\n"), 0o600)
	os.WriteFile(good, []byte(strings.Repeat("ab", 20)+"\n"), 0o600)
	for _, tt := range []struct{ yaml, want string }{
		{"media: {quota_bytes: 1KiB}", "media.quota_bytes: 1 KiB is outside 1 MiB to 1 TiB"},
		{"media: {decode_bytes: 64MiB}", "media.decode_bytes: 64 MiB is outside 512 MiB"},
		{"media: {url_ttl: 1s}", "media.url_ttl: 1s is outside 10s to 24h"},
		{"media: {url_key_file: " + short + "}", "is 10 characters; use at least 32"},
		{"media: {url_key_file: " + filepath.Join(dir, "absent") + "}", "media.url_key_file: open"},
		{"media: {url_key_file: " + good + ", quota_bytes: 5GiB, url_ttl: 1h}", ""},
	} {
		c, err := server.ParseConfig("moat-server.yaml", []byte(tt.yaml))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.yaml, err)
		case tt.want == "" && (c.Media.URLKey != strings.Repeat("ab", 20) || c.Media.QuotaBytes != 5<<30):
			t.Errorf("%s: %+v", tt.yaml, c.Media)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want %q", tt.yaml, err, tt.want)
		}
	}
	if err := server.ValidateMediaKey("short"); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("ValidateMediaKey: %v", err)
	}
}
