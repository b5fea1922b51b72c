package host

import "github.com/tetratelabs/wazero/experimental"

// limitedMemory backs one instance's linear memory and refuses to grow it
// past a limit that the host may change between invocations. wazero's own
// limit (RuntimeConfig.WithMemoryLimitPages) is fixed per runtime; this one
// is per instance and per invocation, and it records that the guest hit it,
// so a guest that dies after a failed memory.grow is reported as
// memory_limit rather than as whatever its runtime printed on the way out.
type limitedMemory struct {
	buf   []byte
	max   uint64 // the module's own maximum, from wazero
	limit uint64 // bytes; changed by the host between invocations
	hit   bool   // a grow was refused since the last reset
	init  bool   // the initial allocation was made
	peak  uint64 // the largest size granted: a run's peak memory (WASM memory never shrinks)
}

// memoryAllocator hands out limitedMemory and remembers the last one, so
// the instance being created can find its memory.
type memoryAllocator struct {
	limit uint64
	last  *limitedMemory
}

func (a *memoryAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	m := &limitedMemory{max: max, limit: a.limit}
	m.buf = make([]byte, 0, min(capacity, max))
	a.last = m
	return m
}

// Reallocate grows the memory to size bytes. wazero calls it for the initial
// size and for every memory.grow; returning nil makes memory.grow return -1.
func (m *limitedMemory) Reallocate(size uint64) []byte {
	if !m.init {
		// wazero cannot handle a refused initial allocation (it indexes the
		// result), so grant it and let the host refuse the instance.
		m.init = true
		m.hit = size > m.limit
		m.peak = max(m.peak, size)
		if size <= uint64(cap(m.buf)) {
			m.buf = m.buf[:size]
		} else {
			m.buf = make([]byte, size)
		}
		return m.buf
	}
	if size > m.limit || size > m.max {
		m.hit = true
		return nil
	}
	m.peak = max(m.peak, size)
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size] // the tail was zeroed by make and never written
		return m.buf
	}
	// Grow geometrically so a guest growing page by page is not quadratic.
	newCap := max(size, uint64(cap(m.buf))*2)
	newCap = min(newCap, m.max, max(m.limit, size))
	buf := make([]byte, size, newCap)
	copy(buf, m.buf)
	m.buf = buf
	return buf
}

func (m *limitedMemory) Free() { m.buf = nil }
