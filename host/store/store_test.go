package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

func open(t *testing.T, dir string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(t *testing.T, s *store.Store, sc store.Scope, key, value string) {
	t.Helper()
	if err := s.KVPut(context.Background(), sc, key, []byte(value)); err != nil {
		t.Fatalf("KVPut(%v, %q): %v", sc, key, err)
	}
}

func list(t *testing.T, s *store.Store, sc store.Scope, prefix, after string, limit int) ([]string, bool) {
	t.Helper()
	keys, more, err := s.KVList(context.Background(), sc, prefix, after, limit)
	if err != nil {
		t.Fatalf("KVList(%v, %q, %q, %d): %v", sc, prefix, after, limit, err)
	}
	return keys, more
}

var scA = store.Scope{Org: "org-a", Module: "mod"}

func TestOpenLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "state")
	s := open(t, dir)
	if want := filepath.Join(dir, store.FileName); s.Path() != want {
		t.Errorf("Path() = %q, want %q", s.Path(), want)
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o700 {
			t.Errorf("dir mode = %o, want 700", got)
		}
		fi, err = os.Stat(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got&0o077 != 0 {
			t.Errorf("file mode = %o, want no group or other access", got)
		}
	}

	// The pragmas Open promises, as seen by a separate connection.
	db, err := sql.Open("sqlite", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	var version int
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 1 {
		t.Errorf("user_version = %d, want >= 1 after migrations", version)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := store.Open(ctx, ""); err == nil {
		t.Error("Open(\"\") succeeded, want error")
	}

	// dir is a regular file: the error names the path.
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(ctx, file)
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("Open(file) error = %v, want an error naming %s", err, file)
	}

	// A file from a newer moat (unknown schema version) is refused.
	dir := t.TempDir()
	s := open(t, dir)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 9999"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = store.Open(ctx, dir)
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open(newer schema) error = %v, want a refusal", err)
	}
}

func TestKVRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())

	if v, found, err := s.KVGet(ctx, scA, "missing"); err != nil || found || v != nil {
		t.Fatalf("KVGet(missing) = %q, %v, %v; want nil, false, nil", v, found, err)
	}

	tests := []struct {
		name  string
		key   string
		value []byte
	}{
		{"plain", "greeting", []byte("hello")},
		{"binary value", "bin", []byte{0, 0xFF, 0, 1}},
		{"empty value", "empty", []byte{}},
		{"nil value", "nil", nil},
		{"unicode key", "ключ/ü/🔑", []byte("x")},
		{"wildcard key", "%_%", []byte("y")},
		{"max key", strings.Repeat("k", abi.MaxKVKeyLen), []byte("z")},
		{"max value", "big", bytes.Repeat([]byte{7}, abi.MaxKVValueLen)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.KVPut(ctx, scA, tt.key, tt.value); err != nil {
				t.Fatalf("KVPut: %v", err)
			}
			v, found, err := s.KVGet(ctx, scA, tt.key)
			if err != nil || !found {
				t.Fatalf("KVGet = _, %v, %v; want found", found, err)
			}
			if v == nil {
				t.Fatal("KVGet returned a nil slice for a stored value")
			}
			if !bytes.Equal(v, tt.value) {
				t.Fatalf("KVGet = %d bytes, want %d", len(v), len(tt.value))
			}

			// Overwrite.
			if err := s.KVPut(ctx, scA, tt.key, []byte("second")); err != nil {
				t.Fatalf("KVPut again: %v", err)
			}
			if v, _, _ := s.KVGet(ctx, scA, tt.key); string(v) != "second" {
				t.Fatalf("after overwrite KVGet = %q, want second", v)
			}

			deleted, err := s.KVDelete(ctx, scA, tt.key)
			if err != nil || !deleted {
				t.Fatalf("KVDelete = %v, %v; want true, nil", deleted, err)
			}
			if _, found, err := s.KVGet(ctx, scA, tt.key); err != nil || found {
				t.Fatalf("KVGet after delete: found=%v err=%v", found, err)
			}
			deleted, err = s.KVDelete(ctx, scA, tt.key)
			if err != nil || deleted {
				t.Fatalf("second KVDelete = %v, %v; want false, nil", deleted, err)
			}
		})
	}
}

// The keys TestKVListPrefix stores: wildcards of LIKE, a key equal to
// prefixes under test, multi-byte UTF-8 whose bytes are 0xC3.., 0xF4 0x8F
// 0xBF 0xBF (the last code point) and so on.
var prefixKeys = []string{
	"%", "%%", "%a", "_", "__", "_a",
	"a", "a%", "a%b", "a_", "a_b", "aXb", "ab", "abc", "a\\b", "a\\%",
	"b", "é", "éa", "ê",
	"\U0010FFFF", "\U0010FFFFa", "\U0010FFFF\U0010FFFF", "\U0010FFFE",
	"z",
}

func TestKVListPrefix(t *testing.T) {
	s := open(t, t.TempDir())
	for _, k := range prefixKeys {
		put(t, s, scA, k, "v")
	}
	sorted := slices.Clone(prefixKeys)
	slices.Sort(sorted) // Go compares strings bytewise

	tests := []struct {
		prefix string
		want   []string
	}{
		{"", sorted},
		{"%", []string{"%", "%%", "%a"}},
		{"_", []string{"_", "__", "_a"}},
		{"a%", []string{"a%", "a%b"}},
		{"a_", []string{"a_", "a_b"}},
		{"a\\", []string{"a\\%", "a\\b"}},
		{"a", []string{"a", "a%", "a%b", "aXb", "a\\%", "a\\b", "a_", "a_b", "ab", "abc"}},
		{"ab", []string{"ab", "abc"}},
		{"abc", []string{"abc"}},
		{"abcd", nil},
		{"é", []string{"é", "éa"}},
		{"\xc3", []string{"é", "éa", "ê"}}, // a byte prefix of a character
		{"\U0010FFFF", []string{"\U0010FFFF", "\U0010FFFFa", "\U0010FFFF\U0010FFFF"}},
		{"\xf4\x8f\xbf", []string{"\U0010FFFE", "\U0010FFFF", "\U0010FFFFa", "\U0010FFFF\U0010FFFF"}},
		{"\xff", nil},
		{"\xff\xff\xff", nil},
		{"a\xff", nil},
		{"zz", nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.prefix), func(t *testing.T) {
			// The hand-written answer agrees with the definition.
			var ref []string
			for _, k := range sorted {
				if strings.HasPrefix(k, tt.prefix) {
					ref = append(ref, k)
				}
			}
			if !slices.Equal(ref, tt.want) {
				t.Fatalf("test table is wrong: want %q, definition gives %q", tt.want, ref)
			}
			got, more := list(t, s, scA, tt.prefix, "", 0)
			if more {
				t.Error("more = true, want false")
			}
			if len(got) != len(tt.want) || (len(got) > 0 && !slices.Equal(got, tt.want)) {
				t.Errorf("KVList(%q) = %q, want %q", tt.prefix, got, tt.want)
			}
		})
	}
}

func TestKVListPagination(t *testing.T) {
	s := open(t, t.TempDir())
	var all []string
	for i := range 25 {
		k := fmt.Sprintf("item/%02d", i)
		all = append(all, k)
		put(t, s, scA, k, "v")
	}
	put(t, s, scA, "item", "the prefix itself")
	put(t, s, scA, "other/1", "v")
	all = append([]string{"item"}, all...)

	// Walk the prefix in pages of 7.
	var got []string
	after, pages := "", 0
	for {
		keys, more := list(t, s, scA, "item", after, 7)
		pages++
		if len(keys) > 7 {
			t.Fatalf("page %d has %d keys, limit 7", pages, len(keys))
		}
		got = append(got, keys...)
		if !more {
			break
		}
		if len(keys) == 0 {
			t.Fatal("more=true with an empty page")
		}
		after = keys[len(keys)-1]
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
	}
	if !slices.Equal(got, all) {
		t.Fatalf("paged keys = %q\nwant %q", got, all)
	}
	if pages != 4 { // 26 keys: 7+7+7+5
		t.Errorf("pages = %d, want 4", pages)
	}

	tests := []struct {
		name          string
		prefix, after string
		limit         int
		want          []string
		more          bool
	}{
		{"exact fit", "item/", "item/19", 5, []string{"item/20", "item/21", "item/22", "item/23", "item/24"}, false},
		{"one short", "item/", "item/19", 4, []string{"item/20", "item/21", "item/22", "item/23"}, true},
		{"after sorts before prefix", "item/", "a", 2, []string{"item/00", "item/01"}, true},
		{"after is the prefix", "item", "item", 1, []string{"item/00"}, true},
		{"after past the prefix", "item", "item0", 10, nil, false},
		{"after is last key", "", "other/1", 10, nil, false},
		{"after is not a key", "item/", "item/055", 3, []string{"item/06", "item/07", "item/08"}, true},
		{"no prefix", "", "item/23", 2, []string{"item/24", "other/1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, more := list(t, s, scA, tt.prefix, tt.after, tt.limit)
			if len(keys) != len(tt.want) || (len(keys) > 0 && !slices.Equal(keys, tt.want)) || more != tt.more {
				t.Errorf("KVList(%q, after %q, %d) = %q, more=%v; want %q, more=%v",
					tt.prefix, tt.after, tt.limit, keys, more, tt.want, tt.more)
			}
		})
	}
}

func TestKVListLimitDefaultAndCap(t *testing.T) {
	s := open(t, t.TempDir())
	n := abi.MaxKVListLimit + 5
	for i := range n {
		put(t, s, scA, fmt.Sprintf("k%05d", i), "")
	}
	for _, limit := range []int{0, -1, abi.MaxKVListLimit + 1, 1 << 30} {
		keys, more := list(t, s, scA, "", "", limit)
		if len(keys) != abi.MaxKVListLimit || !more {
			t.Errorf("limit %d: %d keys, more=%v; want %d, true", limit, len(keys), more, abi.MaxKVListLimit)
		}
	}
	keys, more := list(t, s, scA, "", fmt.Sprintf("k%05d", abi.MaxKVListLimit-1), 0)
	if len(keys) != 5 || more {
		t.Errorf("last page: %d keys, more=%v; want 5, false", len(keys), more)
	}
}

func TestScopeIsolation(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())

	owner := store.Scope{Org: "acme", Module: "billing"}
	others := []struct {
		name string
		sc   store.Scope
	}{
		{"other org, same module", store.Scope{Org: "globex", Module: "billing"}},
		{"same org, other module", store.Scope{Org: "acme", Module: "shipping"}},
		{"org and module swapped", store.Scope{Org: "billing", Module: "acme"}},
		{"org is a prefix", store.Scope{Org: "acm", Module: "billing"}},
	}
	put(t, s, owner, "secret", "owner's")
	put(t, s, owner, "secret/2", "owner's")

	for _, o := range others {
		t.Run(o.name, func(t *testing.T) {
			if _, found, err := s.KVGet(ctx, o.sc, "secret"); err != nil || found {
				t.Errorf("KVGet sees the owner's key: found=%v err=%v", found, err)
			}
			if keys, _ := list(t, s, o.sc, "", "", 0); len(keys) != 0 {
				t.Errorf("KVList sees the owner's keys: %q", keys)
			}
			if deleted, err := s.KVDelete(ctx, o.sc, "secret"); err != nil || deleted {
				t.Errorf("KVDelete reached the owner's key: deleted=%v err=%v", deleted, err)
			}
			// Writing the same key in the other scope leaves the owner's alone.
			put(t, s, o.sc, "secret", "intruder's")
			if v, _, _ := s.KVGet(ctx, o.sc, "secret"); string(v) != "intruder's" {
				t.Errorf("other scope reads %q, want its own value", v)
			}
			if v, found, err := s.KVGet(ctx, owner, "secret"); err != nil || !found || string(v) != "owner's" {
				t.Errorf("owner reads %q, %v, %v; want its own value", v, found, err)
			}
			if keys, _ := list(t, s, o.sc, "", "", 0); !slices.Equal(keys, []string{"secret"}) {
				t.Errorf("other scope lists %q, want only its own key", keys)
			}
		})
	}
	if keys, _ := list(t, s, owner, "", "", 0); !slices.Equal(keys, []string{"secret", "secret/2"}) {
		t.Errorf("owner lists %q", keys)
	}
}

func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, scA, "kept", "across restarts")
	put(t, s, scA, "gone", "deleted before close")
	if _, err := s.KVDelete(ctx, scA, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, _, err := s.KVGet(ctx, scA, "kept"); err == nil {
		t.Error("KVGet after Close succeeded, want error")
	}

	for range 2 { // twice: migrations must not re-run on an up-to-date file
		s2 := open(t, dir)
		v, found, err := s2.KVGet(ctx, scA, "kept")
		if err != nil || !found || string(v) != "across restarts" {
			t.Fatalf("after reopen KVGet = %q, %v, %v", v, found, err)
		}
		if keys, _ := list(t, s2, scA, "", "", 0); !slices.Equal(keys, []string{"kept"}) {
			t.Fatalf("after reopen KVList = %q", keys)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestValidation(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	long := strings.Repeat("k", abi.MaxKVKeyLen+1)
	big := make([]byte, abi.MaxKVValueLen+1)

	type call func(sc store.Scope, key string, value []byte) error
	calls := map[string]call{
		"get": func(sc store.Scope, key string, _ []byte) error {
			_, _, err := s.KVGet(ctx, sc, key)
			return err
		},
		"put": func(sc store.Scope, key string, value []byte) error {
			return s.KVPut(ctx, sc, key, value)
		},
		"delete": func(sc store.Scope, key string, _ []byte) error {
			_, err := s.KVDelete(ctx, sc, key)
			return err
		},
		"list": func(sc store.Scope, key string, _ []byte) error {
			_, _, err := s.KVList(ctx, sc, key, "", 0)
			return err
		},
	}
	tests := []struct {
		name  string
		ops   []string // the calls the input is bad for
		sc    store.Scope
		key   string
		value []byte
		code  abi.Code
		field string // the message names the field
	}{
		{"empty org", []string{"get", "put", "delete", "list"}, store.Scope{Module: "m"}, "k", nil, abi.CodeInvalidArgument, "org"},
		{"empty module", []string{"get", "put", "delete", "list"}, store.Scope{Org: "o"}, "k", nil, abi.CodeInvalidArgument, "module"},
		{"empty scope", []string{"get", "put", "delete", "list"}, store.Scope{}, "k", nil, abi.CodeInvalidArgument, "org"},
		{"empty key", []string{"get", "put", "delete"}, scA, "", nil, abi.CodeInvalidArgument, "key"},
		{"key too long", []string{"get", "put", "delete"}, scA, long, nil, abi.CodeTooLarge, "key"},
		{"key not UTF-8", []string{"get", "put", "delete"}, scA, "bad\xffkey", nil, abi.CodeInvalidArgument, "key"},
		{"key truncated UTF-8", []string{"get", "put", "delete"}, scA, "\xc3", nil, abi.CodeInvalidArgument, "key"},
		{"key with NUL", []string{"get", "put", "delete"}, scA, "a\x00b", nil, abi.CodeInvalidArgument, "key"},
		{"value too large", []string{"put"}, scA, "k", big, abi.CodeTooLarge, "value"},
	}
	for _, tt := range tests {
		for _, op := range tt.ops {
			t.Run(tt.name+"/"+op, func(t *testing.T) {
				err := calls[op](tt.sc, tt.key, tt.value)
				var ae *abi.Error
				if !errors.As(err, &ae) {
					t.Fatalf("error = %v (%T), want *abi.Error", err, err)
				}
				if ae.Code != tt.code {
					t.Errorf("code = %q, want %q (%v)", ae.Code, tt.code, ae)
				}
				if !strings.Contains(ae.Message, tt.field) {
					t.Errorf("message %q does not name %q", ae.Message, tt.field)
				}
			})
		}
	}
	// Nothing bad was written.
	if keys, _ := list(t, s, scA, "", "", 0); len(keys) != 0 {
		t.Errorf("store holds %q after rejected calls", keys)
	}
}

func TestConcurrentPuts(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	const writers, perWriter = 8, 50

	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter*2)
	for w := range writers {
		sc := store.Scope{Org: fmt.Sprintf("org-%d", w%2), Module: "mod"}
		wg.Go(func() {
			for i := range perWriter {
				key := fmt.Sprintf("w%d/%03d", w, i)
				if err := s.KVPut(ctx, sc, key, []byte(key)); err != nil {
					errs <- err
				}
				// Everyone also hammers one shared key.
				if err := s.KVPut(ctx, sc, "shared", []byte(key)); err != nil {
					errs <- err
				}
			}
		})
		// Readers run alongside the writers.
		wg.Go(func() {
			for range perWriter {
				if _, _, err := s.KVGet(ctx, sc, "shared"); err != nil {
					errs <- err
				}
				if _, _, err := s.KVList(ctx, sc, "w", "", 20); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	for org := range 2 {
		sc := store.Scope{Org: fmt.Sprintf("org-%d", org), Module: "mod"}
		keys, _ := list(t, s, sc, "w", "", 0)
		if want := writers / 2 * perWriter; len(keys) != want {
			t.Errorf("%s holds %d keys, want %d", sc.Org, len(keys), want)
		}
		for _, k := range keys {
			v, found, err := s.KVGet(ctx, sc, k)
			if err != nil || !found || string(v) != k {
				t.Fatalf("KVGet(%q) = %q, %v, %v", k, v, found, err)
			}
		}
	}
}

func TestCanceledContext(t *testing.T) {
	s := open(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.KVPut(ctx, scA, "k", []byte("v"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("KVPut with canceled ctx = %v, want context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "kv.put") || !strings.Contains(err.Error(), scA.Org) {
		t.Errorf("error %q does not name the operation and scope", err)
	}
}
