package wasmrewrite

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// LimitTables reads bytes anyone can upload, before anything else of moat
// or wazero looks at them, and hands a rewritten copy to the compiler.
// FuzzLimitTables holds it to four promises:
//
//   - it never panics;
//   - its heap use follows the module's size, never a count the module
//     declares (a 40-byte module claiming 2^32 imports costs what 40 bytes
//     cost): at most limitTablesAllocPerByte bytes per module byte plus
//     limitTablesAllocBase;
//   - bytes it rewrites read back with every table bounded, all of them
//     together at most the limit, the same tables at the same minimum,
//     the same imports, memory and counts, every other section byte for
//     byte the same, and a second pass changes nothing;
//   - it agrees with wazero: what it refuses as unreadable wazero refuses
//     too, and what wazero compiles it rewrites into bytes wazero still
//     compiles, with the same imports and exports.
//
// `make test` runs the seeds (testdata/fuzz/FuzzLimitTables: the modules
// of ../../testdata and hostile variants of them, plus what fuzzing found);
// `make fuzz` explores further.
func FuzzLimitTables(f *testing.F) {
	for _, s := range append(realModuleSeeds(f), hostileSeeds()...) {
		f.Add(s.wasm, s.limit)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithMemoryLimitPages(maxMemoryPages))
	f.Cleanup(func() { rt.Close(ctx) })
	f.Fuzz(func(t *testing.T, wasm []byte, limit uint32) {
		// A hang is a failure too: end the process with every stack, and
		// the fuzzer keeps the input.
		watchdog := time.AfterFunc(20*time.Second, func() {
			debug.SetTraceback("all")
			panic(fmt.Sprintf("FuzzLimitTables: one input (%d bytes) ran for 20 s", len(wasm)))
		})
		defer watchdog.Stop()
		limit %= MaxTableElementsCeiling + 1 // Load refuses a larger cap
		out, changed, lay, err := LimitTables(wasm, limit)
		checkLimitTablesAlloc(t, wasm, limit)

		var tle *TableLimitError
		var size *sizeError
		switch {
		case errors.As(err, &tle):
			checkTableLimitError(t, wasm, limit, tle)
			return
		case errors.As(err, &size), errors.Is(err, errTruncated):
			// What wazero must not see: it would allocate by the count, or
			// read a count from the next section's bytes (it checks a
			// section's length only after decoding it).
			return
		case err != nil:
			if cm, cerr := compileRecovered(ctx, rt, wasm); cerr == nil {
				cm.Close(ctx)
				t.Fatalf("LimitTables refuses a module wazero compiles: %v", err)
			}
			return
		}
		if !changed && !bytes.Equal(out, wasm) {
			t.Fatal("LimitTables changed the bytes but says it did not")
		}
		checkRewritten(t, wasm, out, limit, lay)
		if lay.CheckCounts() != nil {
			return // refused at load before compiling
		}
		checkWazeroAgrees(t, ctx, rt, wasm, out)
	})
}

// The heap LimitTables may use: 256 bytes per module byte (each table,
// at least 3 bytes of the module, costs its declaration, its name and its
// share of the rewrite, about 350 bytes) and 64 KiB for error messages.
const (
	limitTablesAllocPerByte = 256
	limitTablesAllocBase    = 64 << 10
)

// What wazero may allocate compiling (with its interpreter) a module the
// host let through: generous for real code (a function costs a few
// hundred bytes of heap per byte of body at most), far below what a
// declared count made it allocate before the host checked them (GiBs from
// a few bytes).
const (
	wazeroAllocPerByte = 4 << 10
	wazeroAllocBase    = 16 << 20
)

// checkLimitTablesAlloc measures what one call allocates. The count is
// the process's, so a goroutine of the test framework could add to it:
// only an excess seen twice in a row is a failure (LimitTables is
// deterministic).
func checkLimitTablesAlloc(t *testing.T, wasm []byte, limit uint32) {
	t.Helper()
	bound := uint64(limitTablesAllocPerByte*len(wasm) + limitTablesAllocBase)
	var alloc uint64
	for range 2 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, _, _ = LimitTables(wasm, limit)
		runtime.ReadMemStats(&after)
		if alloc = after.TotalAlloc - before.TotalAlloc; alloc <= bound {
			return
		}
	}
	t.Fatalf("LimitTables allocated %d bytes for a module of %d bytes; the bound is %d", alloc, len(wasm), bound)
}

// checkTableLimitError: the refusal is right when the tables' minimums
// are indeed over the limit, and it names at least one of them.
func checkTableLimitError(t *testing.T, wasm []byte, limit uint32, tle *TableLimitError) {
	t.Helper()
	lay, err := ReadLayout(wasm)
	if err != nil {
		t.Fatalf("a TableLimitError for a module ReadLayout refuses: %v", err)
	}
	var sum uint64
	for _, tb := range lay.tables {
		sum += uint64(tb.min)
	}
	if sum <= uint64(limit) {
		t.Fatalf("refused with %v, but the tables need %d ≤ %d", tle, sum, limit)
	}
	if tle.Limit != limit || tle.Min > sum || tle.Min <= uint64(limit) || len(tle.Tables) == 0 {
		t.Fatalf("TableLimitError %+v for tables needing %d under limit %d", tle, sum, limit)
	}
}

// checkRewritten holds out (what LimitTables returned for wasm) to its
// promises.
func checkRewritten(t *testing.T, wasm, out []byte, limit uint32, lay *Layout) {
	t.Helper()
	got, err := ReadLayout(out)
	if err != nil {
		t.Fatalf("the rewritten module does not read back: %v", err)
	}
	if len(got.tables) != len(lay.tables) {
		t.Fatalf("%d tables after the rewrite, %d before", len(got.tables), len(lay.tables))
	}
	var sum uint64
	for i, tb := range got.tables {
		was := lay.tables[i]
		if !tb.hasMax {
			t.Fatalf("%s has no maximum after the rewrite", tb)
		}
		if tb.min != was.min || tb.imported != was.imported || tb.section != was.section {
			t.Fatalf("%s became %+v, was %+v", tb, tb, was)
		}
		if was.hasMax && tb.max > was.max {
			t.Fatalf("%s: maximum raised from %d to %d", tb, was.max, tb.max)
		}
		sum += uint64(tb.max)
	}
	if sum > uint64(limit) {
		t.Fatalf("the tables' maximums add up to %d, over the limit %d", sum, limit)
	}
	if !reflect.DeepEqual(got.Imports, lay.Imports) || !reflect.DeepEqual(got.Memory, lay.Memory) || got.counts != lay.counts {
		t.Fatalf("the rewrite changed what the module declares: imports %v → %v, memory %+v → %+v, counts %v → %v",
			lay.Imports, got.Imports, lay.Memory, got.Memory, lay.counts, got.counts)
	}
	before, after := sectionBodies(t, wasm), sectionBodies(t, out)
	if len(before) != len(after) {
		t.Fatalf("%d sections after the rewrite, %d before", len(after), len(before))
	}
	for i := range before {
		if before[i].id != after[i].id {
			t.Fatalf("section %d: id %d became %d", i, before[i].id, after[i].id)
		}
		if id := before[i].id; id != 2 && id != 4 && !bytes.Equal(before[i].body, after[i].body) {
			t.Fatalf("section %d (id %d) changed, but only the import and table sections hold table limits", i, id)
		}
	}
	again, changed, _, err := LimitTables(out, limit)
	if err != nil || changed || !bytes.Equal(again, out) {
		t.Fatalf("a second pass over the rewritten module: changed %v, err %v", changed, err)
	}
}

type sectionBody struct {
	id   byte
	body []byte
}

func sectionBodies(t *testing.T, wasm []byte) []sectionBody {
	t.Helper()
	var s []sectionBody
	if err := walkSections(wasm, func(id byte, _, bodyStart, bodyEnd int) error {
		s = append(s, sectionBody{id, wasm[bodyStart:bodyEnd]})
		return nil
	}); err != nil {
		t.Fatalf("sections: %v", err)
	}
	return s
}

// checkWazeroAgrees: a module wazero compiles still compiles after the
// rewrite, importing and exporting the same.
func checkWazeroAgrees(t *testing.T, ctx context.Context, rt wazero.Runtime, wasm, out []byte) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cm, err := rt.CompileModule(ctx, wasm)
	runtime.ReadMemStats(&after)
	if alloc, bound := after.TotalAlloc-before.TotalAlloc, uint64(wazeroAllocPerByte*len(wasm)+wazeroAllocBase); alloc > bound {
		t.Fatalf("wazero allocated %d bytes compiling a module of %d bytes the host let through; the bound is %d", alloc, len(wasm), bound)
	}
	if err != nil {
		return // the rewrite cannot make it worse; the host refuses it at compile
	}
	defer cm.Close(ctx)
	cm2, err := rt.CompileModule(ctx, out)
	if err != nil {
		t.Fatalf("wazero compiles the module but not its rewrite: %v", err)
	}
	defer cm2.Close(ctx)
	if a, b := moduleShape(cm), moduleShape(cm2); a != b {
		t.Fatalf("the rewrite changed the module's imports or exports:\n%s\nbecame\n%s", a, b)
	}
}

// moduleShape lists a compiled module's imports and exports.
func moduleShape(cm wazero.CompiledModule) string {
	var lines []string
	fn := func(kind string, d api.FunctionDefinition) {
		mod, name, imp := d.Import()
		exp := strings.Join(d.ExportNames(), ",")
		lines = append(lines, fmt.Sprintf("%s %v %s.%s export=%s %v→%v", kind, imp, mod, name, exp, d.ParamTypes(), d.ResultTypes()))
	}
	for _, d := range cm.ImportedFunctions() {
		fn("import func", d)
	}
	for _, d := range cm.ExportedFunctions() {
		fn("export func", d)
	}
	for _, d := range cm.ImportedMemories() {
		mod, name, _ := d.Import()
		mx, hasMax := d.Max()
		lines = append(lines, fmt.Sprintf("import memory %s.%s %d %d %v", mod, name, d.Min(), mx, hasMax))
	}
	for n, d := range cm.ExportedMemories() {
		mx, hasMax := d.Max()
		lines = append(lines, fmt.Sprintf("export memory %s %d %d %v", n, d.Min(), mx, hasMax))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// writeSeeds rewrites the hostile seeds in testdata/fuzz/FuzzLimitTables:
// go test ./internal/wasmrewrite -run TestLimitTablesSeeds -write-fuzz-seeds
var writeSeeds = flag.Bool("write-fuzz-seeds", false, "rewrite testdata/fuzz/FuzzLimitTables/seed-* from hostileSeeds")

// TestLimitTablesSeeds keeps the committed seed files what hostileSeeds
// builds (FuzzLimitTables adds them itself too; the files are the corpus
// a fuzzing run outside this binary starts from, and they read as a
// list of what is covered). The real modules of ../../testdata are added at
// run time, so a new fixture needs no new file here.
func TestLimitTablesSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzLimitTables")
	seeds := hostileSeeds()
	if *writeSeeds {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range seeds {
		path := filepath.Join(dir, "seed-"+s.name)
		data := fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\nuint32(%d)\n", s.wasm, s.limit)
		if *writeSeeds {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(have, data) {
			t.Errorf("seed %s is not committed as built (%v): go test ./internal/wasmrewrite -run TestLimitTablesSeeds -write-fuzz-seeds", path, err)
		}
	}
}

type limitTablesSeed struct {
	name  string
	wasm  []byte
	limit uint32
}

// realModuleSeeds are the modules of ../../testdata, each whole under the
// default cap and a cap of 1, and cut in half.
func realModuleSeeds(tb testing.TB) []limitTablesSeed {
	tb.Helper()
	var seeds []limitTablesSeed
	add := func(name string, limit uint32, b []byte) {
		seeds = append(seeds, limitTablesSeed{name, b, limit})
	}
	paths, err := filepath.Glob("../../testdata/*.wasm")
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no modules in ../../testdata (%v): run `make fixtures`", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(p), ".wasm")
		add(name, DefaultMaxTableElements, b)
		add(name+"-cap1", 1, b)
		add(name+"-half", DefaultMaxTableElements, b[:len(b)/2])
	}
	return seeds
}

// hostileSeeds are hand-made modules: truncated and over-long LEB128s,
// counts far beyond the bytes that follow, repeated, out-of-order and
// overlapping sections, and tables in every form.
func hostileSeeds() []limitTablesSeed {
	var seeds []limitTablesSeed
	add := func(name string, limit uint32, parts ...[]byte) {
		seeds = append(seeds, limitTablesSeed{name, slices.Concat(parts...), limit})
	}

	hdr := []byte("\x00asm\x01\x00\x00\x00")
	sec := func(id byte, body ...[]byte) []byte {
		b := slices.Concat(body...)
		return slices.Concat([]byte{id}, leb(uint64(len(b))), b)
	}
	funcref := []byte{0x70}
	noMax := func(min uint64) []byte { return slices.Concat([]byte{0}, leb(min)) }
	withMax := func(min, max uint64) []byte { return slices.Concat([]byte{1}, leb(min), leb(max)) }
	name := func(s string) []byte { return slices.Concat(leb(uint64(len(s))), []byte(s)) }
	tableImport := func(mod, field string, lim []byte) []byte {
		return slices.Concat(name(mod), name(field), []byte{0x01}, funcref, lim)
	}
	def := uint32(DefaultMaxTableElements)

	// LEB128s
	add("leb-section-size-truncated", def, hdr, []byte{4, 0x80, 0x80})
	add("leb-section-size-6-bytes", def, hdr, []byte{4, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00})
	add("leb-section-size-33-bits", def, hdr, []byte{4, 0xff, 0xff, 0xff, 0xff, 0x1f})
	add("leb-table-min-6-bytes", def, hdr, sec(4, leb(1), funcref, []byte{0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}))
	add("leb-table-min-33-bits", def, hdr, sec(4, leb(1), funcref, []byte{0, 0xff, 0xff, 0xff, 0xff, 0x1f}))
	add("leb-table-max-truncated", def, hdr, sec(4, leb(1), funcref, []byte{1, 0x01, 0x80}))
	add("leb-table-min-padded", def, hdr, sec(4, leb(1), funcref, []byte{0, 0x81, 0x80, 0x80, 0x80, 0x00}))
	add("leb-import-name-truncated", def, hdr, sec(2, leb(1), []byte{0xff, 0xff}))
	// counts far beyond the bytes
	add("count-imports-2^32-1", def, hdr, sec(2, leb(1<<32-1), tableImport("m", "t", noMax(1))))
	add("count-tables-2^32-1", def, hdr, sec(4, leb(1<<32-1), funcref, noMax(1)))
	add("count-memories-2^32-1", def, hdr, sec(5, leb(1<<32-1), noMax(1)))
	add("count-functions-2^32-1", def, hdr, sec(3, leb(1<<32-1)))
	add("count-globals-2^32-1", def, hdr, sec(6, leb(1<<32-1)))
	add("count-name-2^32-1", def, hdr, sec(2, leb(1), leb(1<<32-1), []byte("m")))
	// sections repeated, out of order, overlapping
	twoTables := sec(4, leb(1), funcref, noMax(10))
	add("sections-table-twice", def, hdr, twoTables, twoTables)
	add("sections-table-twice-cap1", 1, hdr, sec(4, leb(1), funcref, noMax(0)), sec(4, leb(1), funcref, noMax(0)))
	add("sections-import-twice", def, hdr, sec(2, leb(1), tableImport("m", "a", noMax(0))), sec(2, leb(1), tableImport("m", "b", noMax(0))))
	add("sections-table-before-import", def, hdr, sec(4, leb(1), funcref, noMax(1)), sec(2, leb(1), tableImport("m", "t", noMax(1))))
	add("sections-table-after-code", def, hdr, sec(10, leb(0)), twoTables)
	add("sections-custom-between", def, hdr, sec(0, name("x"), []byte("junk")), twoTables, sec(0, name("y")))
	overlap := sec(4, leb(1), funcref, noMax(3))
	overlap[1] += 3 // the table section's size takes in the next section's header and count
	add("sections-overlap-next", def, hdr, overlap, sec(5, leb(1), noMax(1)))
	add("sections-size-past-end", def, hdr, []byte{4, 0x20}, leb(1), funcref, noMax(1))
	add("sections-bytes-after-last-table", def, hdr, sec(4, leb(1), funcref, noMax(1), []byte{0x70}))
	// tables in every form
	add("table-max-below-min", def, hdr, sec(4, leb(1), funcref, withMax(5, 4)))
	add("table-max-2^32-1", def, hdr, sec(4, leb(1), funcref, withMax(0, 1<<32-1)))
	add("table-min-2^32-1", def, hdr, sec(4, leb(1), funcref, noMax(1<<32-1)))
	add("table-shared-flag", def, hdr, sec(4, leb(1), funcref, []byte{3, 1, 1}))
	add("table-64-bit-flag", def, hdr, sec(4, leb(1), funcref, []byte{4, 1}))
	add("table-externref-and-funcref", def, hdr, sec(4, leb(2), []byte{0x6f}, noMax(7), funcref, withMax(1, 1<<20)))
	add("table-nullable-ref", def, hdr, sec(4, leb(1), []byte{0x63, 0x70}, noMax(1)))
	add("table-initializer", def, hdr, sec(4, leb(1), []byte{0x40, 0x00}, funcref, noMax(2), []byte{0xd0, 0x70, 0x0b}))
	add("table-initializer-unterminated", def, hdr, sec(4, leb(1), []byte{0x40, 0x00}, funcref, noMax(2), []byte{0x41, 0x01}))
	add("table-imported-and-defined", def, hdr,
		sec(2, leb(2), tableImport("env", "t", noMax(3)), tableImport("env", "u", withMax(1, 9))),
		sec(4, leb(1), funcref, noMax(4)))
	add("table-imported-over-cap", 10, hdr, sec(2, leb(1), tableImport("env", "t", noMax(11))))
	var many []byte
	for range 1000 {
		many = append(many, 0x70, 0, 0)
	}
	add("table-1000-unbounded", def, hdr, sec(4, leb(1000), many))
	add("table-1000-unbounded-cap0", 0, hdr, sec(4, leb(1000), many))
	add("import-unknown-kind", def, hdr, sec(2, leb(1), name("m"), name("x"), []byte{0x07}))
	add("memory-64-bit", def, hdr, sec(5, leb(1), []byte{4, 1}))
	return seeds
}

// leb is v as an unsigned LEB128.
func leb(v uint64) []byte { return binary.AppendUvarint(nil, v) }

// compileRecovered compiles wasm, turning a panic of wazero's into an
// error: a module the host refuses never reaches wazero, so wazero's
// crashing on it (v1.12 panics on a call to a function whose type index is
// out of range) only says the host was right to refuse it.
func compileRecovered(ctx context.Context, rt wazero.Runtime, wasm []byte) (cm wazero.CompiledModule, err error) {
	defer func() {
		if r := recover(); r != nil {
			cm, err = nil, fmt.Errorf("wazero panicked: %v", r)
		}
	}()
	return rt.CompileModule(ctx, wasm)
}
