package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// usageByHand sums len(key)+len(value) over sc through the public API.
func usageByHand(t *testing.T, s *store.Store, sc store.Scope) int64 {
	t.Helper()
	var n int64
	keys, _ := list(t, s, sc, "", "", 0)
	for _, k := range keys {
		v, _, err := s.KVGet(context.Background(), sc, k)
		if err != nil {
			t.Fatal(err)
		}
		n += int64(len(k) + len(v))
	}
	return n
}

func usage(t *testing.T, s *store.Store, sc store.Scope) int64 {
	t.Helper()
	n, err := s.KVUsage(context.Background(), sc)
	if err != nil {
		t.Fatalf("KVUsage(%v): %v", sc, err)
	}
	if byHand := usageByHand(t, s, sc); n != byHand {
		t.Fatalf("KVUsage(%v) = %d, but the keys and values add up to %d", sc, n, byHand)
	}
	return n
}

func TestKVQuota(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	sc := store.Scope{Org: "acme", Module: "billing"}
	other := store.Scope{Org: "acme", Module: "shipping"}
	const quota = 100

	if n := usage(t, s, sc); n != 0 {
		t.Fatalf("usage of an empty scope = %d", n)
	}
	val := func(n int) []byte { return []byte(strings.Repeat("v", n)) }
	steps := []struct {
		name  string
		sc    store.Scope
		key   string
		value []byte
		quota int64
		fails bool
		usage int64 // of sc afterwards
	}{
		{"first", sc, "a", val(39), quota, false, 40},
		{"second", sc, "b", val(39), quota, false, 80},
		// "ключ" is 8 bytes in UTF-8 (4 characters): bytes are counted.
		{"exactly to the quota", sc, "ключ", val(12), quota, false, 100},
		{"one byte over", sc, "c", []byte{}, quota, true, 100},
		{"replace with a larger value", sc, "a", val(40), quota, true, 100},
		{"replace with the same size", sc, "a", val(39), quota, false, 100},
		{"replace with a smaller value frees space", sc, "a", val(9), quota, false, 70},
		{"freed space is usable", sc, "c", val(29), quota, false, 100},
		{"other scope has its own quota", other, "a", val(99), quota, false, 100},
		{"other scope is full too", other, "b", nil, quota, true, 100},
		{"no quota", sc, "big", val(500), 0, false, 603},
		{"negative quota is no quota", sc, "big2", val(1), -1, false, 608},
		{"over a lowered quota, growth fails", sc, "a", val(10), 500, true, 608},
		{"over a lowered quota, shrinking works", sc, "big", val(400), 500, false, 508},
	}
	for _, st := range steps {
		err := s.KVPutWithin(ctx, st.sc, st.key, st.value, st.quota)
		if st.fails {
			var ae *abi.Error
			if !errors.As(err, &ae) || ae.Code != abi.CodeTooLarge {
				t.Fatalf("%s: error = %v, want *abi.Error %s", st.name, err, abi.CodeTooLarge)
			}
			for _, want := range []string{"kv.put", "quota", fmt.Sprint(st.quota), st.sc.Module, st.sc.Org, "in use"} {
				if !strings.Contains(ae.Message, want) {
					t.Errorf("%s: message %q does not say %q", st.name, ae.Message, want)
				}
			}
		} else if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if n := usage(t, s, sc); n != st.usage {
			t.Fatalf("%s: usage = %d, want %d", st.name, n, st.usage)
		}
	}
	if n := usage(t, s, other); n != 100 {
		t.Errorf("other scope usage = %d, want 100", n)
	}
	// A delete frees its key and value.
	if deleted, err := s.KVDelete(ctx, sc, "big"); err != nil || !deleted {
		t.Fatalf("KVDelete(big) = %v, %v", deleted, err)
	}
	if n := usage(t, s, sc); n != 105 {
		t.Errorf("usage after deleting big = %d, want 105", n)
	}

	// The exact message of the spec.
	sc2 := store.Scope{Org: "O", Module: "M"}
	if err := s.KVPutWithin(ctx, sc2, "k", val(1048000-1), 1048576); err != nil {
		t.Fatal(err)
	}
	err := s.KVPutWithin(ctx, sc2, "k2", val(1200-2), 1048576)
	want := "kv.put: the disk quota of 1048576 bytes for module M in org O would be exceeded (in use 1048000, this put adds 1200)"
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Message != want {
		t.Errorf("error = %v\nwant message %q", err, want)
	}

	// Validation still applies.
	if err := s.KVPutWithin(ctx, store.Scope{Org: "acme"}, "k", nil, quota); err == nil {
		t.Error("KVPutWithin with an empty module succeeded")
	}
	if _, err := s.KVUsage(ctx, store.Scope{Module: "m"}); err == nil {
		t.Error("KVUsage with an empty org succeeded")
	}
}

func TestKVQuotaConcurrent(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	sc := store.Scope{Org: "acme", Module: "billing"}
	other := store.Scope{Org: "acme", Module: "other"}
	const (
		quota   = 1000
		writers = 40
		size    = 100 // key (3 bytes) plus value: exactly 10 fit
	)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok      int
		unknown []error
	)
	for i := range writers {
		wg.Go(func() {
			key := fmt.Sprintf("k%02d", i)
			err := s.KVPutWithin(ctx, sc, key, make([]byte, size-len(key)), quota)
			var ae *abi.Error
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case !errors.As(err, &ae) || ae.Code != abi.CodeTooLarge:
				unknown = append(unknown, err)
			}
		})
		// Unlimited writes to another scope run alongside.
		wg.Go(func() {
			if err := s.KVPutWithin(ctx, other, fmt.Sprintf("o%02d", i), make([]byte, 500), 0); err != nil {
				mu.Lock()
				unknown = append(unknown, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range unknown {
		t.Error(err)
	}
	if ok != quota/size {
		t.Errorf("%d puts succeeded, want %d", ok, quota/size)
	}
	if n := usage(t, s, sc); n != quota {
		t.Errorf("usage = %d, want exactly the quota %d", n, quota)
	}
	if n := usage(t, s, other); n != writers*(3+500) {
		t.Errorf("other scope usage = %d, want %d", n, writers*(3+500))
	}
}

// TestKVUsageMigration opens a store written before usage was kept in its
// own table: the migration must count what is already stored.
func TestKVUsageMigration(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	sc := store.Scope{Org: "acme", Module: "billing"}
	for i, v := range []string{"x", "yy", "zzz"} {
		if err := s.KVPut(ctx, sc, fmt.Sprint("k", i), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Take the file back to the schema before kv_usage (undoing the
	// migrations after it too; update this when appending one).
	db, err := sql.Open("sqlite", filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	var version int
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"DROP TRIGGER kv_usage_insert", "DROP TRIGGER kv_usage_update", "DROP TRIGGER kv_usage_delete",
		"DROP INDEX module_versions_org_time", "ALTER TABLE confirmations DROP COLUMN binding", // confirmation_binding
		"DROP TABLE kv_usage", fmt.Sprintf("PRAGMA user_version = %d", version-2),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s = open(t, dir)
	if n := usage(t, s, sc); n != 12 {
		t.Errorf("usage after the migration = %d, want 12 (three 2-byte keys, 6 bytes of values)", n)
	}
	if err := s.KVPutWithin(ctx, sc, "k3", []byte("w"), 13); err == nil {
		t.Error("a put over the quota succeeded after the migration")
	}
}
