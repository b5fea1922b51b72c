package javascript

import (
	"bytes"
	"context"
	"testing"

	quickjswasi "github.com/paralin/go-quickjs-wasi"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/moat-sandbox/moat/internal/wasmsnap"
)

// TestRecordContext: the prebuilt qjs names JS_Eval and eval_buf; with
// JS_Eval's first argument recorded, a run leaves the JSContext's address
// in the last exported global, and the instrumented module still runs.
func TestRecordContext(t *testing.T) {
	ctx := context.Background()
	w := quickjswasi.QuickJSWASM
	eval, err := wasmsnap.FunctionIndex(w, recordFunction)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := wasmsnap.FunctionIndex(w, entryFunction)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := wasmsnap.RecordParam(w, eval)
	if err != nil {
		t.Fatal(err)
	}
	prep, globals, err := wasmsnap.Prepare(rec, map[string]uint32{"run": entry})
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	cm, err := rt.CompileModule(ctx, prep)
	if err != nil {
		t.Fatal(err)
	}
	if fn := cm.ExportedFunctions()[wasmsnap.EntryPrefix+"run"]; fn == nil || !wasmsnap.EntrySignature(fn, 5) {
		t.Fatalf("the entry: %v", fn)
	}
	var out bytes.Buffer
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithArgs("qjs", "--std", "-e", "print(6*7)").WithStdout(&out).WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mod.ExportedFunction("_start").Call(ctx); err != nil && !bytes.Contains([]byte(err.Error()), []byte("exit_code(0)")) {
		t.Fatal(err)
	}
	g := mod.ExportedGlobal(wasmsnap.GlobalExport(globals - 1)).Get()
	if out.String() != "42\n" || g == 0 {
		t.Fatalf("out %q, recorded %d", out.String(), g)
	}
}
