package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// skipNoSessions skips a test of the session storage on a backend
// without it (driver.SessionBackend is optional, as a family's is).
func skipNoSessions(t *testing.T, s *store.Store) {
	t.Helper()
	if _, err := s.Replicas(context.Background(), time.Now(), time.Minute); errors.Is(err, store.ErrSessionStorage) {
		t.Skip("the backend does not implement driver.SessionBackend")
	}
}

// pattern is a reader of n bytes that are not all alike (so a chunk out
// of order shows), made as it is read: a large image never sits in the
// test's memory either.
type pattern struct{ n, off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	for i := range b {
		x := p.off + int64(i)
		b[i] = byte(x ^ x>>8 ^ x>>16)
	}
	p.off += int64(len(b))
	return len(b), nil
}

func patternSum(n int64) [32]byte {
	h := sha256.New()
	io.Copy(h, &pattern{n: n})
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

func readSum(t *testing.T, r io.Reader) ([32]byte, int64) {
	t.Helper()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatalf("read the image: %v", err)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out, n
}

// testSessionImages: an image of any size (none, under a chunk, a chunk
// exactly, across chunks) comes back byte for byte under its
// organization and id only; another organization's open of the same id
// is fs.ErrNotExist; a put replaces the image whole; delete removes it
// and a second delete is no error.
func (su suite) testSessionImages(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	skipNoSessions(t, s)
	im := s.SessionImages(0)
	for _, n := range []int64{0, 1, 4095, store.ImageChunkBytes, store.ImageChunkBytes + 1, 3*store.ImageChunkBytes + store.ImageChunkBytes/2} {
		id := "s" + strings.Repeat("x", int(n%7)+1)
		if err := im.PutImage(ctx, "acme", id, &pattern{n: n}); err != nil {
			t.Fatalf("PutImage of %d bytes: %v", n, err)
		}
		r, err := im.OpenImage(ctx, "acme", id)
		if err != nil {
			t.Fatalf("OpenImage of %d bytes: %v", n, err)
		}
		sum, got := readSum(t, r)
		r.Close()
		if got != n || sum != patternSum(n) {
			t.Errorf("an image of %d bytes came back as %d bytes (same bytes: %v)", n, got, sum == patternSum(n))
		}
	}
	if _, err := im.OpenImage(ctx, "other", "sx"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("another organization's OpenImage = %v, want fs.ErrNotExist", err)
	}
	if err := im.PutImage(ctx, "acme", "sx", strings.NewReader("second")); err != nil {
		t.Fatal(err)
	}
	r, err := im.OpenImage(ctx, "acme", "sx")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(r); string(b) != "second" {
		t.Errorf("after a replacing put: %q", b)
	}
	for range 2 {
		if err := im.DeleteImage(ctx, "acme", "sx"); err != nil {
			t.Errorf("DeleteImage: %v", err)
		}
	}
	if _, err := im.OpenImage(ctx, "acme", "sx"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenImage after delete = %v, want fs.ErrNotExist", err)
	}
}

// failingReader yields n bytes, then fails.
type failingReader struct{ pattern }

func (f *failingReader) Read(b []byte) (int, error) {
	n, err := f.pattern.Read(b)
	if err == io.EOF {
		return 0, errors.New("the source broke")
	}
	return n, err
}

// testSessionImageBound: an image past the bound is refused with
// ErrImageTooLarge, having been read no further than the bound and a
// chunk, and the image stored before stays whole; so does it when the
// source fails midway; ids and orgs outside their bounds are refused.
func (su suite) testSessionImageBound(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	skipNoSessions(t, s)
	const bound = 2*store.ImageChunkBytes + 100
	im := s.SessionImages(bound)
	if err := im.PutImage(ctx, "acme", "s1", &pattern{n: bound}); err != nil {
		t.Fatalf("an image of exactly the bound: %v", err)
	}
	src := &pattern{n: 1 << 40} // a terabyte, were it read
	err := im.PutImage(ctx, "acme", "s1", src)
	if !errors.Is(err, store.ErrImageTooLarge) {
		t.Fatalf("PutImage past the bound = %v, want ErrImageTooLarge", err)
	}
	if src.off > bound+store.ImageChunkBytes {
		t.Errorf("read %d bytes of an image bounded at %d", src.off, bound)
	}
	if err := im.PutImage(ctx, "acme", "s1", &failingReader{pattern{n: store.ImageChunkBytes + 5}}); err == nil || !strings.Contains(err.Error(), "the source broke") {
		t.Errorf("PutImage from a failing source = %v", err)
	}
	r, err := im.OpenImage(ctx, "acme", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if sum, n := readSum(t, r); n != bound || sum != patternSum(bound) {
		t.Errorf("after refused puts the image is %d bytes (want the first, %d)", n, bound)
	}
	for _, tt := range []struct{ org, id string }{
		{"", "s1"}, {strings.Repeat("o", 257), "s1"}, {"acme", ""}, {"acme", "../x"}, {"acme", "a/b"},
		{"acme", strings.Repeat("s", 129)}, {"acme", "s\x00"}, {"acme", "s 1"},
	} {
		if err := im.PutImage(ctx, tt.org, tt.id, strings.NewReader("x")); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("PutImage(%.20q, %.20q) = %v, want invalid_argument", tt.org, tt.id, err)
		}
		if _, err := im.OpenImage(ctx, tt.org, tt.id); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("OpenImage(%.20q, %.20q) = %v, want invalid_argument", tt.org, tt.id, err)
		}
	}
}

// testSessionImageLarge streams an image of 64 MiB in and out: neither
// side holds it whole (the reader is made as it is read, the sum taken
// as it is written), and it comes back byte for byte.
func (su suite) testSessionImageLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB through the store: a few seconds")
	}
	ctx := context.Background()
	s := su.open(t)
	skipNoSessions(t, s)
	const n = 64 << 20
	im := s.SessionImages(0)
	start := time.Now()
	if err := im.PutImage(ctx, "acme", "big", &pattern{n: n}); err != nil {
		t.Fatal(err)
	}
	put := time.Since(start)
	r, err := im.OpenImage(ctx, "acme", "big")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start = time.Now()
	sum, got := readSum(t, r)
	if got != n || sum != patternSum(n) {
		t.Fatalf("64 MiB came back as %d bytes (same: %v)", got, sum == patternSum(n))
	}
	t.Logf("64 MiB image: put %v, read %v", put, time.Since(start))
}

// testSessionDirectory: replicas register and expire; a session's entry
// names its replica, is listed to its owner only, and is forgotten only
// by the replica holding it.
func (su suite) testSessionDirectory(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	skipNoSessions(t, s)
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, r := range []store.Replica{
		{ID: "ra", URL: "http://10.0.0.1:8080", MAC: "m1", StartedAt: now, SeenAt: now},
		{ID: "rb", URL: "http://10.0.0.2:8080", MAC: "m2", StartedAt: now, SeenAt: now.Add(-5 * time.Minute)},
	} {
		if err := s.ReplicaBeat(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	live, err := s.Replicas(ctx, now, time.Minute)
	if err != nil || len(live) != 1 || live[0].ID != "ra" || live[0].URL != "http://10.0.0.1:8080" || live[0].MAC != "m1" {
		t.Errorf("Replicas = %+v, %v; want ra alone", live, err)
	}
	if _, err := s.Replica(ctx, "rb"); err != nil {
		t.Errorf("a replica seen 5 minutes ago is kept (expires at ten TTLs): %v", err)
	}
	if _, err := s.Replicas(ctx, now, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Replica(ctx, "rb"); !errors.Is(err, store.ErrReplicaNotFound) {
		t.Errorf("a replica past ten TTLs: %v, want ErrReplicaNotFound", err)
	}
	for _, bad := range []store.Replica{{ID: "", URL: "u"}, {ID: "r/1", URL: "u"}, {ID: "r", URL: ""}, {ID: "r", URL: strings.Repeat("u", store.MaxReplicaURLBytes+1)}} {
		if err := s.ReplicaBeat(ctx, bad); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("ReplicaBeat(%.30q, %.30q) = %v, want invalid_argument", bad.ID, bad.URL, err)
		}
	}

	e := store.SessionEntry{ID: "s1", Org: "acme", User: "ann", Replica: "ra", Info: []byte(`{"id":"s1"}`), CreatedAt: now}
	if err := s.SessionRecord(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := s.SessionRecord(ctx, store.SessionEntry{ID: "s2", Org: "acme", User: "bob", Replica: "ra", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	got, err := s.SessionEntry(ctx, "s1")
	if err != nil || got.Replica != "ra" || got.User != "ann" || string(got.Info) != `{"id":"s1"}` || !got.CreatedAt.Equal(now) {
		t.Errorf("SessionEntry = %+v, %v", got, err)
	}
	if l, err := s.SessionsOf(ctx, "acme", "ann"); err != nil || len(l) != 1 || l[0].ID != "s1" {
		t.Errorf("ann's sessions = %+v, %v; want s1 alone", l, err)
	}
	if l, _ := s.SessionsOf(ctx, "other", "ann"); len(l) != 0 {
		t.Errorf("another organization's ann sees %+v", l)
	}
	if ok, err := s.SessionForget(ctx, "s1", "rb"); err != nil || ok {
		t.Errorf("another replica forgets s1: %v, %v; want false", ok, err)
	}
	if ok, err := s.SessionForget(ctx, "s1", "ra"); err != nil || !ok {
		t.Errorf("its replica forgets s1: %v, %v; want true", ok, err)
	}
	if _, err := s.SessionEntry(ctx, "s1"); !errors.Is(err, store.ErrSessionEntryNotFound) {
		t.Errorf("SessionEntry after forget = %v", err)
	}
	// Entries of a replica that stopped (no longer registered) are
	// swept once old; a live replica's and paused ones stay.
	old := now.Add(-time.Hour)
	for _, e := range []store.SessionEntry{
		{ID: "dead", Org: "acme", User: "ann", Replica: "rgone", UpdatedAt: old},
		{ID: "young", Org: "acme", User: "ann", Replica: "rgone", UpdatedAt: now},
		{ID: "alive", Org: "acme", User: "ann", Replica: "ra", UpdatedAt: old},
		{ID: "paused", Org: "acme", User: "ann", Replica: "", UpdatedAt: old},
	} {
		if err := s.SessionRecord(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.SessionSweep(ctx, now.Add(-time.Minute)); err != nil || n != 1 {
		t.Errorf("SessionSweep = %d, %v; want 1 (dead)", n, err)
	}
	for id, want := range map[string]bool{"dead": false, "young": true, "alive": true, "paused": true} {
		if _, err := s.SessionEntry(ctx, id); (err == nil) != want {
			t.Errorf("after the sweep, entry %s: %v; want kept %v", id, err, want)
		}
	}
	for _, bad := range []store.SessionEntry{{ID: "../s", Org: "acme"}, {ID: "s", Org: ""}, {ID: "s", Org: "a", Info: []byte("{")},
		{ID: "s", Org: "a", Info: bytes.Repeat([]byte(" "), store.MaxSessionInfoBytes+1)}} {
		if err := s.SessionRecord(ctx, bad); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("SessionRecord(%.30q, %.30q) = %v, want invalid_argument", bad.ID, bad.Org, err)
		}
	}
}

// testSharedSessionImages: an image one replica stores, another reads;
// two replicas replacing one image at once leave one whole image, and
// no chunks of the other (the next put of a differently sized image
// reads back exactly).
func testSharedSessionImages(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ctx := context.Background()
	ss := open(t, 2)
	skipNoSessions(t, ss[0])
	a, b := ss[0].SessionImages(0), ss[1].SessionImages(0)
	const n = 2*store.ImageChunkBytes + 7
	if err := a.PutImage(ctx, "acme", "s1", &pattern{n: n}); err != nil {
		t.Fatal(err)
	}
	r, err := b.OpenImage(ctx, "acme", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if sum, got := readSum(t, r); got != n || sum != patternSum(n) {
		t.Errorf("the other replica read %d bytes", got)
	}
	var wg sync.WaitGroup
	sizes := []int64{store.ImageChunkBytes + 1, 3 * store.ImageChunkBytes}
	for i, im := range []*store.SessionImages{a, b} {
		wg.Go(func() {
			if err := im.PutImage(ctx, "acme", "s1", &pattern{n: sizes[i]}); err != nil {
				t.Errorf("racing put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	r, err = a.OpenImage(ctx, "acme", "s1")
	if err != nil {
		t.Fatal(err)
	}
	sum, got := readSum(t, r)
	if (got != sizes[0] || sum != patternSum(sizes[0])) && (got != sizes[1] || sum != patternSum(sizes[1])) {
		t.Errorf("after racing puts the image is %d bytes, neither one whole", got)
	}
}
