package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// codeKey is a valid artifact key derived from s.
func codeKey(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// artifact is an artifact of n bytes under codeKey(name), its bytes and
// MAC telling it from any other.
func artifact(name string, n int) store.CodeArtifact {
	data := bytes.Repeat([]byte(name+"."), n/(len(name)+1)+1)[:n]
	mac := sha256.Sum256(data)
	return store.CodeArtifact{Key: codeKey(name), Data: data, MAC: mac[:]}
}

// testCodeRoundTrip: an artifact comes back byte for byte, with its MAC,
// under its key only; storing a key again replaces it; usage counts what
// is stored.
func (su suite) testCodeRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	a := artifact("a", 5000)
	if _, err := s.CodeGet(ctx, a.Key, 0); !errors.Is(err, store.ErrCodeNotFound) {
		t.Fatalf("CodeGet before any put = %v, want ErrCodeNotFound", err)
	}
	before := time.Now()
	if _, err := s.CodePut(ctx, a, 0); err != nil {
		t.Fatal(err)
	}
	got, err := s.CodeGet(ctx, a.Key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Data, a.Data) || !bytes.Equal(got.MAC, a.MAC) || got.Key != a.Key {
		t.Fatalf("CodeGet returned %d bytes, mac %x; want the %d bytes and mac %x stored", len(got.Data), got.MAC, len(a.Data), a.MAC)
	}
	if got.StoredAt.Before(before.Add(-time.Second)) || got.UsedAt.Before(got.StoredAt) {
		t.Errorf("stored_at %s, used_at %s: want stored now, used no earlier", got.StoredAt, got.UsedAt)
	}
	if _, err := s.CodeGet(ctx, codeKey("b"), 0); !errors.Is(err, store.ErrCodeNotFound) {
		t.Errorf("CodeGet of another key = %v, want ErrCodeNotFound", err)
	}
	// Replaced under the same key.
	a2 := artifact("a2", 300)
	a2.Key = a.Key
	if _, err := s.CodePut(ctx, a2, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.CodeGet(ctx, a.Key, 0); err != nil || !bytes.Equal(got.Data, a2.Data) || !bytes.Equal(got.MAC, a2.MAC) {
		t.Fatalf("after a second put under the key: %d bytes, %v; want the second artifact", len(got.Data), err)
	}
	b := artifact("b", 700)
	if _, err := s.CodePut(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	if u, err := s.CodeUsage(ctx); err != nil || u != (store.CodeUsage{Bytes: 1000, Artifacts: 2}) {
		t.Errorf("CodeUsage = %+v, %v; want 1000 bytes in 2 artifacts", u, err)
	}
}

// testCodeValidation: what the store refuses, changing nothing: keys that
// are not a SHA-256 in lowercase hex (SQL and path syntax among them), a
// MAC that is not 32 bytes, no data, data over the budget.
func (su suite) testCodeValidation(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	good := artifact("good", 100)
	tests := []struct {
		name   string
		edit   func(a *store.CodeArtifact)
		budget int64
		code   abi.Code
		large  bool
	}{
		{name: "empty key", edit: func(a *store.CodeArtifact) { a.Key = "" }, code: abi.CodeInvalidArgument},
		{name: "upper-case key", edit: func(a *store.CodeArtifact) { a.Key = "A" + a.Key[1:] }, code: abi.CodeInvalidArgument},
		{name: "short key", edit: func(a *store.CodeArtifact) { a.Key = a.Key[:63] }, code: abi.CodeInvalidArgument},
		{name: "SQL in the key", edit: func(a *store.CodeArtifact) { a.Key = "'; DELETE FROM code_artifacts; --" + a.Key[33:] }, code: abi.CodeInvalidArgument},
		{name: "path in the key", edit: func(a *store.CodeArtifact) { a.Key = "../../../../etc/passwd" + a.Key[22:] }, code: abi.CodeInvalidArgument},
		{name: "short mac", edit: func(a *store.CodeArtifact) { a.MAC = a.MAC[:31] }, code: abi.CodeInvalidArgument},
		{name: "no mac", edit: func(a *store.CodeArtifact) { a.MAC = nil }, code: abi.CodeInvalidArgument},
		{name: "no data", edit: func(a *store.CodeArtifact) { a.Data = nil }, code: abi.CodeInvalidArgument},
		{name: "over the budget", edit: func(a *store.CodeArtifact) {}, budget: 99, large: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := good
			tt.edit(&a)
			_, err := s.CodePut(ctx, a, tt.budget)
			var ae *abi.Error
			var tl *store.CodeTooLargeError
			switch {
			case tt.large && (!errors.As(err, &tl) || tl.Size != 100 || tl.Max != 99):
				t.Errorf("CodePut = %v, want a CodeTooLargeError of 100 bytes over 99", err)
			case !tt.large && (!errors.As(err, &ae) || ae.Code != tt.code):
				t.Errorf("CodePut = %v, want %s", err, tt.code)
			}
			if _, err := s.CodeGet(ctx, "0123"+good.Key[4:], 0); !errors.Is(err, store.ErrCodeNotFound) {
				t.Errorf("CodeGet after a refused put = %v", err)
			}
		})
	}
	for _, key := range []string{"", "x", "'; SELECT 1; --", good.Key + "00", "G" + good.Key[1:]} {
		var ae *abi.Error
		if _, err := s.CodeGet(ctx, key, 0); !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
			t.Errorf("CodeGet(%q) = %v, want invalid_argument", key, err)
		}
	}
	if u, err := s.CodeUsage(ctx); err != nil || u.Artifacts != 0 {
		t.Errorf("after refused puts: usage %+v, %v; want nothing stored", u, err)
	}
}

// testCodeTooLarge: an artifact stored with more bytes than the reader
// accepts is measured, not read: CodeGet says how large it is and returns
// none of it.
func (su suite) testCodeTooLarge(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	a := artifact("big", 1<<20)
	if _, err := s.CodePut(ctx, a, 0); err != nil {
		t.Fatal(err)
	}
	got, err := s.CodeGet(ctx, a.Key, 1<<20-1)
	var tl *store.CodeTooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, store.ErrCodeTooLarge) || tl.Size != 1<<20 || tl.Max != 1<<20-1 {
		t.Fatalf("CodeGet with a bound one byte short = %v, want a CodeTooLargeError of %d bytes over %d", err, 1<<20, 1<<20-1)
	}
	if got.Data != nil {
		t.Errorf("CodeGet over the bound returned %d bytes", len(got.Data))
	}
	if got, err := s.CodeGet(ctx, a.Key, 1<<20); err != nil || len(got.Data) != 1<<20 {
		t.Errorf("CodeGet at exactly the bound: %d bytes, %v", len(got.Data), err)
	}
}

// testCodeEviction: past the budget, CodePut evicts the least recently
// used artifacts (a fetch counts as a use), never the one it stores.
func (su suite) testCodeEviction(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	t0 := time.Now().Add(-time.Hour)
	put := func(name string, at time.Time, budget int64) []string {
		t.Helper()
		a := artifact(name, 100)
		a.StoredAt, a.UsedAt = at, at
		evicted, err := s.CodePut(ctx, a, budget)
		if err != nil {
			t.Fatal(err)
		}
		return evicted
	}
	for i, n := range []string{"a", "b", "c"} {
		if ev := put(n, t0.Add(time.Duration(i)*time.Minute), 1000); len(ev) != 0 {
			t.Fatalf("put %s within the budget evicted %v", n, ev)
		}
	}
	// a is the oldest, but fetched now: b is the least recently used.
	if _, err := s.CodeGet(ctx, codeKey("a"), 0); err != nil {
		t.Fatal(err)
	}
	ev := put("d", time.Time{}, 300)
	if !slices.Equal(ev, []string{codeKey("b")}) {
		t.Errorf("put d with room for 3 evicted %v, want only b (%s)", ev, codeKey("b"))
	}
	for n, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		_, err := s.CodeGet(ctx, codeKey(n), 0)
		if got := err == nil; got != want {
			t.Errorf("artifact %s kept = %v (%v), want %v", n, got, err, want)
		}
	}
	// An artifact older than every other is still kept when it is the
	// one being stored.
	ev = put("e", t0.Add(-time.Hour), 100)
	if len(ev) != 3 || slices.Contains(ev, codeKey("e")) {
		t.Errorf("put e with room for itself only evicted %v, want the 3 others", ev)
	}
	if u, err := s.CodeUsage(ctx); err != nil || u != (store.CodeUsage{Bytes: 100, Artifacts: 1}) {
		t.Errorf("usage %+v, %v; want e alone", u, err)
	}
}

// testSharedCodeBudget: puts racing through several handles keep the
// table within the budget, and every artifact a put reports stored
// without evicting it is whole.
func testSharedCodeBudget(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ctx := context.Background()
	stores := open(t, 3)
	const (
		size   = 1000
		budget = 5 * size
		puts   = 30
	)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range puts {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			if _, err := s.CodePut(ctx, artifact(fmt.Sprint("art-", i), size), budget); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	for i, s := range stores {
		u, err := s.CodeUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if u.Bytes > budget || u.Artifacts != budget/size {
			t.Errorf("handle %d: %+v after %d racing puts, want %d artifacts within %d bytes", i, u, puts, budget/size, budget)
		}
	}
	kept := 0
	for i := range puts {
		a := artifact(fmt.Sprint("art-", i), size)
		got, err := stores[0].CodeGet(ctx, a.Key, 0)
		if errors.Is(err, store.ErrCodeNotFound) {
			continue
		}
		if err != nil || !bytes.Equal(got.Data, a.Data) || !bytes.Equal(got.MAC, a.MAC) {
			t.Errorf("artifact %d: %v, or not the bytes stored", i, err)
		}
		kept++
	}
	if kept != budget/size {
		t.Errorf("%d artifacts readable, want %d", kept, budget/size)
	}
}
