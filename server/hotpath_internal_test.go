package server

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestKeyCacheRevocation: the authenticator's cache keeps a revoked key
// working for at most its TTL (keyCacheTTL; short here), never longer,
// and a key that is not the one stored is refused whatever the cache
// holds.
func TestKeyCacheRevocation(t *testing.T) {
	testenv.Timing(t)
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secret, key, err := CreateAPIKey(ctx, st, NewAPIKey{Org: "acme", User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	a := newAuthenticator(st, nil)
	a.ttl = 200 * time.Millisecond
	for _, tc := range []struct {
		name, token string
		wantErr     error
	}{
		{"the key", secret, nil},
		{"the key again, from the cache", secret, nil},
		{"one byte off", secret[:len(secret)-1] + "x", errBadKey},
		{"no prefix", secret[len(KeyPrefix):], errBadKey},
		{"the store's hash as a token", HashAPIKey(secret), errBadKey},
	} {
		k, err := a.principal(ctx, tc.token)
		if !errors.Is(err, tc.wantErr) {
			t.Fatalf("%s: err %v, want %v", tc.name, err, tc.wantErr)
		}
		if err == nil && (k.ID != key.ID || k.Org != "acme" || k.User != "bob") {
			t.Fatalf("%s: key %+v, want %s of acme/bob", tc.name, k, key.ID)
		}
	}
	revoked := time.Now()
	if err := st.APIKeyRevoke(ctx, key.ID, revoked.UTC()); err != nil {
		t.Fatal(err)
	}
	// Within the window the cached key may still pass; once it is over,
	// the key must be refused.
	deadline := revoked.Add(a.ttl)
	for {
		_, err := a.principal(ctx, secret)
		now := time.Now()
		if errors.Is(err, errBadKey) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if now.After(deadline) {
			t.Fatalf("the revoked key still authenticates %s after its revocation; the cache TTL is %s", now.Sub(revoked), a.ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := a.principal(ctx, secret); !errors.Is(err, errBadKey) {
		t.Fatalf("after the refusal the revoked key authenticates again: %v", err)
	}
}

// TestNewID: generated correlation ids are 24 lowercase hex digits, the
// first 12 the time in milliseconds (so they sort by time and the audit
// rows carrying them extend their index at its end), all distinct.
func TestNewID(t *testing.T) {
	valid := regexp.MustCompile(`^[0-9a-f]{24}$`)
	seen := map[string]bool{}
	prev := ""
	for i := range 10000 {
		before := time.Now().UnixMilli()
		id := newID()
		if !valid.MatchString(id) || !validCorrelationID(id) {
			t.Fatalf("id %q is not 24 lowercase hex digits", id)
		}
		if seen[id] {
			t.Fatalf("id %q made twice in %d", id, i)
		}
		seen[id] = true
		var ms int64
		for _, c := range id[:12] {
			ms = ms<<4 | int64(hexValue(byte(c)))
		}
		if ms < before || ms > time.Now().UnixMilli() {
			t.Fatalf("id %q: time prefix %d is not the time it was made (%d)", id, ms, before)
		}
		if id[:12] < prev {
			t.Fatalf("id %q sorts before the previous id's time %s", id, prev)
		}
		prev = id[:12]
	}
}

func hexValue(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}
