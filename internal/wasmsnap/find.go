package wasmsnap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// found ends FindEntry's run at the function it was looking for.
type found struct{ index uint32 }

func (f found) Error() string { return fmt.Sprintf("found function %d", f.index) }

// FindEntry runs wasm, a WASI command, with args (argv), which make it
// handle marker as a C string, and returns the index of the first function
// it defines that takes params i32 values, returns an i32, and is called
// with a pointer to marker's bytes first and the values fixed gives (by
// parameter position) after: for CPython run as
// `python -c "exec('MARKER')"`, PyRun_StringFlags(str, Py_file_input=257,
// globals, locals, flags), which exec calls with the string's UTF-8. (A
// stripped, link-time-optimised CPython names none of its functions and
// has PyRun_SimpleStringFlags inlined away.) The run stops there. It runs in wazero's interpreter, which needs
// no compile (~1 s for CPython in all), with a listener on the functions
// of that signature; the caller keeps the answer (per module digest) and
// checks it by using it: an entry that is not what it seemed fails the
// image that needs it, never a run.
func FindEntry(ctx context.Context, wasm []byte, args []string, marker string, params int, fixed map[int]uint64) (uint32, error) {
	if len(marker) < 8 {
		return 0, errors.New("wasmsnap: a marker shorter than 8 bytes could be found by chance")
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithDebugInfoEnabled(false))
	defer rt.Close(ctx)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return 0, err
	}
	want := []byte(marker)
	for i := range fixed {
		if i <= 0 || i >= params {
			return 0, fmt.Errorf("wasmsnap: fixed parameter %d is not one of 1..%d", i, params-1)
		}
	}
	factory := experimental.FunctionListenerFactoryFunc(func(def api.FunctionDefinition) experimental.FunctionListener {
		if _, _, imported := def.Import(); imported || !EntrySignature(def, params) {
			return nil
		}
		return experimental.FunctionListenerFunc(func(_ context.Context, mod api.Module, def api.FunctionDefinition, ps []uint64, _ experimental.StackIterator) {
			for i, v := range fixed {
				if uint32(ps[i]) != uint32(v) {
					return
				}
			}
			if b, ok := mod.Memory().Read(uint32(ps[0]), uint32(len(want))); ok && bytes.Equal(b, want) {
				panic(found{def.Index()})
			}
		})
	})
	cm, err := rt.CompileModule(experimental.WithFunctionListenerFactory(ctx, factory), wasm)
	if err != nil {
		return 0, fmt.Errorf("wasmsnap: compile: %w", err)
	}
	_, err = rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithArgs(args...).WithStdout(io.Discard).WithStderr(io.Discard))
	var f found
	if err != nil && errors.As(err, &f) {
		return f.index, nil
	}
	if err == nil {
		err = errors.New("it ended")
	}
	return 0, fmt.Errorf("wasmsnap: no function was called with the marker before the run ended: %w", err)
}
