package wasmsnap_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// fixture is testdata/wat/snapshot.wat, its function 5 (entry) unexported.
func fixture(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../testdata/snapshot.wasm")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func call(t *testing.T, mod api.Module, name string, args ...uint64) uint64 {
	t.Helper()
	r, err := mod.ExportedFunction(name).Call(context.Background(), args...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(r) == 0 {
		return 0
	}
	return r[0]
}

// An image carries memory and globals into a fresh instance: what the
// first instance wrote (over its data segment, in memory it grew) and its
// globals, nothing of the fresh instance's own data segment where the
// image has zeros; and through a marshalled copy just the same.
func TestCaptureRestore(t *testing.T) {
	ctx := context.Background()
	prepared, globals, err := wasmsnap.Prepare(fixture(t), map[string]uint32{"first": 5})
	if err != nil {
		t.Fatal(err)
	}
	if globals != 2 {
		t.Fatalf("globals: %d, want 2", globals)
	}
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, prepared)
	if err != nil {
		t.Fatal(err)
	}
	if fn, ok := cm.ExportedFunctions()[wasmsnap.EntryPrefix+"first"]; !ok || !wasmsnap.EntrySignature(fn, 2) {
		t.Fatalf("the entry is not exported as int f(int, int): %v", cm.ExportedFunctions())
	}
	first, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	call(t, first, "grow", 2)
	call(t, first, "set", 16, 0)           // "init" of "initial" is zeros now
	call(t, first, "set", 2*65536+8, 1234) // in grown memory
	img, err := wasmsnap.Capture(first, globals)
	if err != nil {
		t.Fatal(err)
	}
	first.Close(ctx)
	if img.Pages != 3 || img.Globals[0] != 1234 || img.Globals[1] != 1234<<32 {
		t.Fatalf("image: %d pages, globals %v", img.Pages, img.Globals)
	}
	again, err := wasmsnap.Unmarshal(img.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	for name, im := range map[string]*wasmsnap.Image{"captured": img, "unmarshalled": again} {
		t.Run(name, func(t *testing.T) {
			mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
			if err != nil {
				t.Fatal(err)
			}
			defer mod.Close(ctx)
			if err := im.Restore(mod); err != nil {
				t.Fatal(err)
			}
			if got := mod.Memory().Size(); got != 3*65536 {
				t.Errorf("memory: %d bytes, want 3 pages", got)
			}
			if got := call(t, mod, "get", 16); got != 0 {
				t.Errorf("the fresh instance's data segment survived the restore: %#x", got)
			}
			if b, _ := mod.Memory().Read(20, 3); string(b) != "ial" {
				t.Errorf("data beyond what was overwritten: %q", b)
			}
			if got := call(t, mod, "get", 2*65536+8); got != 1234 {
				t.Errorf("grown memory: %d", got)
			}
			if g, h := call(t, mod, "g"), call(t, mod, "h"); g != 1234 || h != 1234<<32 {
				t.Errorf("globals: %d %d", g, h)
			}
			if got := call(t, mod, wasmsnap.EntryPrefix+"first", 20, 1); got != 'i'+1 {
				t.Errorf("entry: %d", got)
			}
		})
	}
}

// A damaged or hostile image file is refused, never restored in part.
func TestUnmarshalRefuses(t *testing.T) {
	img := &wasmsnap.Image{Pages: 1, Globals: []uint64{5}, Runs: []wasmsnap.Run{{Off: 8, Data: []byte("abc")}}}
	good := img.Marshal()
	if _, err := wasmsnap.Unmarshal(good); err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 1
	beyond := (&wasmsnap.Image{Pages: 1, Runs: []wasmsnap.Run{{Off: 65534, Data: []byte("abc")}}}).Marshal()
	overlap := (&wasmsnap.Image{Pages: 1, Runs: []wasmsnap.Run{{Off: 8, Data: []byte("abc")}, {Off: 9, Data: []byte("x")}}}).Marshal()
	huge := (&wasmsnap.Image{Pages: 70000}).Marshal()
	for name, b := range map[string][]byte{
		"empty": nil, "truncated": good[:len(good)-5], "a bit flipped": flipped, "not an image": []byte("\x00asm\x01\x00\x00\x00xxxx"),
		"a run beyond its pages": beyond, "runs out of order": overlap, "more than 4 GiB": huge,
	} {
		if _, err := wasmsnap.Unmarshal(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Prepare refuses what it cannot do honestly: a module exporting a name
// it would add, an entry the module does not define, bytes that are not a
// module.
func TestPrepareRefuses(t *testing.T) {
	prepared, _, err := wasmsnap.Prepare(fixture(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		wasm    []byte
		entries map[string]uint32
		want    string
	}{
		"prepared twice":     {prepared, nil, "already exports"},
		"no such function":   {fixture(t), map[string]uint32{"x": 99}, "does not define"},
		"not a module":       {[]byte("hello, world"), nil, "not a WebAssembly module"},
		"a truncated module": {fixture(t)[:40], nil, "truncated"},
	} {
		if _, _, err := wasmsnap.Prepare(tc.wasm, tc.entries); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
}

// TestWriteTo: WriteTo writes Marshal's bytes, and MarshaledSize is
// their length, for images of every part's shape.
func TestWriteTo(t *testing.T) {
	for name, img := range map[string]*wasmsnap.Image{
		"empty":  {},
		"pages":  {Pages: 3, Key: "k"},
		"global": {Pages: 1, Globals: []uint64{0, 1 << 40, 7}, Values: []uint64{300}},
		"runs":   {Pages: 2, Runs: []wasmsnap.Run{{Off: 0, Data: []byte{1, 2, 3}}, {Off: 70000, Data: bytes.Repeat([]byte{9}, 1000)}}, Key: strings.Repeat("x", 200)},
	} {
		var buf bytes.Buffer
		n, err := img.WriteTo(&buf)
		want := img.Marshal()
		if err != nil || n != int64(len(want)) || !bytes.Equal(buf.Bytes(), want) || img.MarshaledSize() != int64(len(want)) {
			t.Errorf("%s: WriteTo wrote %d bytes (%v), MarshaledSize %d, Marshal %d; same bytes: %v", name, n, err, img.MarshaledSize(), len(want), bytes.Equal(buf.Bytes(), want))
		}
		if _, err := wasmsnap.Unmarshal(buf.Bytes()); err != nil {
			t.Errorf("%s: what WriteTo wrote does not read back: %v", name, err)
		}
	}
}
