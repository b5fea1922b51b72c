package server

import (
	"context"
	"math"
	"sync"
	"time"
)

// limiter is a set of token buckets, one per key (an API key id, an
// organization): each holds up to burst tokens and refills at rate per
// second. A request takes one token; without one it is refused with the
// time until the next token, which becomes the Retry-After header.
type limiter struct {
	rate  float64
	burst float64
	mu    sync.Mutex
	b     map[string]*tokens
}

type tokens struct {
	n    float64
	last time.Time
}

func newLimiter(rate float64, burst int) *limiter {
	return &limiter{rate: rate, burst: float64(burst), b: map[string]*tokens{}}
}

// take takes a token for key at now. When none is left it returns false
// and how long until one is.
func (l *limiter) take(key string, now time.Time) (bool, time.Duration) {
	if l == nil || l.rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.b[key]
	if !ok {
		if len(l.b) > 100_000 {
			l.sweep(now)
		}
		t = &tokens{n: l.burst, last: now}
		l.b[key] = t
	}
	t.n = math.Min(l.burst, t.n+now.Sub(t.last).Seconds()*l.rate)
	t.last = now
	if t.n < 1 {
		return false, time.Duration((1 - t.n) / l.rate * float64(time.Second))
	}
	t.n--
	return true, 0
}

// give returns a token taken by a request that was then refused for
// another reason, so that a refusal by the organization's bucket does not
// also cost the key's.
func (l *limiter) give(key string) {
	if l == nil || l.rate <= 0 {
		return
	}
	l.mu.Lock()
	if t, ok := l.b[key]; ok {
		t.n = math.Min(l.burst, t.n+1)
	}
	l.mu.Unlock()
}

// sweep drops buckets that have refilled completely: they are the same as
// absent ones.
func (l *limiter) sweep(now time.Time) {
	for k, t := range l.b {
		if t.n+now.Sub(t.last).Seconds()*l.rate >= l.burst {
			delete(l.b, k)
		}
	}
}

// rateTaker is a token bucket shared by every replica: store.RateTake.
type rateTaker interface {
	RateTake(ctx context.Context, key string, rate float64, burst int, now time.Time) (bool, time.Duration, error)
}

// rateLimit is one rate of the server (per API key, per organization,
// Piston's): the local buckets of this process and, when the store is
// shared by several replicas (PostgreSQL), the buckets in the database,
// which are authoritative.
//
// RATIONALE: with replicas, a limit held per process would let N replicas
// admit N times the rate, so the database's bucket decides (one atomic
// statement per take). The local bucket in front costs nothing and spares
// the database a flood: it is refilled like the shared one and charged
// only for what the shared one admitted (a shared refusal gives the local
// token back), so it holds at least as many tokens as the shared bucket
// and refuses only what the shared one would refuse too. On SQLite one
// process owns the file, so the local bucket alone is the whole truth and
// every request is spared a write transaction (see the report of
// BenchmarkRateTake).
type rateLimit struct {
	local  *limiter
	shared rateTaker // nil: local only
	prefix string    // of the shared bucket's key: "key:", "org:", "piston:"
}

func newRateLimit(rate float64, burst int, shared rateTaker, prefix string) *rateLimit {
	return &rateLimit{local: newLimiter(rate, burst), shared: shared, prefix: prefix}
}

// take takes a token for key at now; without one it returns false and
// how long until one is. An error is the shared bucket's store failing:
// the request is refused (the limit is not waived because the database is
// away).
func (r *rateLimit) take(ctx context.Context, key string, now time.Time) (bool, time.Duration, error) {
	ok, wait := r.local.take(key, now)
	if !ok || r.shared == nil || r.local.rate <= 0 {
		return ok, wait, nil
	}
	ok, wait, err := r.shared.RateTake(ctx, r.prefix+key, r.local.rate, int(r.local.burst), now)
	if err != nil || !ok {
		r.local.give(key)
	}
	return ok, wait, err
}

// give returns a token taken from the local bucket by a request that was
// then refused for another reason. The shared bucket keeps its token: a
// database bucket has no give-back, so a key refused by its
// organization's rate is charged too (it could not have run anyway).
func (r *rateLimit) give(key string) { r.local.give(key) }
