package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// wasm returns module bytes and their digest.
func wasm(s string) ([]byte, string) {
	b := []byte("\x00asm\x01\x00\x00\x00" + s)
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

func wantCode(t *testing.T, what string, err error, code abi.Code, says string) {
	t.Helper()
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != code {
		t.Fatalf("%s: error = %v, want *abi.Error %s", what, err, code)
	}
	if !strings.Contains(ae.Message, says) {
		t.Errorf("%s: message %q does not say %q", what, ae.Message, says)
	}
}

// Text fields that PostgreSQL's text cannot hold (NUL, invalid UTF-8) are
// stored the same on every backend: with U+FFFD in place of the bad bytes,
// never refused (an audit row cannot be).
func (su suite) testAuditText(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	tests := []struct {
		name, in, want string
	}{
		{"NUL", "a\x00b", "a\uFFFDb"},
		{"invalid UTF-8", "bad\xffbyte", "bad\uFFFDbyte"},
		{"truncated rune", "x\xc3", "x\uFFFD"},
		{"clean", "ü ok", "ü ok"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("text-%d", i)
			e := store.AuditEvent{ID: id, Time: t0, Kind: "op", CorrelationID: id, Reason: tt.in, Op: tt.in, Org: "acme",
				Attrs: map[string]string{"k": "a\x00b"}}
			if err := s.AuditInsert(ctx, []store.AuditEvent{e}); err != nil {
				t.Fatalf("AuditInsert: %v", err)
			}
			got, err := s.AuditQuery(ctx, store.AuditFilter{CorrelationID: id})
			if err != nil || len(got) != 1 {
				t.Fatalf("AuditQuery = %d events, %v", len(got), err)
			}
			if got[0].Reason != tt.want || got[0].Op != tt.want {
				t.Errorf("Reason, Op = %q, %q; want %q", got[0].Reason, got[0].Op, tt.want)
			}
			if got[0].Attrs["k"] != "a\x00b" {
				t.Errorf("attribute = %q; attributes are JSON and keep any byte", got[0].Attrs["k"])
			}
		})
	}
}

// A large batch is one transaction: stored whole, or (a duplicate id at
// its end) not at all.
func (su suite) testAuditBatch(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	const n = 1000
	batch := make([]store.AuditEvent, n)
	for i := range batch {
		batch[i] = store.AuditEvent{ID: fmt.Sprintf("b%05d", i), Time: t0.Add(time.Duration(i)), Kind: "op", Org: "acme", Module: "m",
			Attrs: map[string]string{"i": fmt.Sprint(i)}}
	}
	if err := s.AuditInsert(ctx, batch); err != nil {
		t.Fatal(err)
	}
	bad := append([]store.AuditEvent{{ID: "c00000", Time: t0, Kind: "op", Org: "acme"}}, batch[n-1])
	if err := s.AuditInsert(ctx, bad); err == nil {
		t.Fatal("a batch with a stored id succeeded")
	}
	got, err := s.AuditQuery(ctx, store.AuditFilter{Org: "acme", Limit: store.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d events stored, want %d (the failed batch adds none)", len(got), n)
	}
	for i, e := range got {
		if e.ID != batch[i].ID || e.Attrs["i"] != fmt.Sprint(i) || !e.Time.Equal(batch[i].Time) {
			t.Fatalf("event %d = %+v, want %+v", i, e, batch[i])
		}
	}
}

func (su suite) testModuleBlobs(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	code, digest := wasm("hello")
	other, otherDigest := wasm("other")

	wantCode(t, "bytes under another digest", s.ModuleBlobPut(ctx, otherDigest, code), abi.CodeInvalidArgument, "not the digest")
	wantCode(t, "a digest that is no SHA-256", s.ModuleBlobPut(ctx, "abc", code), abi.CodeInvalidArgument, "digest")
	if err := s.ModuleBlobPut(ctx, digest, code); err != nil {
		t.Fatal(err)
	}
	if err := s.ModuleBlobPut(ctx, digest, code); err != nil {
		t.Fatalf("storing the same bytes again: %v", err)
	}
	// No version refers to it yet: no organization may read it.
	if _, err := s.ModuleBlobGet(ctx, "acme", digest); !errors.Is(err, store.ErrModuleNotFound) {
		t.Fatalf("blob without a version: %v, want ErrModuleNotFound", err)
	}
	v := store.ModuleVersion{Org: "acme", Name: "hello", Digest: digest, Size: int64(len(code))}
	if _, err := s.ModulePut(ctx, v, store.ModuleQuota{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ModuleBlobGet(ctx, "acme", digest)
	if err != nil || !bytes.Equal(got, code) {
		t.Fatalf("ModuleBlobGet = %q, %v; want the bytes", got, err)
	}
	tests := []struct {
		name, org, digest string
	}{
		{"another organization", "globex", digest},
		{"a digest acme has no version of", "acme", otherDigest},
		{"a version whose bytes were never stored", "acme", strings.Repeat("ee", 32)},
	}
	if _, err := s.ModulePut(ctx, store.ModuleVersion{Org: "acme", Name: "ghost", Digest: strings.Repeat("ee", 32)}, store.ModuleQuota{}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		if _, err := s.ModuleBlobGet(ctx, tt.org, tt.digest); !errors.Is(err, store.ErrModuleNotFound) {
			t.Errorf("%s: %v, want ErrModuleNotFound", tt.name, err)
		}
	}
	wantCode(t, "empty org", func() error { _, err := s.ModuleBlobGet(ctx, "", digest); return err }(), abi.CodeInvalidArgument, "org")

	// The sweep keeps referenced blobs and blobs within the grace, and
	// deletes the rest.
	if err := s.ModuleBlobPut(ctx, otherDigest, other); err != nil {
		t.Fatal(err)
	}
	if gone, err := s.ModuleBlobSweep(ctx, time.Now()); err != nil || len(gone) != 0 {
		t.Fatalf("sweep within the grace = %v, %v; want nothing deleted", gone, err)
	}
	gone, err := s.ModuleBlobSweep(ctx, time.Now().Add(store.BlobGrace+time.Minute))
	if err != nil || len(gone) != 1 || gone[0] != otherDigest {
		t.Fatalf("sweep after the grace = %v, %v; want [%s]", gone, err, otherDigest)
	}
	if got, err := s.ModuleBlobGet(ctx, "acme", digest); err != nil || !bytes.Equal(got, code) {
		t.Fatalf("a referenced blob after the sweep: %q, %v", got, err)
	}
	// Deleting the module orphans the digest; its blob goes with it at
	// once, young as it is: nothing is left for a sweep.
	orphans, err := s.ModuleDelete(ctx, "acme", "hello")
	if err != nil || len(orphans) != 1 || orphans[0] != digest {
		t.Fatalf("ModuleDelete = %v, %v", orphans, err)
	}
	if gone, err := s.ModuleBlobSweep(ctx, time.Now().Add(store.BlobGrace+time.Minute)); err != nil || len(gone) != 0 {
		t.Fatalf("sweep after delete = %v, %v; want nothing left to sweep", gone, err)
	}
	// Pruning a version does the same to its blob: a quota's pruned
	// versions keep no bytes behind.
	var pruneDigests []string
	for i := range 3 {
		b := []byte(fmt.Sprintf("version %d of prune", i))
		sum := sha256.Sum256(b)
		d := hex.EncodeToString(sum[:])
		pruneDigests = append(pruneDigests, d)
		if err := s.ModuleBlobPut(ctx, d, b); err != nil {
			t.Fatal(err)
		}
		p, err := s.ModulePut(ctx, store.ModuleVersion{Org: "acme", Name: "prune", Digest: d, Size: int64(len(b))}, store.ModuleQuota{KeepPerModule: 1})
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && (len(p.Orphans) != 1 || p.Orphans[0] != pruneDigests[i-1]) {
			t.Fatalf("put %d pruned %+v; want the version before it, orphaned", i, p)
		}
	}
	if gone, err := s.ModuleBlobSweep(ctx, time.Now().Add(store.BlobGrace+time.Minute)); err != nil || len(gone) != 0 {
		t.Fatalf("sweep after pruning = %v, %v; want nothing left to sweep (the pruned blobs went with their versions)", gone, err)
	}
	if got, err := s.ModuleBlobGet(ctx, "acme", pruneDigests[2]); err != nil || string(got) != "version 2 of prune" {
		t.Fatalf("the kept version's blob: %q, %v", got, err)
	}
}

// recv reads the next change, failing after a deadline.
func recv(t *testing.T, ch <-chan store.ModuleChange, within time.Duration) store.ModuleChange {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("change feed closed")
		}
		return c
	case <-time.After(within):
		t.Fatalf("no module change within %v", within)
	}
	panic("unreachable")
}

func (su suite) testWatchModules(t *testing.T) {
	s := su.open(t)
	watchChanges(t, s, s)
}

// watchChanges watches on w while writing through s: every upload,
// replacement and deletion arrives once, in order, within a second;
// pruning an old version is no change.
func watchChanges(t *testing.T, w, s *store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, before := wasm("before the watch")
	if _, err := s.ModulePut(ctx, store.ModuleVersion{Org: "acme", Name: "old", Digest: before}, store.ModuleQuota{}); err != nil {
		t.Fatal(err)
	}
	ch, err := w.WatchModules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, d1 := wasm("v1")
	_, d2 := wasm("v2")
	_, d3 := wasm("v3")
	t1 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		name string
		do   func() error
		want store.ModuleChange
	}{
		{"upload", func() error {
			_, err := s.ModulePut(ctx, store.ModuleVersion{Org: "acme", Name: "hello", Digest: d1, UploadedAt: t1}, store.ModuleQuota{})
			return err
		}, store.ModuleChange{Org: "acme", Name: "hello", Digest: d1}},
		{"replace, pruning the old version", func() error {
			_, err := s.ModulePut(ctx, store.ModuleVersion{Org: "acme", Name: "hello", Digest: d2, UploadedAt: t1.Add(time.Minute)}, store.ModuleQuota{KeepPerModule: 1})
			return err
		}, store.ModuleChange{Org: "acme", Name: "hello", Digest: d2}},
		{"another organization", func() error {
			_, err := s.ModulePut(ctx, store.ModuleVersion{Org: "globex", Name: "hello", Digest: d3, UploadedAt: t1}, store.ModuleQuota{})
			return err
		}, store.ModuleChange{Org: "globex", Name: "hello", Digest: d3}},
		{"delete", func() error { _, err := s.ModuleDelete(ctx, "acme", "hello"); return err },
			store.ModuleChange{Org: "acme", Name: "hello", Digest: ""}},
	}
	var last int64
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		c := recv(t, ch, time.Second)
		if c.Org != st.want.Org || c.Name != st.want.Name || c.Digest != st.want.Digest || c.Deleted() != (st.want.Digest == "") {
			t.Errorf("%s: change %+v, want %+v", st.name, c, st.want)
		}
		if c.Seq <= last {
			t.Errorf("%s: seq %d after %d", st.name, c.Seq, last)
		}
		last = c.Seq
	}
	select {
	case c := <-ch:
		t.Errorf("an extra change: %+v", c)
	case <-time.After(2 * store.ModulePollInterval):
	}
	cancel()
	for range ch { // the feed closes when ctx ends
	}
}

func (su suite) testRateTake(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const key = "org:acme"
	take := func(at time.Time) (bool, time.Duration) {
		t.Helper()
		ok, retry, err := s.RateTake(ctx, key, 2, 3, at) // 2 tokens a second, burst 3
		if err != nil {
			t.Fatalf("RateTake: %v", err)
		}
		return ok, retry
	}
	steps := []struct {
		name  string
		at    time.Duration
		ok    bool
		retry time.Duration // when refused
	}{
		{"a new bucket is full: 1 of 3", 0, true, 0},
		{"2 of 3", 0, true, 0},
		{"3 of 3", 0, true, 0},
		{"empty", 0, false, 500 * time.Millisecond},
		{"half a token later", 250 * time.Millisecond, false, 250 * time.Millisecond},
		{"one token later", 500 * time.Millisecond, true, 0},
		{"empty again", 500 * time.Millisecond, false, 500 * time.Millisecond},
		{"a clock that goes back refills nothing", -time.Hour, false, 500 * time.Millisecond},
		{"an hour on, the bucket holds only its burst", time.Hour, true, 0},
		{"2 of 3 after the hour", time.Hour, true, 0},
		{"3 of 3 after the hour", time.Hour, true, 0},
		{"empty after the hour", time.Hour, false, 500 * time.Millisecond},
	}
	for _, st := range steps {
		ok, retry := take(now.Add(st.at))
		if ok != st.ok {
			t.Fatalf("%s: ok = %v, want %v", st.name, ok, st.ok)
		}
		if !ok && (retry < st.retry-time.Millisecond || retry > st.retry+time.Millisecond) {
			t.Errorf("%s: retry after %v, want %v", st.name, retry, st.retry)
		}
	}
	// Another key has its own bucket.
	if ok, _, err := s.RateTake(ctx, "org:globex", 2, 3, now); err != nil || !ok {
		t.Errorf("another key: %v, %v", ok, err)
	}
	bad := []struct {
		name  string
		key   string
		rate  float64
		burst int
		says  string
	}{
		{"empty key", "", 1, 1, "key"},
		{"long key", strings.Repeat("k", store.MaxRateKeyLen+1), 1, 1, "key"},
		{"key with NUL", "a\x00b", 1, 1, "key"},
		{"zero rate", "k", 0, 1, "rate"},
		{"negative rate", "k", -1, 1, "rate"},
		{"zero burst", "k", 1, 0, "burst"},
	}
	for _, tt := range bad {
		_, _, err := s.RateTake(ctx, tt.key, tt.rate, tt.burst, now)
		wantCode(t, tt.name, err, abi.CodeInvalidArgument, tt.says)
	}
}

// Racing takers at one instant get exactly the burst.
func (su suite) testRateTakeConcurrent(t *testing.T) {
	s := su.open(t)
	raceRate(t, []*store.Store{s})
}

func raceRate(t *testing.T, stores []*store.Store) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const burst, takers = 10, 40
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ok   int
		errs []error
	)
	start := make(chan struct{})
	for i := range takers {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			got, _, err := s.RateTake(ctx, "key:race", 0.001, burst, now)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if got {
				ok++
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if ok != burst {
		t.Errorf("%d of %d racing takes succeeded, want exactly the burst %d", ok, takers, burst)
	}
}

// One organization's data never reaches another's, whatever the kind:
// kv, audit, API keys, modules and their bytes, confirmations.
func (su suite) testOrgScoping(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Now().UTC()
	a, b := "org-a", "org-b"

	// Org A's data, of every kind.
	put(t, s, store.Scope{Org: a, Module: "m"}, "secret", "a's")
	if err := s.KVPutWithin(ctx, store.Scope{Org: a, Module: "m"}, "quota", []byte("12345"), 1000); err != nil {
		t.Fatal(err)
	}
	if err := s.AuditInsert(ctx, []store.AuditEvent{{Kind: "op", Org: a, Module: "m", Reason: "a's"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.APIKeyCreate(ctx, store.APIKey{ID: "ka", Hash: strings.Repeat("a1", 32), Org: a, User: "ann"}); err != nil {
		t.Fatal(err)
	}
	code, digest := wasm("a's module")
	if err := s.ModuleBlobPut(ctx, digest, code); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ModulePut(ctx, store.ModuleVersion{Org: a, Name: "m", Digest: digest, Size: int64(len(code))}, store.ModuleQuota{}); err != nil {
		t.Fatal(err)
	}
	c := newConfirmation("org-a-token", now)
	c.Org = a
	createConfirmation(t, s, c)

	// Org B sees none of it, through any method.
	sb := store.Scope{Org: b, Module: "m"}
	checks := []struct {
		name string
		leak func() (bool, error) // reports whether b sees a's data
	}{
		{"KVGet", func() (bool, error) { _, found, err := s.KVGet(ctx, sb, "secret"); return found, err }},
		{"KVList", func() (bool, error) { keys, _, err := s.KVList(ctx, sb, "", "", 0); return len(keys) > 0, err }},
		{"KVUsage", func() (bool, error) { n, err := s.KVUsage(ctx, sb); return n != 0, err }},
		{"KVDelete", func() (bool, error) { return s.KVDelete(ctx, sb, "secret") }},
		{"AuditQuery", func() (bool, error) {
			es, err := s.AuditQuery(ctx, store.AuditFilter{Org: b})
			return len(es) > 0, err
		}},
		{"APIKeys", func() (bool, error) { ks, err := s.APIKeys(ctx, b); return len(ks) > 0, err }},
		{"Modules", func() (bool, error) { ms, err := s.Modules(ctx, b); return len(ms) > 0, err }},
		{"ModuleUsage", func() (bool, error) { u, err := s.ModuleUsage(ctx, b); return u != store.ModuleUsage{}, err }},
		{"ModuleVersions", func() (bool, error) {
			_, err := s.ModuleVersions(ctx, b, "m")
			return err == nil, ignore(err, store.ErrModuleNotFound)
		}},
		{"ModuleDelete", func() (bool, error) {
			_, err := s.ModuleDelete(ctx, b, "m")
			return err == nil, ignore(err, store.ErrModuleNotFound)
		}},
		{"ModuleBlobGet", func() (bool, error) {
			_, err := s.ModuleBlobGet(ctx, b, digest)
			return err == nil, ignore(err, store.ErrModuleNotFound)
		}},
		{"ConfirmationsPending", func() (bool, error) {
			cs, err := s.ConfirmationsPending(ctx, b, now, 0)
			return len(cs) > 0, err
		}},
		{"ConfirmationUse", func() (bool, error) {
			_, err := s.ConfirmationUse(ctx, c.TokenHash, b, "alice", testBinding, now)
			return err == nil, ignore(err, store.ErrConfirmationPrincipal)
		}},
		{"KVPutWithin counts only b's bytes", func() (bool, error) {
			err := s.KVPutWithin(ctx, sb, "quota", make([]byte, 995), 1000)
			return false, err
		}},
	}
	for _, ck := range checks {
		leak, err := ck.leak()
		if err != nil {
			t.Errorf("%s: %v", ck.name, err)
		}
		if leak {
			t.Errorf("%s: org %s sees org %s's data", ck.name, b, a)
		}
	}

	// And A's data is all still there, unchanged.
	if v, found, err := s.KVGet(ctx, store.Scope{Org: a, Module: "m"}, "secret"); err != nil || !found || string(v) != "a's" {
		t.Errorf("org a's key after org b's calls: %q, %v, %v", v, found, err)
	}
	if ms, err := s.Modules(ctx, a); err != nil || len(ms) != 1 {
		t.Errorf("org a's modules: %+v, %v", ms, err)
	}
	if got, err := s.ModuleBlobGet(ctx, a, digest); err != nil || !bytes.Equal(got, code) {
		t.Errorf("org a's module bytes: %v", err)
	}
	if cs, err := s.ConfirmationsPending(ctx, a, now, 0); err != nil || len(cs) != 1 {
		t.Errorf("org a's confirmation after org b tried it: %d pending, %v; want 1 (unused)", len(cs), err)
	}
	if es, err := s.AuditQuery(ctx, store.AuditFilter{Org: a}); err != nil || len(es) != 1 {
		t.Errorf("org a's audit: %d events, %v", len(es), err)
	}
}

// ignore returns nil for an error that is target, and err otherwise.
func ignore(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return err
}
