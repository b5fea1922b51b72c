package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// Scope is who owns a row: an organization and a module name. Both must be
// non-empty. Every store method takes one and confines itself to it.
type Scope struct{ Org, Module string }

func (sc Scope) validate() error {
	if sc.Org == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "scope org is empty; every store call must name the organization that owns the data")
	}
	if sc.Module == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "scope module is empty; every kv call must name the module that owns the data")
	}
	return nil
}

// wrap names the operation and scope of a database error.
func (sc Scope) wrap(op string, err error) error {
	return fmt.Errorf("store: %s org=%q module=%q: %w", op, sc.Org, sc.Module, err)
}

func validateKey(key string) error {
	switch {
	case key == "":
		return abi.Errorf(abi.CodeInvalidArgument, "kv key is empty; use a key of 1 to %d bytes", abi.MaxKVKeyLen)
	case len(key) > abi.MaxKVKeyLen:
		return abi.Errorf(abi.CodeTooLarge, "kv key is %d bytes, over the limit of %d; use a shorter key", len(key), abi.MaxKVKeyLen)
	case !utf8.ValidString(key):
		return abi.Errorf(abi.CodeInvalidArgument, "kv key is not valid UTF-8; encode the key as UTF-8 text and keep binary data in the value")
	}
	if i := strings.IndexByte(key, 0); i >= 0 {
		return abi.Errorf(abi.CodeInvalidArgument, "kv key contains a NUL byte at offset %d; remove it from the key", i)
	}
	return nil
}

// validatePut checks a put's scope, key and value, and returns the value
// to bind: never nil, because a driver binds a nil slice as NULL.
func validatePut(sc Scope, key string, value []byte) ([]byte, error) {
	if err := sc.validate(); err != nil {
		return nil, err
	}
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if err := validateValue(value); err != nil {
		return nil, err
	}
	if value == nil {
		value = []byte{}
	}
	return value, nil
}

func validateValue(value []byte) error {
	if len(value) > abi.MaxKVValueLen {
		return abi.Errorf(abi.CodeTooLarge, "kv value is %d bytes, over the limit of %d; split it across several keys", len(value), abi.MaxKVValueLen)
	}
	return nil
}

// KVGet returns the value of key in sc. found is false, with a nil error,
// when the key does not exist. A stored empty value comes back as a
// non-nil empty slice.
func (s *Store) KVGet(ctx context.Context, sc Scope, key string) (value []byte, found bool, err error) {
	if err := sc.validate(); err != nil {
		return nil, false, err
	}
	if err := validateKey(key); err != nil {
		return nil, false, err
	}
	value, found, err = s.b.KVGet(ctx, sc.Org, sc.Module, key)
	if err != nil {
		return nil, false, sc.wrap(abi.OpKVGet, err)
	}
	if found && value == nil {
		value = []byte{}
	}
	return value, found, nil
}

// KVPut sets key in sc to value, replacing any value it had. A nil value is
// stored as an empty one.
func (s *Store) KVPut(ctx context.Context, sc Scope, key string, value []byte) (err error) {
	value, err = validatePut(sc, key, value)
	if err != nil {
		return err
	}
	at := time.Now().UnixMilli()
	if s.kw != nil {
		_, err = s.kw.write(ctx, driver.KVWrite{Org: sc.Org, Module: sc.Module, Key: key, Value: value, At: at})
	} else {
		err = s.b.KVPut(ctx, sc.Org, sc.Module, key, value, at)
	}
	if err != nil {
		return sc.wrap(abi.OpKVPut, err)
	}
	return nil
}

// KVDelete removes key from sc and reports whether it existed.
func (s *Store) KVDelete(ctx context.Context, sc Scope, key string) (deleted bool, err error) {
	if err := sc.validate(); err != nil {
		return false, err
	}
	if err := validateKey(key); err != nil {
		return false, err
	}
	if s.kw != nil {
		var w driver.KVWrite
		w, err = s.kw.write(ctx, driver.KVWrite{Org: sc.Org, Module: sc.Module, Key: key, Delete: true})
		deleted = w.Deleted
	} else {
		deleted, err = s.b.KVDelete(ctx, sc.Org, sc.Module, key)
	}
	if err != nil {
		return false, sc.wrap(abi.OpKVDelete, err)
	}
	return deleted, nil
}

// KVList returns the keys of sc that start with prefix and sort strictly
// after after, in bytewise order, at most limit of them (limit <= 0 means
// abi.MaxKVListLimit, and larger limits are capped to it). more reports
// whether further keys follow the last one returned; pass that key as after
// to continue.
//
// prefix is matched byte for byte: '%', '_' and any other byte stand for
// themselves.
func (s *Store) KVList(ctx context.Context, sc Scope, prefix, after string, limit int) (keys []string, more bool, err error) {
	if err := sc.validate(); err != nil {
		return nil, false, err
	}
	if limit <= 0 || limit > abi.MaxKVListLimit {
		limit = abi.MaxKVListLimit
	}
	// The keys with a prefix are the range [prefix, prefixEnd(prefix))
	// in bytewise order; no LIKE, so no wildcards to escape. The lower
	// bound is whichever of prefix (inclusive) and after (exclusive) is
	// tighter.
	r := driver.KeyRange{From: prefix, FromInclusive: true}
	if after >= prefix {
		r = driver.KeyRange{From: after}
	}
	r.To, r.HasTo = prefixEnd(prefix)
	keys, err = s.b.KVList(ctx, sc.Org, sc.Module, r, limit+1)
	if err != nil {
		return nil, false, sc.wrap(abi.OpKVList, err)
	}
	if len(keys) > limit {
		return keys[:limit], true, nil
	}
	return keys, false, nil
}

// prefixEnd returns the smallest string greater than every string that
// starts with prefix: prefix with trailing 0xFF bytes dropped and its last
// byte incremented. ok is false when there is no such bound (prefix is
// empty or all 0xFF), and the range is unbounded above.
func prefixEnd(prefix string) (end string, ok bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xFF {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// KVPutWithin is KVPut with a quota: the total bytes of keys plus values
// stored under sc after the put must not exceed quota (quota <= 0 means no
// quota, and KVPutWithin is KVPut). Replacing a key counts the difference
// between the old and the new value. A put that would exceed the quota is
// refused with an *abi.Error of abi.CodeTooLarge saying the quota, the
// bytes in use and what the put adds; a put that does not grow the scope
// (a same-size or smaller replacement) is always allowed, so a scope that
// is over a lowered quota can still shrink (the rule is driver.OverQuota).
// The check and the write happen in one write transaction, so concurrent
// puts cannot overshoot, from one process or several.
//
// The usage is one row of kv_usage, kept in the same transaction as every
// write, so a put costs the same however many keys the scope holds.
func (s *Store) KVPutWithin(ctx context.Context, sc Scope, key string, value []byte, quota int64) (err error) {
	if quota <= 0 {
		return s.KVPut(ctx, sc, key, value)
	}
	value, err = validatePut(sc, key, value)
	if err != nil {
		return err
	}
	var inUse, adds int64
	if at := time.Now().UnixMilli(); s.kw != nil {
		var w driver.KVWrite
		w, err = s.kw.write(ctx, driver.KVWrite{Org: sc.Org, Module: sc.Module, Key: key, Value: value, At: at, Quota: quota})
		inUse, adds = w.InUse, w.Adds
	} else {
		inUse, adds, err = s.b.KVPutWithin(ctx, sc.Org, sc.Module, key, value, at, quota)
	}
	if errors.Is(err, driver.ErrOverQuota) {
		return abi.Errorf(abi.CodeTooLarge,
			"%s: the disk quota of %d bytes for module %s in org %s would be exceeded (in use %d, this put adds %d)",
			abi.OpKVPut, quota, sc.Module, sc.Org, inUse, adds)
	}
	if err != nil {
		return sc.wrap(abi.OpKVPut, err)
	}
	return nil
}

// KVUsage returns the bytes sc stores: the sum of the lengths of its keys
// (in UTF-8 bytes) and values, the measure KVPutWithin's quota applies to.
func (s *Store) KVUsage(ctx context.Context, sc Scope) (int64, error) {
	if err := sc.validate(); err != nil {
		return 0, err
	}
	n, err := s.b.KVUsage(ctx, sc.Org, sc.Module)
	if err != nil {
		return 0, sc.wrap("kv.usage", err)
	}
	return n, nil
}
