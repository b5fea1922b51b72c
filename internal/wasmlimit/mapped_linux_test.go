package wasmlimit

import (
	"bytes"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// imageFile is a memfd of n bytes, each byte its offset's low byte.
func imageFile(t *testing.T, n int) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("wasmlimit-test", 0)
	if err != nil {
		t.Skip("no memfd: ", err)
	}
	f := os.NewFile(uintptr(fd), "image")
	t.Cleanup(func() { f.Close() })
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestMapPrivate: a mapped memory takes a file's pages copy-on-write:
// the guest sees the file, its writes are its own (the file and a second
// memory mapping it are unchanged), it grows in place past the mapping,
// and the limit still holds.
func TestMapPrivate(t *testing.T) {
	f := imageFile(t, 4*page)
	want := make([]byte, 4*page)
	if _, err := f.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	var bufs [][]byte
	var allocs []*Allocator
	for range 2 {
		a := NewAllocator(8 * page)
		a.UseMapping(0)
		m := a.Allocate(page, 16*page)
		m.Reallocate(page)
		if !a.Mapped() {
			t.Fatal("the memory is not mapped")
		}
		buf := m.Reallocate(4 * page)
		if err := a.MapPrivate(int(f.Fd()), 4*page); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatal("the memory does not hold the file's bytes")
		}
		bufs, allocs = append(bufs, buf), append(allocs, a)
		t.Cleanup(m.Free)
	}
	bufs[0][100] ^= 0xff // a copy-on-write fault: the first memory's own page
	if bufs[1][100] != want[100] {
		t.Fatal("a write into one memory reached another mapping the same file")
	}
	got := make([]byte, 4*page)
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatal("a write into the memory reached the file")
	}
	// Growing keeps the address (wazero's buffer never moves) and the
	// mapped bytes; past the limit is refused.
	m := allocs[0].mems[0]
	grown := m.Reallocate(8 * page)
	if grown == nil || &grown[0] != &bufs[0][0] || grown[100] != want[100]^0xff || grown[5*page] != 0 {
		t.Fatal("a grow moved the memory or lost its bytes")
	}
	if m.Reallocate(9*page) != nil || !allocs[0].Hit() {
		t.Fatal("a grow past the limit was granted")
	}
}

// TestMapPrivateRefusals: what MapPrivate refuses rather than map (a page
// past a file's end faults the process on access).
func TestMapPrivateRefusals(t *testing.T) {
	f := imageFile(t, 2*page)
	tests := []struct {
		name   string
		mapped bool
		grow   uint64
		size   uint64
	}{
		{name: "a memory of the Go heap", mapped: false, grow: 4 * page, size: 2 * page},
		{name: "more than the memory holds", mapped: true, grow: page, size: 2 * page},
		{name: "more than the file holds", mapped: true, grow: 4 * page, size: 4 * page},
		{name: "not whole pages", mapped: true, grow: 4 * page, size: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(8 * page)
			if tt.mapped {
				a.UseMapping(0)
			}
			m := a.Allocate(page, 16*page)
			defer m.Free()
			m.Reallocate(tt.grow)
			if err := a.MapPrivate(int(f.Fd()), tt.size); err == nil {
				t.Fatal("mapped")
			}
		})
	}
}

// TestMappedFreeKeptWhileOwned: a memory freed while its owner (the
// module instance) is alive keeps its address space, readable (a guest
// still running after a close from another goroutine must not fault the
// process); it is unmapped once the owner is gone.
func TestMappedFreeKeptWhileOwned(t *testing.T) {
	f := imageFile(t, 2*page)
	a := NewAllocator(8 * page)
	a.UseMapping(0)
	m := a.Allocate(page, 16*page)
	buf := m.Reallocate(2 * page)
	if err := a.MapPrivate(int(f.Fd()), 2*page); err != nil {
		t.Fatal(err)
	}
	owner := new([64]byte)
	a.KeepWhile(owner)
	res := a.mems[0].res
	m.Free()
	_ = buf[page+1] // still mapped: no fault
	if buf[page+1] != byte((page+1)%256) {
		t.Fatalf("after Free the memory reads %d, want the file's byte", buf[page+1])
	}
	runtime.KeepAlive(owner)
	owner = nil
	for range 100 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // cleanups run on a goroutine of their own
		res.mu.Lock()
		done := res.unmapped
		res.mu.Unlock()
		if done {
			return
		}
	}
	t.Fatal("the reservation was not unmapped once its owner was gone")
}

// TestMappedScratch: a memory restored at once (UseMapping's restoring)
// starts on a scratch buffer, whatever an earlier instance left there,
// and its first grow leaves it for zeroed pages of its reservation; the
// limit counts it as any memory; it is not Mapped until it moved.
func TestMappedScratch(t *testing.T) {
	for round := range 3 {
		a := NewAllocator(8 * page)
		a.UseMapping(4 * page)
		m := a.Allocate(2*page, 16*page)
		init := m.Reallocate(2 * page)
		if len(init) != 2*page || a.Mapped() || a.Size() != 2*page {
			t.Fatalf("round %d: initial %d bytes, Mapped %v, Size %d", round, len(init), a.Mapped(), a.Size())
		}
		for i := range init {
			init[i] = 0xaa // as the data segments would be
		}
		grown := m.Reallocate(4 * page)
		if grown == nil || !a.Mapped() || a.Size() != 4*page {
			t.Fatalf("round %d: the first grow: %d bytes, Mapped %v", round, len(grown), a.Mapped())
		}
		if bytes.Count(grown, []byte{0}) != len(grown) {
			t.Fatalf("round %d: the grown memory holds the scratch's bytes", round)
		}
		if m.Reallocate(9*page) != nil || !a.Hit() {
			t.Fatalf("round %d: a grow past the limit was granted", round)
		}
		m.Free()
	}
}
