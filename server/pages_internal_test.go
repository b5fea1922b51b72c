package server

import (
	"strings"
	"testing"
	"time"
)

// TestPageToken: a page URL's token opens for its lifetime and no longer,
// and nothing but the server's own MAC is read.
func TestPageToken(t *testing.T) {
	s := &Server{mediaKey: []byte("0123456789abcdef0123456789abcdef")}
	other := &Server{mediaKey: []byte("another key, another server.....")}
	now := time.Unix(1_800_000_000, 0)
	claims := pageClaims{Org: "acme", User: "ann", Roles: []string{"user"}, Module: "notes", Digest: "d", Page: "main", Exp: now.Add(pageURLTTL).Unix()}
	tok := s.pageToken(claims)
	payload, sig, _ := strings.Cut(tok, ".")
	globex, _, _ := strings.Cut(s.pageToken(pageClaims{Org: "globex", User: "ann", Page: "main", Exp: claims.Exp}), ".")
	for _, tt := range []struct {
		name  string
		srv   *Server
		token string
		at    time.Time
		ok    bool
	}{
		{"fresh", s, tok, now, true},
		{"just before expiry", s, tok, now.Add(pageURLTTL - time.Second), true},
		{"expired", s, tok, now.Add(pageURLTTL), false},
		{"claims more than the TTL", s, s.pageToken(pageClaims{Org: "acme", User: "ann", Page: "main", Exp: now.Add(24 * time.Hour).Unix()}), now, false},
		{"another server's key", other, tok, now, false},
		{"another payload under this signature", s, globex + "." + sig, now, false},
		{"no signature", s, payload, now, false},
		{"empty", s, "", now, false},
		{"garbage", s, "%%%.%%%", now, false},
		{"too long", s, strings.Repeat("a", maxPageTokenLen) + "." + sig, now, false},
	} {
		c, ok := tt.srv.pageTokenClaims(tt.token, tt.at)
		if ok != tt.ok {
			t.Errorf("%s: ok = %v, want %v (%+v)", tt.name, ok, tt.ok, c)
		}
		if ok && (c.Org != "acme" || c.User != "ann" || c.Page != "main" || c.Digest != "d" || len(c.Roles) != 1) {
			t.Errorf("%s: claims %+v", tt.name, c)
		}
	}
}
