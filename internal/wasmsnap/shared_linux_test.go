package wasmsnap_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/moat-sandbox/moat/internal/wasmlimit"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// TestRestoreMapped: a shared image (captured, made Shared, or streamed
// in by ReadImage) restores into an instance whose memory is mapped as
// a plain restore does (TestCaptureRestore's checks), the instance's
// writes are its own (a second instance from the same image does not
// see them), and an instance whose memory is the heap's still copies.
func TestRestoreMapped(t *testing.T) {
	ctx := context.Background()
	prepared, globals, err := wasmsnap.Prepare(fixture(t), map[string]uint32{"first": 5})
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, prepared)
	if err != nil {
		t.Fatal(err)
	}
	first, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	call(t, first, "grow", 2)
	call(t, first, "set", 16, 0)
	call(t, first, "set", 2*65536+8, 1234)
	img, err := wasmsnap.Capture(first, globals)
	if err != nil {
		t.Fatal(err)
	}
	first.Close(ctx)
	b := img.Marshal()
	read, err := wasmsnap.ReadImage(bytes.NewReader(b), int64(len(b)), false)
	if err != nil {
		t.Fatal(err)
	}
	heap, err := wasmsnap.Unmarshal(bytes.Clone(b))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read.Marshal(), b) || !bytes.Equal(heap.Shared().Marshal(), b) {
		t.Fatal("a shared image does not marshal as the image it was made from")
	}
	for name, im := range map[string]*wasmsnap.Image{"captured": img, "read": read, "shared": heap.Shared(), "heap": heap} {
		for _, mapped := range []bool{true, false} {
			sub := name + "/heap memory"
			if mapped {
				sub = name + "/mapped memory"
			}
			t.Run(sub, func(t *testing.T) {
				for i := range 2 {
					a := wasmlimit.NewAllocator(16 * 65536)
					if mapped {
						// Restored at once: the data segments go to a
						// scratch buffer the grow to the image leaves.
						a.UseMapping(uint64(im.Pages) * 65536)
					}
					mod, err := rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, a), cm, wazero.NewModuleConfig().WithName(""))
					if err != nil {
						t.Fatal(err)
					}
					defer mod.Close(ctx)
					a.KeepWhile(mod)
					if err := im.RestoreMapped(mod, a); err != nil {
						t.Fatal(err)
					}
					if got := mod.Memory().Size(); got != 3*65536 || a.Size() != 3*65536 {
						t.Errorf("memory: %d bytes (the allocator counts %d), want 3 pages", got, a.Size())
					}
					if got := call(t, mod, "get", 16); got != 0 {
						t.Errorf("the fresh instance's data segment survived the restore: %#x", got)
					}
					if b, _ := mod.Memory().Read(20, 3); string(b) != "ial" {
						t.Errorf("data beyond what was overwritten: %q", b)
					}
					if got := call(t, mod, "get", 2*65536+8); got != 1234 {
						t.Errorf("instance %d: grown memory: %d (another instance's write shows)", i, got)
					}
					if g, h := call(t, mod, "g"), call(t, mod, "h"); g != 1234 || h != 1234<<32 {
						t.Errorf("globals: %d %d", g, h)
					}
					call(t, mod, "set", 2*65536+8, 1235) // its own page
					call(t, mod, "grow", 1)              // in place, past the image
				}
			})
		}
	}
	if again := img.Marshal(); !bytes.Equal(again, b) {
		t.Fatal("the instances' writes reached the image")
	}
}

// TestReadImageRefuses: a damaged or hostile stream is refused by
// ReadImage as by Unmarshal (checked: the checksum left to the caller,
// but the structure still bounded), never restored in part, and never a
// fault: every truncation and every flipped byte of an image.
func TestReadImageRefuses(t *testing.T) {
	img := &wasmsnap.Image{Pages: 2, Globals: []uint64{5}, Values: []uint64{7}, Key: "k",
		Runs: []wasmsnap.Run{{Off: 8, Data: []byte("abc")}, {Off: 70000, Data: bytes.Repeat([]byte{9}, 300)}}}
	good := img.Marshal()
	if _, err := wasmsnap.ReadImage(bytes.NewReader(good), int64(len(good)), false); err != nil {
		t.Fatal(err)
	}
	for n := range len(good) {
		if _, err := wasmsnap.ReadImage(bytes.NewReader(good[:n]), int64(len(good)), false); err == nil {
			t.Errorf("truncated to %d bytes: accepted", n)
		}
		if _, err := wasmsnap.ReadImage(bytes.NewReader(good), int64(n), false); err == nil {
			t.Errorf("read as %d bytes: accepted", n)
		}
	}
	for i := range len(good) {
		bad := bytes.Clone(good)
		bad[i] ^= 0x41
		if _, err := wasmsnap.ReadImage(bytes.NewReader(bad), int64(len(bad)), false); err == nil {
			t.Errorf("byte %d flipped: accepted", i)
		}
		// Checked by the caller: whatever the flip, no fault, and an
		// image accepted is within its pages.
		if got, err := wasmsnap.ReadImage(bytes.NewReader(bad), int64(len(bad)), true); err == nil {
			for _, r := range got.Runs {
				if int(r.Off)+len(r.Data) > int(got.Pages)*65536 {
					t.Errorf("byte %d flipped: a run past the image's pages", i)
				}
			}
		}
	}
	beyond := (&wasmsnap.Image{Pages: 1, Runs: []wasmsnap.Run{{Off: 65534, Data: []byte("abc")}}}).Marshal()
	overlap := (&wasmsnap.Image{Pages: 1, Runs: []wasmsnap.Run{{Off: 8, Data: []byte("abc")}, {Off: 9, Data: []byte("x")}}}).Marshal()
	huge := (&wasmsnap.Image{Pages: 70000}).Marshal()
	for name, b := range map[string][]byte{"a run beyond its pages": beyond, "runs out of order": overlap, "more than 4 GiB": huge,
		"trailing bytes": append(bytes.Clone(good[:len(good)-4]), 0, 0, 0, 0, 0)} {
		if _, err := wasmsnap.ReadImage(bytes.NewReader(b), int64(len(b)), true); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
