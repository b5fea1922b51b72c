package wasmlimit

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mapped memories. A memory the Go heap holds is copied on every grow
// past its capacity, and an instance that starts from an image has the
// image copied into it whole (26 MB for CPython's REPL, 80 for a context
// holding a 50 MiB heap) although most of those pages are never written
// again. A mapped memory is a reservation of address space the size of
// the memory's maximum (PROT_NONE: no memory, no commit charge), whose
// pages are made usable as the memory grows (in place: the guest's
// memory never moves), and over whose first bytes an image's file can
// be mapped copy-on-write (MapPrivate): every instance started from one
// image shares its pages, and holds only those it writes.
//
// The limit is counted as for a memory of the Go heap (the bytes granted,
// mapped or not), so an instance's memory limit still holds.
//
// The reservation outlives Free when the host says what holds the
// instance (KeepWhile): wazero frees a module's memory when the module
// is closed, and a close may come from another goroutine while the
// guest still runs (a kill); unmapped there, the guest's next access
// would fault the whole process. Free drops the pages at once instead
// (the guest, if it runs on, reads zeros or the image), and the address
// space is unmapped when the instance is gone.

// maxReserve bounds a memory's reservation: a 32-bit memory's maximum.
const maxReserve = 1 << 32

// UseMapping makes the memories Allocate makes from now on mapped (above).
// Call it before the instance is instantiated. restoring, when not zero,
// says the instance's memory is restored from an image of that many
// bytes right after instantiation, before any code of the guest runs:
// its first grow is to the image's size and every byte is then the
// image's (wasmsnap.RestoreMapped). What wazero writes before (the data
// segments: 7 MB for CPython) is then never read, so it goes into a
// scratch buffer reused between instances instead of pages made (a
// fault each) and thrown away, and that first grow keeps none of it.
func (a *Allocator) UseMapping(restoring uint64) { a.mapped, a.restoring = true, restoring }

// scratch holds the buffers initial memories of restored instances are
// written into (UseMapping): resident pages, so the data segments cost a
// copy and no page faults.
var scratch sync.Pool

// initialScratch is the initial memory of size bytes of an instance
// UseMapping says is restored at once; nil when it is not.
func (m *memory) initialScratch(size uint64) []byte {
	if m.res == nil || m.a.restoring <= size || size == 0 {
		return nil
	}
	if b, ok := scratch.Get().(*[]byte); ok && uint64(cap(*b)) >= size {
		m.scratch = b
	} else {
		m.scratch = &[]byte{}
		*m.scratch = make([]byte, size)
	}
	return (*m.scratch)[:size:size]
}

// leaveScratch is the first grow of a memory on scratch: onto its
// reservation, keeping nothing (the image is restored over it).
func (m *memory) leaveScratch(size uint64) []byte {
	buf := m.res.commit(size)
	if buf == nil {
		return nil
	}
	scratch.Put(m.scratch)
	m.scratch = nil
	return buf
}

// Mapped reports whether the instance's only memory is mapped, so that
// MapPrivate can back it with a file.
func (a *Allocator) Mapped() bool {
	return len(a.mems) == 1 && a.mems[0].res != nil && a.mems[0].scratch == nil
}

// KeepWhile keeps the address space of the memories mapped until owner
// (the wazero module instance, a pointer) is unreachable: no guest code
// runs on its memory after that. Call it once, right after instantiation.
func (a *Allocator) KeepWhile(owner any) {
	v := reflect.ValueOf(owner)
	if v.Kind() != reflect.Pointer || v.IsNil() || a.owned {
		return
	}
	var rs []*reservation
	for _, m := range a.mems {
		if m.res != nil {
			rs = append(rs, m.res)
		}
	}
	if len(rs) == 0 {
		return
	}
	a.owned = true
	runtime.AddCleanup((*byte)(v.UnsafePointer()), func(rs []*reservation) {
		for _, r := range rs {
			r.unmap()
		}
	}, rs)
}

// MapPrivate backs the first size bytes of the instance's memory with the
// first size bytes of the file fd, copy-on-write: what the guest writes
// is its own; the file is not changed. The memory must be mapped (Mapped)
// and hold size bytes already (grow it first); size must be a multiple of
// the system's page size, and the file at least size bytes long (a page
// past its end would fault on access: the caller's file is sealed
// against shrinking, and its size is checked here).
func (a *Allocator) MapPrivate(fd int, size uint64) error {
	if !a.Mapped() {
		return errors.New("wasmlimit: the memory is not mapped")
	}
	m := a.mems[0]
	var st unix.Stat_t
	switch {
	case size > uint64(len(m.buf)):
		return fmt.Errorf("wasmlimit: %d bytes to map into a memory of %d", size, len(m.buf))
	case size%uint64(unix.Getpagesize()) != 0:
		return fmt.Errorf("wasmlimit: %d bytes is not a whole number of pages", size)
	case size == 0:
		return nil
	case unix.Fstat(fd, &st) != nil || uint64(st.Size) < size:
		return fmt.Errorf("wasmlimit: the file holds fewer than %d bytes", size)
	}
	m.res.mu.Lock()
	defer m.res.mu.Unlock()
	if m.res.freed {
		return errors.New("wasmlimit: the memory was freed")
	}
	_, err := unix.MmapPtr(fd, 0, m.res.base, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED)
	if err != nil {
		return fmt.Errorf("wasmlimit: map the image: %w", err)
	}
	return nil
}

// reservation is a mapped memory's address space.
type reservation struct {
	mu        sync.Mutex
	base      unsafe.Pointer
	all       []byte // the whole reservation
	committed uint64 // bytes made usable
	freed     bool
	unmapped  bool
}

// reserve makes m a mapped memory; false when the address space is not
// to be had (the memory is then one of the Go heap).
func (m *memory) reserve() bool {
	n := min(m.max, maxReserve)
	if pg := uint64(unix.Getpagesize()); n%pg != 0 {
		n += pg - n%pg
	}
	if n == 0 {
		return false
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return false
	}
	m.res = &reservation{base: p, all: unsafe.Slice((*byte)(p), n)}
	return true
}

// commit makes the first size bytes usable and returns them; nil past
// the reservation.
func (r *reservation) commit(size uint64) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.freed || size > uint64(len(r.all)) {
		return nil
	}
	if size > r.committed {
		end := size
		if pg := uint64(unix.Getpagesize()); end%pg != 0 {
			end += pg - end%pg
		}
		if unix.Mprotect(r.all[r.committed:end], unix.PROT_READ|unix.PROT_WRITE) != nil {
			return nil
		}
		r.committed = end
	}
	return r.all[:size:size]
}

// free ends the memory: unmapped now when nothing can run on it, else its
// pages dropped and the unmap left to the owner's cleanup (KeepWhile).
func (r *reservation) free(owned bool) {
	r.mu.Lock()
	r.freed = true
	if r.committed > 0 && !r.unmapped {
		_ = unix.Madvise(r.all[:r.committed], unix.MADV_DONTNEED)
	}
	r.mu.Unlock()
	if !owned {
		r.unmap()
	}
}

// release unmaps a reservation no memory was granted from.
func (r *reservation) release() { r.unmap() }

func (r *reservation) unmap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.unmapped {
		r.unmapped, r.freed = true, true
		_ = unix.MunmapPtr(r.base, uintptr(len(r.all)))
	}
}
