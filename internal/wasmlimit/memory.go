package wasmlimit

import "github.com/tetratelabs/wazero/experimental"

// Allocator backs the linear memories of one instance (pass it with
// experimental.WithMemoryAllocator when instantiating) and refuses to grow
// them, together, past a limit that the host may change between
// invocations. wazero's own limit (RuntimeConfig.WithMemoryLimitPages) is
// fixed per runtime; this one is per instance and per invocation.
//
// The limit covers all the instance's memories together: an Extism
// plug-in has two (its own and the Extism kernel's, which holds the input,
// the output and every block the PDK allocates), and a limit applied to
// each would let it hold twice the limit.
//
// A refused grow makes memory.grow return -1 and is recorded (Hit): a
// guest that dies after one is reported as memory_limit rather than as
// whatever its runtime printed on the way out. A guest that survives one
// (CRuby collects garbage and carries on) has not failed; whether it did is
// the caller's to decide.
//
// An Allocator serves one instance, and an instance one call at a time, on
// one goroutine: it is not safe for concurrent use. (Shared memories, the
// threads proposal, would need a fixed buffer; moat's runtimes do not
// enable threads.)
type Allocator struct {
	limit   uint64 // bytes
	size    uint64 // bytes all the memories hold now
	peak    uint64 // the largest size granted
	hit     bool   // a grow was refused (or the initial size was over) since SetLimit
	initHit bool   // an initial size was over the limit
	// mapped: the memories are reservations of address space that a
	// file's pages can back copy-on-write (UseMapping, mapped_linux.go).
	mapped    bool
	restoring uint64 // UseMapping's: the image's bytes restored at once
	mems      []*memory
	owned     bool // KeepWhile was called: unmapping waits for the owner
}

// NewAllocator returns an Allocator with a limit of limit bytes.
func NewAllocator(limit uint64) *Allocator { return &Allocator{limit: limit} }

// SetLimit sets the limit, in bytes, for the next invocation and forgets
// that the last one hit the limit. Memory already granted is kept: a
// pooled instance grown past the new limit must be discarded by the
// caller (compare Size).
func (a *Allocator) SetLimit(limit uint64) { a.limit, a.hit = limit, false }

// Hit reports whether a grow was refused, or an initial size was over the
// limit, since the Allocator was made or SetLimit was last called.
func (a *Allocator) Hit() bool { return a.hit }

// InitialHit reports whether a memory's initial size was over the limit:
// the instance must be refused (wazero cannot take a refused initial
// allocation, so it was granted).
func (a *Allocator) InitialHit() bool { return a.initHit }

// Size is the bytes the instance's memories hold now.
func (a *Allocator) Size() uint64 { return a.size }

// Peak is the largest Size granted: a run's peak memory (a WebAssembly
// memory grows and never shrinks).
func (a *Allocator) Peak() uint64 { return a.peak }

// Allocate implements experimental.MemoryAllocator.
func (a *Allocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	// capacity is wazero's hint (the memory's minimum unless the runtime
	// reserves its maximum); never reserve past the limit for it.
	m := &memory{a: a, max: max}
	a.mems = append(a.mems, m)
	if a.mapped && m.reserve() {
		return m
	}
	m.buf = make([]byte, 0, min(capacity, max, a.limit))
	return m
}

// memory is one linear memory of an Allocator's instance.
type memory struct {
	a    *Allocator
	buf  []byte
	max  uint64       // the memory's own maximum, from wazero
	init bool         // the initial allocation was made
	res  *reservation // when mapped: the address space buf lies in
	// scratch, when set, is the buffer the initial memory lies in
	// (UseMapping's restoring): the first grow leaves it.
	scratch *[]byte
}

// Reallocate implements experimental.LinearMemory: it grows the memory to
// size bytes. wazero calls it for the initial size and for every
// memory.grow; returning nil makes memory.grow return -1.
func (m *memory) Reallocate(size uint64) []byte {
	a := m.a
	others := a.size - uint64(len(m.buf))
	total := others + size
	if !m.init {
		// wazero cannot handle a refused initial allocation (it indexes
		// the result), so grant it and let the caller refuse the instance.
		m.init = true
		if total > a.limit {
			a.hit, a.initHit = true, true
		}
		a.size, a.peak = total, max(a.peak, total)
		if buf := m.initialScratch(size); buf != nil {
			m.buf = buf
			return buf
		}
		if m.res != nil {
			if buf := m.res.commit(size); buf != nil {
				m.buf = buf
				return buf
			}
			m.res.release() // cannot commit: back to the Go heap
			m.res = nil
		}
		if size <= uint64(cap(m.buf)) {
			m.buf = m.buf[:size]
		} else {
			m.buf = make([]byte, size)
		}
		return m.buf
	}
	if total > a.limit {
		a.hit = true
		return nil
	}
	if size > m.max {
		// wazero checks the module's own maximum before it calls us; that
		// maximum is the guest's, not the host's limit, so it is no hit.
		return nil
	}
	if m.res != nil {
		// The reservation holds the memory's maximum: a grow commits
		// pages in place, never copies.
		var buf []byte
		if m.scratch != nil {
			buf = m.leaveScratch(size)
		} else {
			buf = m.res.commit(size)
		}
		if buf == nil {
			return nil
		}
		a.size, a.peak = total, max(a.peak, total)
		m.buf = buf
		return buf
	}
	a.size, a.peak = total, max(a.peak, total)
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size] // the tail was zeroed by make and never written
		return m.buf
	}
	// Grow geometrically so a guest growing page by page is not
	// quadratic, but reserve no more than the memory's maximum and the
	// limit's room (the host holds what is reserved).
	newCap := min(max(size, uint64(cap(m.buf))*2), m.max, max(a.limit-others, size))
	buf := make([]byte, size, newCap)
	copy(buf, m.buf)
	m.buf = buf
	return buf
}

// Free implements experimental.LinearMemory.
func (m *memory) Free() {
	m.a.size -= uint64(len(m.buf))
	m.buf = nil
	m.scratch = nil // the guest may still run on it: the GC's to free
	if m.res != nil {
		m.res.free(m.a.owned)
	}
}
