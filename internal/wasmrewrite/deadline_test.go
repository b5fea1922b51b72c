package wasmrewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// instrument is what the host's Load does to a module's bytes before
// compiling them.
func instrument(t testing.TB, wasm []byte) []byte {
	t.Helper()
	code, _, lay, err := LimitTables(wasm, DefaultMaxTableElements)
	if err != nil {
		t.Fatalf("LimitTables: %v", err)
	}
	out, err := InstrumentDeadline(code, lay, false)
	if err != nil {
		t.Fatalf("InstrumentDeadline: %v", err)
	}
	return out
}

// runExports instantiates wasm in rt (with the fixture's import env.g)
// and calls every export (each parameter 1000), in name order,
// returning each one's results or error.
func runExports(t *testing.T, rt wazero.Runtime, wasm []byte) map[string]string {
	t.Helper()
	ctx := context.Background()
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	defer cm.Close(ctx)
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	defer mod.Close(ctx)
	if s := mod.ExportedFunction(InterruptStartExport); s != nil {
		if _, err := s.Call(ctx); err != nil {
			t.Fatalf("start: %v", err)
		}
	}
	got := map[string]string{}
	defs := cm.ExportedFunctions()
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range defs {
			if !yield(n) {
				return
			}
		}
	}) {
		if name == InterruptStartExport {
			continue
		}
		params := make([]uint64, len(defs[name].ParamTypes()))
		for i := range params {
			params[i] = 1000
		}
		res, err := mod.ExportedFunction(name).Call(ctx, params...)
		got[name] = fmt.Sprint(res, err)
	}
	return got
}

// newPlainRuntime is a runtime like the host's (no CloseOnContextDone,
// the interrupt module) with the global and the function the
// interrupt_ops fixture imports.
func newPlainRuntime(t *testing.T) wazero.Runtime {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(false))
	t.Cleanup(func() { rt.Close(ctx) })
	if err := InstantiateYield(ctx, rt); err != nil {
		t.Fatal(err)
	}
	g := []byte("\x00asm\x01\x00\x00\x00" +
		"\x06\x06\x01\x7f\x00\x41\x2a\x0b" + // global i32 const 42
		"\x07\x05\x01\x01g\x03\x00") // export "g" global 0
	if _, err := rt.InstantiateWithConfig(ctx, g, wazero.NewModuleConfig().WithName("envg")); err != nil {
		t.Fatal(err)
	}
	_, err := rt.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithFunc(func(x uint32) uint32 { return x + 1 }).Export("inc").Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestInstrumentLoopsDifferential runs every fixture's exports as built
// and as instrumented: the results must be the same. interrupt_ops.wasm
// holds every kind of immediate in functions that loop (SIMD lanes,
// memory arguments with offsets, br_table, typed select, block types by
// index, bulk memory and table instructions, references).
func TestInstrumentLoopsDifferential(t *testing.T) {
	for _, name := range []string{"interrupt_ops", "hostile_plugin", "plugin", "abi2", "bigmem", "rawhost"} {
		t.Run(name, func(t *testing.T) {
			wasm, err := os.ReadFile("../../testdata/" + name + ".wasm")
			if err != nil {
				t.Fatal(err)
			}
			rt := newPlainRuntime(t)
			if name != "interrupt_ops" {
				// the others import moat and WASI: compare what compiles
				// and what each declares, not what runs
				ctx := context.Background()
				for _, b := range [][]byte{wasm, instrument(t, wasm)} {
					cm, err := rt.CompileModule(ctx, b)
					if err != nil {
						t.Fatalf("compile: %v", err)
					}
					cm.Close(ctx)
				}
				return
			}
			want := runExports(t, rt, wasm)
			got := runExports(t, rt, instrument(t, wasm))
			if len(want) < 9 {
				t.Fatalf("only %d exports ran: %v", len(want), want)
			}
			for k, v := range want {
				if strings.Contains(v, "error") {
					t.Errorf("%s failed as built: %s", k, v)
				}
				if got[k] != v {
					t.Errorf("%s: instrumented %s, as built %s", k, got[k], v)
				}
			}
		})
	}
}

// TestInstrumentLoopsShape checks what the rewrite adds: the yield
// import, the fuel global, a check per loop, the start section turned into
// an export, defined functions renumbered; and what it refuses.
func TestInstrumentLoopsShape(t *testing.T) {
	hdr := "\x00asm\x01\x00\x00\x00"
	types := "\x01\x04\x01\x60\x00\x00"                    // (func)
	funcs := "\x03\x02\x01\x00"                            // one function of type 0
	spin := "\x0a\x09\x01\x07\x00\x03\x40\x0c\x00\x0b\x0b" // (loop (br 0))
	flat := "\x0a\x04\x01\x02\x00\x0b"                     // an empty body
	tests := []struct {
		name      string
		wasm      string
		loops     int
		start     bool
		refused   string
		exportsIn []string
	}{
		{name: "no global, no export section", wasm: hdr + types + funcs + spin, loops: 1},
		{name: "no sections at all", wasm: hdr},
		{name: "no loop", wasm: hdr + types + funcs + flat},
		{name: "start section", wasm: hdr + types + funcs + "\x08\x01\x00" + flat, start: true},
		{name: "start and exports", wasm: hdr + types + funcs + "\x07\x05\x01\x01f\x00\x00" + "\x08\x01\x00" + spin,
			loops: 1, start: true, exportsIn: []string{"f"}},
		{name: "reserved export name", wasm: hdr + types + funcs + "\x07\x0e\x01\x0amoat:start\x00\x00" + flat,
			refused: `exports "moat:start", a name the host reserves`},
		{name: "reserved import module", wasm: hdr + types + "\x02\x18\x01\x0emoat:interrupt\x05yield\x00\x00",
			refused: `imports from "moat:interrupt", a module name the host reserves`},
		{name: "unknown opcode", wasm: hdr + types + funcs + "\x0a\x05\x01\x03\x00\x06\x0b",
			refused: "opcode 0x6 at byte 1 of the body"},
		{name: "truncated immediate", wasm: hdr + types + funcs + "\x0a\x05\x01\x03\x00\x41\x80",
			refused: "function 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wasm := []byte(tc.wasm)
			lay, err := ReadLayout(wasm)
			if err != nil {
				t.Fatalf("ReadLayout: %v", err)
			}
			out, err := InstrumentDeadline(wasm, lay, false)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("got %v, want an error containing %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(out, loopCheck(0, 0)); n != tc.loops {
				t.Errorf("%d checks, want %d", n, tc.loops)
			}
			ctx := context.Background()
			rt := wazero.NewRuntime(ctx)
			defer rt.Close(ctx)
			if err := InstantiateYield(ctx, rt); err != nil {
				t.Fatal(err)
			}
			cm, err := rt.CompileModule(ctx, out)
			if err != nil {
				t.Fatalf("the rewritten module does not compile: %v", err)
			}
			exports := cm.ExportedFunctions()
			if _, ok := exports[InterruptStartExport]; ok != tc.start {
				t.Errorf("start exported: %v, want %v", ok, tc.start)
			}
			for _, n := range tc.exportsIn {
				if _, ok := exports[n]; !ok {
					t.Errorf("export %q lost", n)
				}
			}
			if imp := cm.ImportedFunctions(); len(imp) != 1 {
				t.Errorf("imports %d functions, want the yield alone", len(imp))
			}
			if _, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("")); err != nil {
				t.Fatalf("instantiate: %v (a start section left in would spin here)", err)
			}
		})
	}
}

// spinModule is a module whose export spin loops for ever calling
// nothing, instrumented.
func spinModule(t testing.TB) []byte {
	wasm := []byte("\x00asm\x01\x00\x00\x00" +
		"\x01\x04\x01\x60\x00\x00" + "\x03\x02\x01\x00" +
		"\x07\x08\x01\x04spin\x00\x00" +
		"\x0a\x09\x01\x07\x00\x03\x40\x0c\x00\x0b\x0b")
	lay, err := ReadLayout(wasm)
	if err != nil {
		t.Fatal(err)
	}
	out, err := InstrumentDeadline(wasm, lay, false)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInterruptStopsSpinningGuest: a guest spinning in a loop that calls
// nothing is ended at its deadline, with wazero's exit code for one, and
// when its context is canceled, with the code for that.
func TestInterruptStopsSpinningGuest(t *testing.T) {
	testenv.Timing(t)
	for _, rc := range []struct {
		name string
		cfg  wazero.RuntimeConfig
	}{{"compiler", wazero.NewRuntimeConfigCompiler()}, {"interpreter", wazero.NewRuntimeConfigInterpreter()}} {
		t.Run(rc.name, func(t *testing.T) {
			ctx := context.Background()
			rt := wazero.NewRuntimeWithConfig(ctx, rc.cfg)
			defer rt.Close(ctx)
			if err := InstantiateYield(ctx, rt); err != nil {
				t.Fatal(err)
			}
			mod, err := rt.InstantiateWithConfig(ctx, spinModule(t), wazero.NewModuleConfig().WithName(""))
			if err != nil {
				t.Fatal(err)
			}
			dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err = mod.ExportedFunction("spin").Call(dctx)
			var exit *sys.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != sys.ExitCodeDeadlineExceeded {
				t.Fatalf("got %v, want the deadline's exit", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("stopped after %s", took)
			}
			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(20*time.Millisecond, cancel)
			_, err = mod.ExportedFunction("spin").Call(cctx)
			if !errors.As(err, &exit) || exit.ExitCode() != sys.ExitCodeContextCanceled {
				t.Fatalf("got %v, want the cancellation's exit", err)
			}
			// No deadline, no cancellation: closing the module (a host
			// closing) ends it too.
			time.AfterFunc(20*time.Millisecond, func() { mod.Close(ctx) })
			if _, err = mod.ExportedFunction("spin").Call(ctx); err == nil {
				t.Fatal("a closed module's spin returned no error")
			}
		})
	}
}

// TestSpinningOnEveryProcessor: more guests spin than there are
// processors (GOMAXPROCS), each under its own deadline. Go cannot preempt
// machine code, so a design in which another goroutine has to act at the
// deadline (set a flag, close the module) waits for a processor that
// never comes: every guest spins for ever, and so does the garbage
// collector's stop-the-world. The fuel's call into yield is where the
// scheduler, the collector and the deadline get their turn.
func TestSpinningOnEveryProcessor(t *testing.T) {
	testenv.Timing(t)
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(false))
	defer rt.Close(ctx)
	if err := InstantiateYield(ctx, rt); err != nil {
		t.Fatal(err)
	}
	cm, err := rt.CompileModule(ctx, spinModule(t))
	if err != nil {
		t.Fatal(err)
	}
	n := 2*runtime.GOMAXPROCS(0) + 1
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		go func() {
			mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(fmt.Sprint("spin", i)))
			if err != nil {
				errs <- err
				return
			}
			dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err = mod.ExportedFunction("spin").Call(dctx)
			errs <- err
		}()
	}
	go runtime.GC() // a stop-the-world while they spin
	for range n {
		select {
		case err := <-errs:
			var exit *sys.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != sys.ExitCodeDeadlineExceeded {
				t.Errorf("got %v, want the deadline's exit", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d guests spinning on %d processors were not all stopped within 30 s", n, runtime.GOMAXPROCS(0))
		}
	}
	t.Logf("%d spinning guests on %d processors stopped %s after their 200 ms deadline", n, runtime.GOMAXPROCS(0), time.Since(start)-200*time.Millisecond)
}

// FuzzInstrumentDeadline is a differential test of the rewrite against
// wazero's validation of the module as its author built it. Whatever
// bytes the table pass accepts: when wazero compiles them, the rewrite
// either refuses them (a size or a name the host reserves) or writes a
// module wazero compiles with the same exports plus the host's; when
// wazero refuses them, the rewrite refuses them too, or writes a module
// wazero refuses as well. The second half is the escape of issue 27: an
// index one past the module's own named the counter the rewrite adds,
// and a module that wazero refused as built was compiled and ran past
// every deadline. It never panics or hangs.
func FuzzInstrumentDeadline(f *testing.F) {
	for _, s := range append(realModuleSeeds(f), hostileSeeds()...) {
		f.Add(s.wasm)
	}
	for _, s := range reachSeeds() {
		f.Add(s)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithMemoryLimitPages(maxMemoryPages))
	f.Cleanup(func() { rt.Close(ctx) })
	if err := InstantiateYield(ctx, rt); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, wasm []byte) {
		watchdog := time.AfterFunc(20*time.Second, func() {
			debug.SetTraceback("all")
			panic(fmt.Sprintf("FuzzInstrumentDeadline: one input (%d bytes) ran for 20 s", len(wasm)))
		})
		defer watchdog.Stop()
		code, _, lay, err := LimitTables(wasm, DefaultMaxTableElements)
		if err != nil || lay.CheckCounts() != nil {
			return
		}
		out, ierr := InstrumentDeadline(code, lay, false)
		cm, cerr := rt.CompileModule(ctx, code)
		if cerr != nil {
			if ierr != nil || benignRefusal(cerr) {
				return
			}
			if icm, err := rt.CompileModule(ctx, out); err == nil {
				icm.Close(ctx)
				t.Fatalf("wazero refuses the module as built (%v), and compiles its rewrite", cerr)
			}
			return
		}
		defer cm.Close(ctx)
		if ierr != nil {
			var se *sizeError
			if errors.As(ierr, &se) || errors.Is(ierr, errTruncated) || strings.Contains(ierr.Error(), "reserves") {
				return
			}
			t.Fatalf("InstrumentDeadline refuses a module wazero compiles: %v", ierr)
		}
		icm, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("the instrumented module does not compile: %v", err)
		}
		defer icm.Close(ctx)
		for name := range cm.ExportedFunctions() {
			if _, ok := icm.ExportedFunctions()[name]; !ok {
				t.Fatalf("export %q lost", name)
			}
		}
	})
}

// maxMemoryPages is the host's most memory a module may have
// (host.MaxMemoryLimitPages, 4 GiB): the fuzz runtime's limit.
const maxMemoryPages = 65536

// benignRefusal reports whether wazero refused a module for a reason
// that names no index and that a rewrite may lawfully remove: wazero
// v1.12 refuses a custom section with an empty payload when it is the
// module's last section (bytes.Reader reports EOF for a read of zero
// bytes at the end), and the rewrite may append sections after it.
func benignRefusal(err error) bool {
	return strings.Contains(err.Error(), "failed to read custom section name")
}

// reachSeeds are modules that name, one past their own, an entry of each
// index space the rewrite extends: globals (get, set, export, constant
// expressions), types (call_indirect, block types), functions (call,
// ref.func, element segments, exports, the start section), and a start
// function of the wrong type. wazero refuses each as built.
func reachSeeds() [][]byte {
	hdr := "\x00asm\x01\x00\x00\x00"
	typ := "\x01\x04\x01\x60\x00\x00"
	fn := "\x03\x02\x01\x00"
	tab := "\x04\x04\x01\x70\x00\x01"
	exp := "\x07\x0a\x01\x06_start\x00\x00"
	body := func(code string) string { // one function: no locals, code, end
		b := "\x00" + code + "\x0b"
		return "\x0a" + string(rune(len(b)+2)) + "\x01" + string(rune(len(b))) + b
	}
	var seeds [][]byte
	for _, m := range []string{
		hdr + typ + fn + exp + body("\x41\x00\x24\x00"),                                      // global.set 0 of none: the counter
		hdr + typ + fn + exp + body("\x23\x00\x1a"),                                          // global.get 0 of none
		hdr + typ + fn + "\x06\x06\x01\x7f\x01\x41\x00\x0b" + exp + body("\x41\x00\x24\x01"), // global.set 1 of 1
		hdr + typ + fn + "\x07\x11\x02\x06_start\x00\x00\x04fuel\x03\x00" + body(""),         // export global 0 of none
		hdr + typ + fn + tab + exp + body("\x41\x00\x11\x01\x00"),                            // call_indirect type 1 of 1
		hdr + typ + fn + exp + body("\x02\x01\x1a\x0b"),                                      // block of type 1 of 1
		hdr + typ + fn + exp + body("\x03\x01\x1a\x0b"),                                      // loop of type 1 of 1
		hdr + typ + fn + exp + body("\x10\x01"),                                              // call 1 of 1
		hdr + typ + fn + exp + body("\x10\xff\xff\xff\xff\x0f"),                              // call 2^32-1
		hdr + typ + fn + exp + body("\xd2\x01\x1a"),                                          // ref.func 1 of 1
		hdr + typ + fn + tab + exp + "\x09\x07\x01\x00\x41\x00\x0b\x01\x01" + body(""),       // element of function 1 of 1
		hdr + typ + fn + "\x07\x0a\x01\x06_start\x00\x01" + body(""),                         // export of function 1 of 1
		hdr + typ + fn + exp + "\x08\x01\x01" + body(""),                                     // start 1 of 1
		hdr + "\x01\x08\x02\x60\x00\x00\x60\x01\x7f\x00" + "\x03\x03\x02\x00\x01" + exp + "\x08\x01\x01" +
			"\x0a\x07\x02\x02\x00\x0b\x02\x00\x0b", // start of type (i32) -> ()
		hdr + typ + fn + "\x05\x03\x01\x00\x01" + exp + body("\x41\x00\x41\x00\x41\x00\xfc\x0b\x00"), // a valid memory.fill
	} {
		seeds = append(seeds, []byte(m))
	}
	return seeds
}

// TestReachSeedsRefused: each reach seed but the last (a valid module)
// is refused, by the rewrite or by wazero after it, and wazero refuses
// each as built: the fuzz test's seeds run its second half.
func TestReachSeedsRefused(t *testing.T) {
	ctx := context.Background()
	rt := newPlainRuntime(t)
	seeds := reachSeeds()
	for i, wasm := range seeds {
		valid := i == len(seeds)-1
		if _, err := rt.CompileModule(ctx, wasm); (err == nil) != valid {
			t.Errorf("seed %d: wazero as built: %v", i, err)
		}
		lay, err := ReadLayout(wasm)
		if err != nil {
			t.Fatalf("seed %d: ReadLayout: %v", i, err)
		}
		out, err := InstrumentDeadline(wasm, lay, false)
		if err == nil {
			_, err = rt.CompileModule(ctx, out)
		}
		if (err == nil) != valid {
			t.Errorf("seed %d: the rewrite: %v", i, err)
		}
	}
}
