package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
)

// TestKeyLastUseBatched: uses of a key are gathered in memory, not
// written per request: a thousand uses within a minute write nothing;
// the first use a minute after the last write writes the latest use (the
// peer's address, without its port), in the background; flush and close
// write what is gathered.
func TestKeyLastUseBatched(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, key, err := CreateAPIKey(ctx, st, NewAPIKey{Org: "acme", User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	lastUse := func() (time.Time, string) {
		k, err := st.APIKeyByID(ctx, key.ID)
		if err != nil {
			t.Fatal(err)
		}
		return k.LastUsedAt, k.LastUsedAddr
	}
	a := newAuthenticator(st, nil)
	start := time.Now()
	for i := range 1000 {
		a.use(key.ID, "192.0.2.7", start.Add(time.Duration(i)*time.Millisecond))
	}
	if at, _ := lastUse(); !at.IsZero() {
		t.Fatalf("uses within a minute were written: %v", at)
	}
	later := a.lastTouch.Add(touchEvery)
	a.use(key.ID, "2001:db8::1", later)
	a.mu.Lock()
	a.closed = true // wait for the background write as close does, without its flush
	a.mu.Unlock()
	a.touching.Wait()
	if at, addr := lastUse(); at.UnixNano() != later.UnixNano() || addr != "2001:db8::1" {
		t.Errorf("after a minute: %v %q, want %v 2001:db8::1", at, addr, later)
	}
	a.closed = false
	evenLater := later.Add(time.Second)
	a.use(key.ID, "198.51.100.2", evenLater)
	a.close(ctx)
	if at, addr := lastUse(); at.UnixNano() != evenLater.UnixNano() || addr != "198.51.100.2" {
		t.Errorf("after close: %v %q", at, addr)
	}
}
