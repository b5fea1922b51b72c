package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// mediaBytes is n bytes that differ with seed, so each is an item of its
// own.
func mediaBytes(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func mediaID(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

func mput(t *testing.T, s *store.Store, org, module string, data []byte, quota int64) (store.MediaItem, bool) {
	t.Helper()
	it, created, err := s.MediaPut(context.Background(), store.MediaNew{Org: org, Module: module, User: "ann", Type: "application/pdf", Data: data}, quota)
	if err != nil {
		t.Fatalf("MediaPut: %v", err)
	}
	return it, created
}

// readAll reads org's item id through MediaOpen.
func readAll(t *testing.T, s *store.Store, org, id string) []byte {
	t.Helper()
	_, r, err := s.MediaOpen(context.Background(), org, id)
	if err != nil {
		t.Fatalf("MediaOpen: %v", err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading the item: %v", err)
	}
	return b
}

// The media contract: content-addressed puts, reads whole and by range
// (across the backend's chunks), listing newest first with pages, usage,
// deletes.
func (su suite) testMediaContract(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	// Three chunks and a bit on PostgreSQL (1 MiB a chunk).
	big := mediaBytes(1, 3<<20+17)
	it, created := mput(t, s, "acme", "gallery", big, 0)
	if !created || it.ID != mediaID(big) || it.Size != int64(len(big)) || it.Type != "application/pdf" || it.Module != "gallery" || it.User != "ann" {
		t.Fatalf("put: %+v created=%v", it, created)
	}
	if time.Since(it.Created) > time.Minute || it.Created.After(time.Now()) {
		t.Errorf("created %v", it.Created)
	}
	again, created := mput(t, s, "acme", "other", big, 0)
	if created || again != it {
		t.Errorf("the same bytes again: %+v created=%v; want the first item, unchanged", again, created)
	}
	if got, err := s.MediaGet(ctx, "acme", it.ID); err != nil || got != it {
		t.Errorf("get: %+v, %v", got, err)
	}
	if !bytes.Equal(readAll(t, s, "acme", it.ID), big) {
		t.Error("the bytes read back differ")
	}
	// Ranges, as http.ServeContent reads them: seek, then read.
	_, r, err := s.MediaOpen(ctx, "acme", it.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, rg := range [][2]int64{{0, 10}, {1<<20 - 5, 1<<20 + 5}, {3 << 20, 3<<20 + 17}, {2<<20 + 100, 2<<20 + 100}, {17, 2<<20 + 3}} {
		if _, err := r.Seek(rg[0], io.SeekStart); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, rg[1]-rg[0])
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, big[rg[0]:rg[1]]) {
			t.Errorf("range %v: %v", rg, err)
		}
	}
	if end, err := r.Seek(0, io.SeekEnd); err != nil || end != int64(len(big)) {
		t.Errorf("seek to the end: %d, %v", end, err)
	}
	if n, err := r.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Errorf("read at the end: %d, %v", n, err)
	}
	r.Close()
	if _, data, err := s.MediaRead(ctx, "acme", it.ID, int64(len(big))); err != nil || !bytes.Equal(data, big) {
		t.Errorf("MediaRead: %v", err)
	}
	if _, _, err := s.MediaRead(ctx, "acme", it.ID, 1000); codeOf(err) != abi.CodeTooLarge {
		t.Errorf("MediaRead under the item's size: %v, want too_large", err)
	}

	// Newest first; by module; in pages.
	var ids []string
	for i := range 5 {
		module := "gallery"
		if i%2 == 1 {
			module = "avatars"
		}
		time.Sleep(2 * time.Millisecond) // distinct creation times on a coarse clock
		m, _ := mput(t, s, "acme", module, mediaBytes(10+i, 100), 0)
		ids = append(ids, m.ID)
	}
	all, err := s.MediaList(ctx, "acme", "", "", 0)
	if err != nil || len(all) != 6 || all[0].ID != ids[4] || all[5].ID != it.ID {
		t.Fatalf("list: %d items, %v", len(all), err)
	}
	avatars, err := s.MediaList(ctx, "acme", "avatars", "", 0)
	if err != nil || len(avatars) != 2 || avatars[0].ID != ids[3] || avatars[1].ID != ids[1] {
		t.Errorf("list of avatars: %+v, %v", avatars, err)
	}
	var paged []string
	for after := ""; ; {
		page, err := s.MediaList(ctx, "acme", "", after, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			paged = append(paged, p.ID)
		}
		after = page[len(page)-1].ID
	}
	if len(paged) != 6 || paged[0] != all[0].ID || paged[5] != all[5].ID {
		t.Errorf("paged list %v", paged)
	}
	if u, err := s.MediaUsage(ctx, "acme"); err != nil || u.Items != 6 || u.Bytes != int64(len(big))+500 {
		t.Errorf("usage %+v, %v", u, err)
	}

	if deleted, err := s.MediaDelete(ctx, "acme", it.ID); err != nil || !deleted {
		t.Fatalf("delete: %v, %v", deleted, err)
	}
	if _, err := s.MediaGet(ctx, "acme", it.ID); !errors.Is(err, store.ErrMediaNotFound) {
		t.Errorf("get after delete: %v", err)
	}
	if _, _, err := s.MediaOpen(ctx, "acme", it.ID); !errors.Is(err, store.ErrMediaNotFound) {
		t.Errorf("open after delete: %v", err)
	}
	if deleted, err := s.MediaDelete(ctx, "acme", it.ID); err != nil || deleted {
		t.Errorf("delete again: %v, %v", deleted, err)
	}
	if u, err := s.MediaUsage(ctx, "acme"); err != nil || u.Items != 5 || u.Bytes != 500 {
		t.Errorf("usage after delete %+v, %v", u, err)
	}
	// Put back after the delete: the bytes are whole again.
	if _, created := mput(t, s, "acme", "gallery", big, 0); !created || !bytes.Equal(readAll(t, s, "acme", it.ID), big) {
		t.Error("the item put back after its delete does not read back")
	}
}

// Another organization's items are not there: not readable, listable or
// deletable by id, even when it stores the same bytes, which are then an
// item of its own that outlives the first organization's.
func (su suite) testMediaScoping(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	data := mediaBytes(7, 5000)
	a, _ := mput(t, s, "acme", "m", data, 0)
	for _, org := range []string{"acme\x00", "acme\xff"} {
		if _, err := s.MediaGet(ctx, org, a.ID); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("%q gets acme's item: %v, want invalid_argument", org, err)
		}
	}
	for _, org := range []string{"globex", "acme ", "ACME", "acm"} {
		if _, err := s.MediaGet(ctx, org, a.ID); !errors.Is(err, store.ErrMediaNotFound) {
			t.Errorf("%q gets acme's item: %v", org, err)
		}
		if _, _, err := s.MediaOpen(ctx, org, a.ID); !errors.Is(err, store.ErrMediaNotFound) {
			t.Errorf("%q opens acme's item: %v", org, err)
		}
		if deleted, err := s.MediaDelete(ctx, org, a.ID); err != nil || deleted {
			t.Errorf("%q deletes acme's item: %v, %v", org, deleted, err)
		}
		if l, err := s.MediaList(ctx, org, "", "", 0); err != nil || len(l) != 0 {
			t.Errorf("%q lists %d items (%v)", org, len(l), err)
		}
		if _, err := s.MediaList(ctx, org, "", a.ID, 0); !errors.Is(err, store.ErrMediaNotFound) {
			t.Errorf("%q pages after acme's item: %v", org, err)
		}
	}
	g, created := mput(t, s, "globex", "m", data, 0)
	if !created || g.ID != a.ID {
		t.Fatalf("globex's put of the same bytes: %+v created=%v; want an item of its own", g, created)
	}
	if deleted, err := s.MediaDelete(ctx, "acme", a.ID); err != nil || !deleted {
		t.Fatal(err)
	}
	if !bytes.Equal(readAll(t, s, "globex", g.ID), data) {
		t.Error("acme's delete took globex's bytes")
	}
	if u, _ := s.MediaUsage(ctx, "acme"); u.Items != 0 || u.Bytes != 0 {
		t.Errorf("acme's usage %+v", u)
	}
	if u, _ := s.MediaUsage(ctx, "globex"); u.Items != 1 || u.Bytes != 5000 {
		t.Errorf("globex's usage %+v", u)
	}
}

// Hostile and malformed arguments are refused before they reach a
// backend: ids that are paths or not hex, empty organizations, data
// that is empty, too large or of a type the host does not keep.
func (su suite) testMediaValidation(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	good, _ := mput(t, s, "acme", "m", []byte("%PDF-1.7"), 0)
	for _, id := range []string{"", "../../../../etc/passwd", "..", "/etc/passwd", good.ID[:63], good.ID + "0",
		"ABCDEF" + good.ID[6:], good.ID[:62] + "/.", good.ID[:60] + "%2e%2e", "' OR 1=1 --" + good.ID[11:]} {
		if _, err := s.MediaGet(ctx, "acme", id); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("get %q: %v, want invalid_argument", id, err)
		}
		if _, _, err := s.MediaOpen(ctx, "acme", id); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("open %q: %v", id, err)
		}
		if _, err := s.MediaDelete(ctx, "acme", id); codeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("delete %q: %v", id, err)
		}
	}
	for _, tt := range []struct {
		name string
		n    store.MediaNew
		code abi.Code
	}{
		{"no org", store.MediaNew{Type: "application/pdf", Data: []byte("x")}, abi.CodeInvalidArgument},
		{"empty", store.MediaNew{Org: "acme", Type: "application/pdf"}, abi.CodeInvalidArgument},
		{"too large", store.MediaNew{Org: "acme", Type: "application/pdf", Data: make([]byte, abi.MaxMediaBytes+1)}, abi.CodeTooLarge},
		{"html", store.MediaNew{Org: "acme", Type: "text/html", Data: []byte("<script>")}, abi.CodeInvalidArgument},
		{"negative width", store.MediaNew{Org: "acme", Type: "image/png", Width: -1, Data: []byte("x")}, abi.CodeInvalidArgument},
	} {
		if _, _, err := s.MediaPut(ctx, tt.n, 0); codeOf(err) != tt.code {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.code)
		}
	}
	if _, err := s.MediaGet(ctx, "", good.ID); codeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("get without an org: %v", err)
	}
}

// The quota: a new item that would pass it is refused, naming it, and
// stores nothing; the same bytes again cost nothing; a delete frees.
func (su suite) testMediaQuota(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	const quota = 2500
	mput(t, s, "acme", "m", mediaBytes(1, 1000), quota)
	second, _ := mput(t, s, "acme", "m", mediaBytes(2, 1000), quota)
	_, _, err := s.MediaPut(ctx, store.MediaNew{Org: "acme", Module: "m", Type: "application/pdf", Data: mediaBytes(3, 1000)}, quota)
	if codeOf(err) != abi.CodeResourceExhausted || !bytesContain(err.Error(), "media quota of 2500 bytes for org acme would be exceeded (in use 2000, this item adds 1000)") {
		t.Fatalf("put past the quota: %v", err)
	}
	if _, err := s.MediaGet(ctx, "acme", mediaID(mediaBytes(3, 1000))); !errors.Is(err, store.ErrMediaNotFound) {
		t.Errorf("the refused item is stored: %v", err)
	}
	if _, created := mput(t, s, "acme", "m", mediaBytes(2, 1000), quota); created {
		t.Error("the same bytes again made a new item")
	}
	if _, created := mput(t, s, "acme", "m", mediaBytes(4, 500), quota); !created {
		t.Error("an item that fits exactly was not stored")
	}
	if _, err := s.MediaDelete(ctx, "acme", second.ID); err != nil {
		t.Fatal(err)
	}
	if _, created := mput(t, s, "acme", "m", mediaBytes(3, 1000), quota); !created {
		t.Error("the delete freed nothing")
	}
	// Another organization has a quota of its own.
	mput(t, s, "globex", "m", mediaBytes(5, 2500), quota)
}

// Concurrent puts at the edge of the quota: of two different items that
// each fit but not together, exactly one is stored; of many racing puts,
// exactly what fits; and the same new bytes put at once by many are one
// item, counted once.
func (su suite) testMediaQuotaConcurrent(t *testing.T) {
	s := su.open(t)
	raceMediaQuota(t, []*store.Store{s})
}

func testSharedMediaQuota(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	stores := open(t, 3)
	warm(t, stores)
	raceMediaQuota(t, stores)
}

func raceMediaQuota(t *testing.T, stores []*store.Store) {
	ctx := context.Background()
	race := func(org string, quota int64, datas [][]byte) (created, stored int, errs []error) {
		var (
			wg sync.WaitGroup
			mu sync.Mutex
		)
		start := make(chan struct{})
		for i, d := range datas {
			s := stores[i%len(stores)]
			wg.Go(func() {
				<-start
				_, c, err := s.MediaPut(ctx, store.MediaNew{Org: org, Module: "m", Type: "application/pdf", Data: d}, quota)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					stored++
					if c {
						created++
					}
				case codeOf(err) != abi.CodeResourceExhausted:
					errs = append(errs, err)
				}
			})
		}
		close(start)
		wg.Wait()
		return created, stored, errs
	}
	for round := range 5 {
		org := fmt.Sprint("edge-", round)
		// 1000 of 1500 bytes in use: two items of 400 fit one at a time.
		if _, _, err := stores[0].MediaPut(ctx, store.MediaNew{Org: org, Type: "application/pdf", Data: mediaBytes(round, 1000)}, 1500); err != nil {
			t.Fatal(err)
		}
		created, _, errs := race(org, 1500, [][]byte{mediaBytes(100+round, 400), mediaBytes(200+round, 400)})
		for _, err := range errs {
			t.Error(err)
		}
		if created != 1 {
			t.Errorf("round %d: %d of two racing puts at the quota's edge were stored, want 1", round, created)
		}
		if u, _ := stores[len(stores)-1].MediaUsage(ctx, org); u.Bytes != 1400 || u.Items != 2 {
			t.Errorf("round %d: usage %+v, want 2 items of 1400 bytes", round, u)
		}
	}
	var many [][]byte
	for i := range 40 {
		many = append(many, mediaBytes(1000+i, 100))
	}
	created, _, errs := race("many", 1000, many)
	for _, err := range errs {
		t.Error(err)
	}
	if created != 10 {
		t.Errorf("%d of 40 racing puts of 100 bytes under a 1000-byte quota were stored, want 10", created)
	}
	same := mediaBytes(99, 300)
	var copies [][]byte
	for range 12 {
		copies = append(copies, same)
	}
	created, stored, errs := race("same", 1000, copies)
	for _, err := range errs {
		t.Error(err)
	}
	if created != 1 || stored != 12 {
		t.Errorf("12 racing puts of the same bytes: %d created, %d stored; want 1, 12", created, stored)
	}
	for i, s := range stores {
		if u, _ := s.MediaUsage(ctx, "same"); u.Items != 1 || u.Bytes != 300 {
			t.Errorf("handle %d: usage %+v after racing puts of the same bytes", i, u)
		}
		if !bytes.Equal(readAll(t, s, "same", mediaID(same)), same) {
			t.Errorf("handle %d reads other bytes", i)
		}
	}
}

func bytesContain(s, sub string) bool { return bytes.Contains([]byte(s), []byte(sub)) }
