package store

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// MaxRateKeyLen bounds the key of a rate bucket.
const MaxRateKeyLen = 256

// maxRateBurst bounds a bucket's burst: beyond it the float arithmetic
// of the bucket would lose single tokens.
const maxRateBurst = 1 << 40

// RateTake takes one token from the token bucket key at time now: the
// bucket holds at most burst tokens, starts full, and gains rate tokens
// per second. ok reports whether a token was there to take; when not,
// retryAfter is how long until one will be. The bucket lives in the
// database and is updated by one atomic statement, so a limit holds
// across every process and replica sharing the store (per API key, per
// organization: the key says which, e.g. "org:acme"). A clock that goes
// back refills nothing.
//
// A key is 1 to 256 bytes of UTF-8 without NUL; rate must be positive and
// finite, burst at least 1: anything else is an *abi.Error of
// abi.CodeInvalidArgument.
func (s *Store) RateTake(ctx context.Context, key string, rate float64, burst int, now time.Time) (ok bool, retryAfter time.Duration, err error) {
	switch {
	case key == "" || len(key) > MaxRateKeyLen || !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0:
		return false, 0, abi.Errorf(abi.CodeInvalidArgument, "rate take: key %q must be 1 to %d bytes of UTF-8 without NUL", key, MaxRateKeyLen)
	case !(rate > 0) || math.IsInf(rate, 0):
		return false, 0, abi.Errorf(abi.CodeInvalidArgument, "rate take %s: rate %v is not a positive number of tokens per second", key, rate)
	case burst < 1 || burst > maxRateBurst:
		return false, 0, abi.Errorf(abi.CodeInvalidArgument, "rate take %s: burst %d is not between 1 and %d", key, burst, maxRateBurst)
	}
	at, okAt := nanos(now)
	if !okAt {
		return false, 0, abi.Errorf(abi.CodeInvalidArgument, "rate take %s: time %s is out of range", key, now)
	}
	ok, tokens, err := s.b.RateTake(ctx, key, rate, burst, at)
	if err != nil {
		return false, 0, fmt.Errorf("store: rate.take %s: %w", key, err)
	}
	if ok {
		return true, 0, nil
	}
	wait := (1 - tokens) / rate * float64(time.Second)
	return false, time.Duration(math.Ceil(max(wait, 1))), nil
}

// RateSweepBatch is the most buckets one statement of RateSweep deletes.
const RateSweepBatch = 5000

// RateSweep deletes the token buckets that are full again at now, in
// batches of RateSweepBatch, and returns how many it deleted. A full
// bucket and no bucket are the same to RateTake, so a sweep changes no
// decision: it keeps the table to the buckets in use (per-address buckets
// of public routes, webhook deliveries' replay keys) instead of one row
// for every key ever taken. A backend without driver.RateSweeper keeps
// its buckets (0, nil). ctx ends it between batches.
func (s *Store) RateSweep(ctx context.Context, now time.Time) (int64, error) {
	rs, ok := s.b.(driver.RateSweeper)
	if !ok {
		return 0, nil
	}
	at, okAt := nanos(now)
	if !okAt {
		return 0, abi.Errorf(abi.CodeInvalidArgument, "rate sweep: time %s is out of range", now)
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := rs.RateSweep(ctx, at, RateSweepBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("store: rate sweep: %w", err)
		}
		if n < RateSweepBatch {
			return total, nil
		}
	}
}
