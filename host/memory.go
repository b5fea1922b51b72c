package host

import "github.com/moat-sandbox/moat/internal/wasmlimit"

// limitedMemory backs one instance's linear memory and refuses to grow it
// past a limit that the host may change between invocations (SetLimit),
// recording that the guest hit it, so a guest that dies after a failed
// memory.grow is reported as memory_limit rather than as whatever its
// runtime printed on the way out. It is wasmlimit.Allocator, which the
// Extism and Ruby hosts share.
type limitedMemory = wasmlimit.Allocator

// newLimitedMemory returns the memory limiter of an instance or run under
// lim; pass it to wazero with experimental.WithMemoryAllocator.
func newLimitedMemory(lim Limits) *limitedMemory {
	return wasmlimit.NewAllocator(uint64(lim.MemoryLimitPages) * wasmlimit.PageSize)
}
