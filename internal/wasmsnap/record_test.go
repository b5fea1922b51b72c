package wasmsnap_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/moat-sandbox/moat/internal/wasmsnap"
)

// tiny is a module of two functions named "a" (i32) and "b" (i64), each
// empty, and one global.
var tiny = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x09, 0x02, 0x60, 0x01, 0x7f, 0x00, 0x60, 0x01, 0x7e, 0x00, // types
	0x03, 0x03, 0x02, 0x00, 0x01, // functions
	0x06, 0x06, 0x01, 0x7f, 0x01, 0x41, 0x00, 0x0b, // a global
	0x0a, 0x07, 0x02, 0x02, 0x00, 0x0b, 0x02, 0x00, 0x0b, // bodies
	0x00, 0x0e, 0x04, 'n', 'a', 'm', 'e', 0x01, 0x07, 0x02, 0x00, 0x01, 'a', 0x01, 0x01, 'b', // names
}

// TestRecordParam: the recording function sets the new global, last of
// the exported ones, to its argument; a function that does not exist,
// takes no i32 first or is not named, and bytes that are no module, are
// refused.
func TestRecordParam(t *testing.T) {
	ctx := context.Background()
	a, err := wasmsnap.FunctionIndex(tiny, "a")
	if err != nil || a != 0 {
		t.Fatalf("a: %d %v", a, err)
	}
	rec, err := wasmsnap.RecordParam(tiny, a)
	if err != nil {
		t.Fatal(err)
	}
	prep, globals, err := wasmsnap.Prepare(rec, map[string]uint32{"run": a})
	if err != nil || globals != 2 {
		t.Fatalf("prepare: %d globals, %v", globals, err)
	}
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	mod, err := rt.Instantiate(ctx, prep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mod.ExportedFunction(wasmsnap.EntryPrefix+"run").Call(ctx, 12345); err != nil {
		t.Fatal(err)
	}
	if g := mod.ExportedGlobal(wasmsnap.GlobalExport(1)).Get(); g != 12345 {
		t.Fatalf("recorded %d", g)
	}
	for _, tt := range []struct {
		name string
		err  func() error
		want string
	}{
		{"an i64 first", func() error { _, err := wasmsnap.RecordParam(tiny, 1); return err }, "not an i32"},
		{"not defined", func() error { _, err := wasmsnap.RecordParam(tiny, 9); return err }, "not defined"},
		{"not named", func() error { _, err := wasmsnap.FunctionIndex(tiny, "c"); return err }, "names no function"},
		{"no name section", func() error { _, err := wasmsnap.FunctionIndex(tiny[:len(tiny)-16], "a"); return err }, "names no function"},
		{"not a module", func() error { _, err := wasmsnap.RecordParam([]byte("not wasm"), 0); return err }, "not a WebAssembly"},
		{"cut", func() error { _, err := wasmsnap.RecordParam(tiny[:30], 0); return err }, "wasmsnap"},
	} {
		if err := tt.err(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}
