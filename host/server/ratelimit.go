package server

import (
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
