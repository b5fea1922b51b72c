package wasmlimit

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/moat-sandbox/moat/internal/testenv"
)

const page = PageSize

// step is one Reallocate of memory mem (index into the memories Allocate
// made, in order), or a SetLimit when limit is set.
type step struct {
	mem      int
	size     uint64 // bytes; Reallocate's argument
	setLimit uint64 // when not zero: SetLimit(setLimit) instead
	granted  bool
	hit      bool // Hit() after the step
	size2    uint64
}

func TestAllocator(t *testing.T) {
	tests := []struct {
		name    string
		limit   uint64
		mems    [][2]uint64 // Allocate(capacity, max) of each memory
		steps   []step
		initHit bool
		peak    uint64
	}{
		{name: "initial allocation under the limit", limit: 4 * page, mems: [][2]uint64{{page, 16 * page}},
			steps: []step{{size: page, granted: true, size2: page}}, peak: page},
		{name: "initial allocation over the limit is granted and recorded", limit: 2 * page, mems: [][2]uint64{{8 * page, 16 * page}},
			steps: []step{{size: 8 * page, granted: true, hit: true, size2: 8 * page}}, initHit: true, peak: 8 * page},
		{name: "grow within the limit", limit: 4 * page, mems: [][2]uint64{{page, 16 * page}},
			steps: []step{{size: page, granted: true, size2: page}, {size: 4 * page, granted: true, size2: 4 * page}}, peak: 4 * page},
		{name: "grow past the limit is refused and recorded", limit: 4 * page, mems: [][2]uint64{{page, 16 * page}},
			steps: []step{{size: page, granted: true, size2: page}, {size: 5 * page, hit: true, size2: page}}, peak: page},
		{name: "grow past the module's own maximum is refused but is no hit", limit: 16 * page, mems: [][2]uint64{{page, 2 * page}},
			steps: []step{{size: page, granted: true, size2: page}, {size: 3 * page, size2: page}}, peak: page},
		{name: "SetLimit forgets the hit and raises the limit", limit: 2 * page, mems: [][2]uint64{{page, 16 * page}},
			steps: []step{{size: page, granted: true, size2: page}, {size: 3 * page, hit: true, size2: page},
				{setLimit: 4 * page, size2: page}, {size: 3 * page, granted: true, size2: 3 * page}}, peak: 3 * page},
		{name: "SetLimit keeps what was granted", limit: 8 * page, mems: [][2]uint64{{page, 16 * page}},
			steps: []step{{size: 6 * page, granted: true, size2: 6 * page}, {setLimit: 2 * page, size2: 6 * page},
				{size: 7 * page, hit: true, size2: 6 * page}}, peak: 6 * page},
		// An Extism plug-in's own memory and the kernel's: the limit is
		// the two together (the old per-memory check let each reach it).
		{name: "two memories share one limit", limit: 4 * page, mems: [][2]uint64{{page, 16 * page}, {page, 16 * page}},
			steps: []step{{mem: 0, size: page, granted: true, size2: page}, {mem: 1, size: page, granted: true, size2: 2 * page},
				{mem: 0, size: 3 * page, granted: true, size2: 4 * page}, {mem: 1, size: 2 * page, hit: true, size2: 4 * page}}, peak: 4 * page},
		{name: "a second memory's initial size over the shared limit", limit: 4 * page, mems: [][2]uint64{{4 * page, 16 * page}, {page, 16 * page}},
			steps:   []step{{mem: 0, size: 4 * page, granted: true, size2: 4 * page}, {mem: 1, size: page, granted: true, hit: true, size2: 5 * page}},
			initHit: true, peak: 5 * page},
		{name: "zero limit", limit: 0, mems: [][2]uint64{{0, 16 * page}},
			steps: []step{{size: 0, granted: true, size2: 0}, {size: page, hit: true, size2: 0}}},
	}
	for _, tt := range tests {
		for _, mapped := range []bool{false, true} {
			name := tt.name
			if mapped {
				name += " (mapped)" // the same limits on a reservation (mapped_linux.go)
			}
			t.Run(name, func(t *testing.T) {
				a := NewAllocator(tt.limit)
				if mapped {
					a.UseMapping(0)
				}
				var mems []experimental.LinearMemory
				for _, m := range tt.mems {
					mems = append(mems, a.Allocate(m[0], m[1]))
				}
				last := make([][]byte, len(mems))
				for i, s := range tt.steps {
					if s.setLimit != 0 {
						a.SetLimit(s.setLimit)
					} else {
						buf := mems[s.mem].Reallocate(s.size)
						if got := buf != nil; got != s.granted {
							t.Fatalf("step %d: Reallocate(%d) granted %v, want %v", i, s.size, got, s.granted)
						}
						if buf != nil {
							if uint64(len(buf)) != s.size {
								t.Fatalf("step %d: len %d, want %d", i, len(buf), s.size)
							}
							// Contents survive a grow, and the new tail is zero.
							if prev := last[s.mem]; !bytes.Equal(buf[:len(prev)], prev) || bytes.Count(buf[len(prev):], []byte{0}) != len(buf)-len(prev) {
								t.Fatalf("step %d: the memory's contents were not kept", i)
							}
							for j := range buf {
								buf[j] = byte(i + j)
							}
							last[s.mem] = append([]byte(nil), buf...)
						}
					}
					if a.Hit() != s.hit {
						t.Fatalf("step %d: Hit() = %v, want %v", i, a.Hit(), s.hit)
					}
					if a.Size() != s.size2 {
						t.Fatalf("step %d: Size() = %d, want %d", i, a.Size(), s.size2)
					}
				}
				if a.InitialHit() != tt.initHit {
					t.Errorf("InitialHit() = %v, want %v", a.InitialHit(), tt.initHit)
				}
				if a.Peak() != tt.peak {
					t.Errorf("Peak() = %d, want %d", a.Peak(), tt.peak)
				}
				for _, m := range mems {
					m.Free()
				}
				if a.Size() != 0 {
					t.Errorf("Size() after Free = %d, want 0", a.Size())
				}
			})
		}
	}
}

// TestAllocatorReserve: growth is geometric (a guest growing page by page
// costs a logarithmic number of copies, not one per page), and what the
// host reserves for it never passes the memory's maximum nor the limit.
func TestAllocatorReserve(t *testing.T) {
	tests := []struct {
		name          string
		limit, max    uint64
		capacity      uint64
		growTo        uint64 // pages, one at a time
		maxCopies     int
		wantCapAtMost uint64
	}{
		{name: "limit below max", limit: 100 * page, max: MaxMemoryPages * page, capacity: page, growTo: 100, maxCopies: 8, wantCapAtMost: 100 * page},
		{name: "max below limit", limit: 1000 * page, max: 100 * page, capacity: page, growTo: 100, maxCopies: 8, wantCapAtMost: 100 * page},
		// wazero's capacity hint is the module's maximum when the runtime
		// reserves it; the limit still bounds what is allocated.
		{name: "capacity hint over the limit", limit: 10 * page, max: MaxMemoryPages * page, capacity: MaxMemoryPages * page, growTo: 10, maxCopies: 1, wantCapAtMost: 10 * page},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(tt.limit)
			m := a.Allocate(tt.capacity, tt.max)
			buf := m.Reallocate(page)
			copies := 0
			for p := uint64(2); p <= tt.growTo; p++ {
				nb := m.Reallocate(p * page)
				if nb == nil {
					t.Fatalf("grow to %d pages refused", p)
				}
				if &nb[0] != &buf[0] {
					copies++
				}
				buf = nb
				if c := uint64(cap(buf)); c > tt.wantCapAtMost {
					t.Fatalf("at %d pages the host reserved %d bytes, over %d", p, c, tt.wantCapAtMost)
				}
			}
			if copies > tt.maxCopies {
				t.Errorf("%d copies growing to %d pages one at a time, want at most %d", copies, tt.growTo, tt.maxCopies)
			}
			if m.Reallocate((tt.growTo+1)*page) != nil {
				t.Errorf("grow past %d pages granted", tt.growTo)
			}
		})
	}
}

// growModule is a module with one memory of min pages (and max pages when
// max > 0) exporting grow(delta i32) -> i32 (memory.grow) and spin(), which
// loops forever.
func growModule(min, max byte) []byte {
	sec := func(id byte, body ...byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	mem := []byte{1, 0, min}
	if max > 0 {
		mem = []byte{1, 1, min, max}
	}
	var b []byte
	b = append(b, 0, 'a', 's', 'm', 1, 0, 0, 0)
	b = append(b, sec(1, 2, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 0, 0)...)
	b = append(b, sec(3, 2, 0, 1)...)
	b = append(b, sec(5, mem...)...)
	b = append(b, sec(7, 2, 4, 'g', 'r', 'o', 'w', 0, 0, 4, 's', 'p', 'i', 'n', 0, 1)...)
	b = append(b, sec(10, 2,
		6, 0, 0x20, 0, 0x40, 0, 0x0b, // local.get 0; memory.grow 0
		7, 0, 0x03, 0x40, 0x0c, 0, 0x0b, 0x0b)...) // loop; br 0; end
	return b
}

// TestAllocatorWazero: the Allocator under a real wazero runtime made with
// NewRuntimeConfig: memory.grow returns -1 past the limit and the hit is
// recorded; an initial memory over the limit is granted (wazero indexes
// it) and recorded; a deadline stops a guest in a loop.
func TestAllocatorWazero(t *testing.T) {
	testenv.Timing(t)
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, NewRuntimeConfig(nil))
	defer rt.Close(ctx)
	tests := []struct {
		name       string
		min, max   byte
		limit      uint64
		grows      []uint32 // deltas
		want       []int32  // memory.grow's results
		initHit    bool
		hit        bool
		size, peak uint64
	}{
		{name: "grow within the limit", min: 1, limit: 4 * page, grows: []uint32{1, 2}, want: []int32{1, 2}, size: 4 * page, peak: 4 * page},
		{name: "grow past the limit", min: 1, limit: 4 * page, grows: []uint32{2, 2, 1}, want: []int32{1, -1, 3}, hit: true, size: 4 * page, peak: 4 * page},
		{name: "grow past the module's maximum", min: 1, max: 2, limit: 4 * page, grows: []uint32{2, 1}, want: []int32{-1, 1}, size: 2 * page, peak: 2 * page},
		{name: "initial memory over the limit", min: 8, limit: 4 * page, grows: []uint32{1}, want: []int32{-1}, initHit: true, hit: true, size: 8 * page, peak: 8 * page},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cm, err := rt.CompileModule(ctx, growModule(tt.min, tt.max))
			if err != nil {
				t.Fatal(err)
			}
			a := NewAllocator(tt.limit)
			mod, err := rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, a), cm, wazero.NewModuleConfig().WithName(""))
			if err != nil {
				t.Fatal(err)
			}
			defer mod.Close(ctx)
			for i, d := range tt.grows {
				r, err := mod.ExportedFunction("grow").Call(ctx, uint64(d))
				if err != nil {
					t.Fatal(err)
				}
				if got := int32(r[0]); got != tt.want[i] {
					t.Fatalf("grow(%d) = %d, want %d", d, got, tt.want[i])
				}
			}
			if a.Hit() != tt.hit || a.InitialHit() != tt.initHit || a.Size() != tt.size || a.Peak() != tt.peak {
				t.Errorf("hit %v initHit %v size %d peak %d, want %v %v %d %d", a.Hit(), a.InitialHit(), a.Size(), a.Peak(), tt.hit, tt.initHit, tt.size, tt.peak)
			}
			if got := uint64(mod.Memory().Size()); got != tt.size {
				t.Errorf("the guest sees %d bytes, the allocator counts %d", got, tt.size)
			}
		})
	}

	t.Run("a deadline stops a loop", func(t *testing.T) {
		cm, err := rt.CompileModule(ctx, growModule(1, 0))
		if err != nil {
			t.Fatal(err)
		}
		mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = mod.ExportedFunction("spin").Call(cctx)
		var exit *sys.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != sys.ExitCodeDeadlineExceeded {
			t.Fatalf("err %v, want exit code %d (deadline exceeded)", err, sys.ExitCodeDeadlineExceeded)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("stopped after %s", took)
		}
	})
}

func BenchmarkReallocate(b *testing.B) {
	b.Run("grow-1024-pages-one-at-a-time", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			a := NewAllocator(2048 * page)
			m := a.Allocate(page, MaxMemoryPages*page)
			for p := uint64(1); p <= 1024; p++ {
				if m.Reallocate(p*page) == nil {
					b.Fatal("refused")
				}
			}
			m.Free()
		}
	})
	b.Run("refused", func(b *testing.B) {
		a := NewAllocator(page)
		m := a.Allocate(page, MaxMemoryPages*page)
		m.Reallocate(page)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if m.Reallocate(2*page) != nil {
				b.Fatal("granted")
			}
		}
	})
}
