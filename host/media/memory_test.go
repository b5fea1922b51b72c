package media_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/media"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// bombPNG is a PNG of w × h pixels (bit depth 8 or 16, colour type 6:
// RGBA, not interlaced) whose pixels are all zero: its IDAT is a zlib
// stream of zero rows, so a few hundred KB say hundreds of MB of pixels.
// It is written row by row, never held decoded.
func bombPNG(t testing.TB, w, h, depth int) []byte {
	t.Helper()
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(data)))
		out.Write(n[:])
		c := crc32.NewIEEE()
		c.Write([]byte(typ))
		c.Write(data)
		out.WriteString(typ)
		out.Write(data)
		binary.BigEndian.PutUint32(n[:], c.Sum32())
		out.Write(n[:])
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = byte(depth), 6
	chunk("IHDR", ihdr)
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	row := make([]byte, 1+w*4*depth/8)
	for range h {
		zw.Write(row)
	}
	zw.Close()
	chunk("IDAT", z.Bytes())
	chunk("IEND", nil)
	return out.Bytes()
}

// TestThumbnailMemoryBounded: six concurrent thumbnails of one small PNG
// of nearly abi.MaxMediaPixels (the reported attack: a 381 KB PNG, six
// thumbnails, the server grew by 1.35–1.8 GiB under a 1 GiB bound) make
// the Go heap grow by no more than the bound and a margin, however the
// collector would have paced itself; a bomb whose decode alone needs
// more than the bound is refused from its header, before any pixel is
// allocated.
func TestThumbnailMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 6 × 200 MB")
	}
	testenv.Timing(t)
	const bound = 512 << 20
	const margin = 96 << 20
	for _, tt := range []struct {
		name        string
		w, h, depth int
	}{
		{"8-bit RGBA, 49 Mpx", 7000, 7000, 8},
		{"16-bit RGBA, 25 Mpx", 5000, 5000, 16},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := bombPNG(t, tt.w, tt.h, tt.depth)
			t.Logf("%d×%d at %d bits: %d bytes", tt.w, tt.h, tt.depth, len(data))
			slots := media.NewDecodeSlots(bound)
			// The heap the process holds (obtained and not returned), at
			// its peak while the thumbnails run: sampled, since the
			// collector returns memory in the background.
			debug.FreeOSMemory()
			held := func() int64 {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				return int64(ms.HeapSys - ms.HeapReleased)
			}
			before := held()
			var peak atomic.Int64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					if h := held(); h > peak.Load() {
						peak.Store(h)
					}
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			}()
			var wg sync.WaitGroup
			errs := make(chan error, 6)
			for range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					_, err := media.Thumbnail(ctx, slots, data, "image/png", 64, 64, "")
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("a thumbnail: %v", err)
				}
			}
			close(stop)
			<-sampled
			grew := peak.Load() - before
			t.Logf("the heap grew by %d MiB at its peak (bound %d MiB)", grew>>20, bound>>20)
			if grew > bound+margin {
				t.Errorf("the heap grew by %d MiB under a bound of %d MiB", grew>>20, bound>>20)
			}
		})
	}
	// One decode over the whole bound: refused from the header, at once,
	// without allocating its pixels.
	data := bombPNG(t, 7000, 7000, 16) // 49 Mpx × 8 bytes: 392 MB
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := media.Thumbnail(context.Background(), media.NewDecodeSlots(256<<20), data, "image/png", 64, 64, "")
	runtime.ReadMemStats(&after)
	if code(err) != abi.CodeResourceExhausted || !strings.Contains(err.Error(), "media.decode_bytes") || !strings.Contains(err.Error(), "the host decodes at most 268435456 bytes at once") {
		t.Errorf("a decode over the bound: %v; want resource_exhausted naming media.decode_bytes", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the refusal took %s", d)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("the refusal allocated %d MiB", grew>>20)
	}
}
