// Package pool is the one last-in, first-out pool of idle things moat keeps
// warm between calls: a module's wazero instances (host), an Extism
// plug-in's instances (host/extism) and a native plugin's workers
// (host/native).
//
// It was written three times before, each with its own lock and its own
// idea of "full" and "closed"; a fix to one (an instance returned after
// Close, say) did not reach the others. What differs between the three
// stays with them: whether a thing may be reused (its memory grew past the
// call's limit, its worker restarts) is decided by the caller, around Get
// and Put.
//
// LIFO, because the most recently used instance is the one whose memory
// and machine code are still in the CPU's caches.
package pool

import "sync"

// LIFO holds idle values, the last put first out. The zero value is an
// open, unbounded pool; a nil *LIFO an empty, closed one (for an owner
// that pools nothing, like a native plugin's module, whose workers are
// pooled by host/native). It is safe for concurrent use; its lock is taken
// only for the slice operations, never around a caller's code, so a
// caller may hold its own lock while it calls LIFO's methods.
type LIFO[T any] struct {
	mu     sync.Mutex
	items  []T
	max    int // 0: unbounded
	closed bool
}

// New returns a pool that keeps at most max idle values; max <= 0 keeps
// any number.
func New[T any](max int) *LIFO[T] {
	return &LIFO[T]{max: max}
}

// Get takes the value put last. ok is false when the pool is empty.
func (p *LIFO[T]) Get() (v T, ok bool) {
	return p.GetPreferred(nil)
}

// GetPreferred takes the value put last among those prefer accepts, or,
// when prefer accepts none (or is nil), the value put last. A native
// plugin prefers a worker that is up to one that restarts.
func (p *LIFO[T]) GetPreferred(prefer func(T) bool) (v T, ok bool) {
	if p == nil {
		return v, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.items)
	if n == 0 {
		return v, false
	}
	i := n - 1
	if prefer != nil {
		for j := n - 1; j >= 0; j-- {
			if prefer(p.items[j]) {
				i = j
				break
			}
		}
	}
	v = p.items[i]
	copy(p.items[i:], p.items[i+1:])
	var zero T
	p.items[n-1] = zero // no reference kept to a value handed out
	p.items = p.items[:n-1]
	return v, true
}

// Put keeps v for a later Get. It reports false, and keeps nothing, when
// the pool is full or closed: the caller then discards v itself.
func (p *LIFO[T]) Put(v T) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.max > 0 && len(p.items) >= p.max {
		return false
	}
	p.items = append(p.items, v)
	return true
}

// Len is the number of idle values.
func (p *LIFO[T]) Len() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.items)
}

// Each calls f for every idle value, the pool locked: f must not call the
// pool's methods.
func (p *LIFO[T]) Each(f func(T)) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.items {
		f(v)
	}
}

// Drain takes every idle value, leaving the pool empty and open. The
// caller discards them.
func (p *LIFO[T]) Drain() []T {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	items := p.items
	p.items = nil
	return items
}

// Close takes every idle value and refuses every later Put: values in use
// when the pool closed are discarded by their callers when they come back.
// It returns the idle values for the caller to discard; closing a closed
// pool returns none.
func (p *LIFO[T]) Close() []T {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	items := p.items
	p.items, p.closed = nil, true
	return items
}

// Closed reports whether Close was called.
func (p *LIFO[T]) Closed() bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}
