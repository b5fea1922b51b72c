package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

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

func (su suite) testKVRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)

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

func (su suite) testKVListPrefix(t *testing.T) {
	s := su.open(t)
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

func (su suite) testKVListPagination(t *testing.T) {
	s := su.open(t)
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

func (su suite) testKVListLimitDefaultAndCap(t *testing.T) {
	s := su.open(t)
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

func (su suite) testScopeIsolation(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)

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

func (su suite) testValidation(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
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

func (su suite) testConcurrentPuts(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
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

func (su suite) testCanceledContext(t *testing.T) {
	s := su.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.KVPut(ctx, scA, "k", []byte("v"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("KVPut with canceled ctx = %v, want context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "kv.put") || !strings.Contains(err.Error(), scA.Org) {
		t.Errorf("error %q does not name the operation and scope", err)
	}
	// A read is refused too, though SQLite's runs without the caller's
	// cancellation once begun (sqlite.DB.KVGet).
	if _, _, err := s.KVGet(ctx, scA, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("KVGet with canceled ctx = %v, want context.Canceled", err)
	}
}

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

func (su suite) testKVQuota(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
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

func (su suite) testKVQuotaConcurrent(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
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
