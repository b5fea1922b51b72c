package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// RateSweep deletes exactly the buckets that are full again, and a swept
// bucket answers RateTake as the kept one would have: before the sweep's
// time a half-empty bucket stays (its next take is still refused), after
// it every bucket is gone, and a bucket taken from again starts full.
func (su suite) testRateSweep(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	take := func(key string, rate float64, burst int, at time.Time) bool {
		t.Helper()
		ok, _, err := s.RateTake(ctx, key, rate, burst, at)
		if err != nil {
			t.Fatalf("RateTake %s: %v", key, err)
		}
		return ok
	}
	// 20 buckets of one token a second, burst 2, each emptied at now:
	// full again two seconds later.
	for i := range 20 {
		key := fmt.Sprintf("addr:%d", i)
		take(key, 1, 2, now)
		take(key, 1, 2, now)
	}
	// A slow bucket: one token an hour, emptied: full an hour on.
	take("webhook:replay", 1.0/3600, 1, now)

	sweep := func(at time.Time) int64 {
		t.Helper()
		n, err := s.RateSweep(ctx, at)
		if err != nil {
			t.Fatalf("RateSweep: %v", err)
		}
		return n
	}
	if n := sweep(now.Add(time.Second)); n != 0 {
		t.Errorf("a sweep a second on deleted %d buckets; none is full yet", n)
	}
	if first, second := take("addr:0", 1, 2, now.Add(time.Second)), take("addr:0", 1, 2, now.Add(time.Second)); !first || second {
		t.Errorf("a kept bucket lost its state: a second on, took %v then %v; want one token, then none", first, second)
	}
	if n := sweep(now.Add(3 * time.Second)); n != 19 {
		t.Errorf("a sweep 3 s on deleted %d buckets; want the 19 full ones (addr:0, taken a second on, is full only at 3 s)", n)
	}
	if take("webhook:replay", 1.0/3600, 1, now.Add(time.Minute)) {
		t.Errorf("the replay bucket was swept before it was full: a replay within the hour was taken")
	}
	if n := sweep(now.Add(59 * time.Minute)); n != 1 {
		t.Errorf("a sweep before the slow bucket is full deleted %d buckets; want 1 (addr:0, full 3 s on)", n)
	}
	if n := sweep(now.Add(3 * time.Hour)); n != 1 {
		t.Errorf("a sweep hours on deleted %d buckets; want the slow one", n)
	}
	// A swept bucket starts full, as a kept full one would.
	var got []bool
	for range 3 {
		got = append(got, take("addr:5", 1, 2, now.Add(3*time.Hour)))
	}
	if !got[0] || !got[1] || got[2] {
		t.Errorf("a swept bucket took %v; want its burst of two, then none", got)
	}
}
