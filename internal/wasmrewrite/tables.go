package wasmrewrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Tables are the one part of a WebAssembly instance that wazero does not
// let an embedder bound: linear memory goes through the MemoryAllocator
// (internal/wasmlimit), but a table is a Go slice of 8-byte references that wazero
// sizes to the table's declared minimum at instantiation and grows on
// table.grow up to the declared maximum, or without end when there is
// none. A guest declaring (table 100000000 funcref), or growing a table
// without a maximum by 2^26, costs the host 800 MiB or 512 MiB of heap that
// no memory limit sees.
//
// wazero v1.12 has no option for this, so the host fixes it in the bytes
// it compiles: before compiling, it reads the module's import and table
// sections and gives every table a maximum, so that all of a module's
// tables together hold at most a cap of references (the host's
// Limits.MaxTableElements). A table
// whose declared maximum fits keeps it; one without a maximum (or a larger
// one) gets the room that is left. wazero then enforces those maxima the
// way the specification says: table.grow past one returns -1 and the guest
// goes on. A module whose tables need more than the cap at their minimum
// cannot run and is refused at load, naming the table, its size and the
// limit. Only the compiled copy is rewritten; the module's digest and its
// signature stay those of the bytes its author shipped (as host/extism's
// relink does for imports).
//
// The same pass reads the memory declaration, so that a module whose
// initial memory is over the limit is refused before the host allocates
// it, and the imports that are not functions (moat provides none).

// DefaultMaxTableElements is the default of the host's Limits.MaxTableElements:
// 2^20 references, 8 MiB of host memory. Real modules stay far below it
// (CPython 3.12: 5 903, ruby.wasm: 8 776, QuickJS: 546).
const DefaultMaxTableElements = 1 << 20

// MaxTableElementsCeiling is the most the host's Limits.MaxTableElements may be set
// to: wazero's own bound on a table's size (2^27 references, 1 GiB).
const MaxTableElementsCeiling = 1 << 27

// Layout is what ReadLayout reads of a module's binary: what a host needs
// to know of a module before compiling it, and what InstrumentDeadline
// needs to rewrite it.
type Layout struct {
	// Imports are the module's imports that are not functions (tables,
	// memories, globals, tags), in order: a host providing functions only
	// refuses a module with any.
	Imports []Import
	// Memory is the module's memory, defined or imported (the largest,
	// should it declare several); nil when it has none.
	Memory *Memory

	tables []tableDecl
	counts [14]uint32 // entries declared by each section, by id
	// importedFuncs is the number of imported functions: a defined
	// function's index in the function index space starts after them.
	importedFuncs uint32
	// importsInterrupt: the module imports from InterruptModule, which
	// only InstrumentDeadline may add.
	importsInterrupt bool
}

// The most entries a module may declare per section. wazero keeps a Go
// value per entry, and compiled code per function, costing the host far
// more than the bytes declaring it: measured on wazero v1.12, an empty
// function (4 bytes) costs 260 bytes of heap for as long as the module is
// loaded, a global (5 bytes) 56, a passive element or data segment (3-4
// bytes) 70-100, an export (3 bytes) 50 before it is even read (wazero
// sizes its export map by the count). A 64 MiB upload of empty functions
// would hold 4 GiB. Real modules stay far below these (CPython 3.12: 9 800
// functions, 90 globals, a few hundred types, imports and exports;
// ruby.wasm: 17 000 functions). Tables count once more at instantiation
// (a table instance each); modules use one, a few with reference types.
var sectionCaps = []struct {
	id   byte
	what string
	max  uint32
}{
	{1, "types", 1 << 16},
	{2, "imports", 1 << 16},
	{3, "functions", 1 << 18},
	{4, "tables", 1 << 10},
	{6, "globals", 1 << 16},
	{7, "exports", 1 << 16},
	{9, "element segments", 1 << 16},
	{10, "function bodies", 1 << 18},
	{11, "data segments", 1 << 16},
	{13, "tags", 1 << 16},
}

// CheckCounts refuses a module declaring more entries than sectionCaps.
func (lay *Layout) CheckCounts() error {
	for _, c := range sectionCaps {
		if n := lay.counts[c.id]; n > c.max {
			return fmt.Errorf("the module defines %d %s; this host loads at most %d (each costs host memory beyond its bytes in the module)", n, c.what, c.max)
		}
	}
	return nil
}

// tableDecl is one table, imported or defined, in table index order.
type tableDecl struct {
	index    int
	imported string // "module.name" of an imported table; "" for a defined one
	min      uint32
	max      uint32
	hasMax   bool
	section  byte // where its limits are: 2 (import) or 4 (table)
	limStart int  // the limits' bytes in the module: [limStart, limEnd)
	limEnd   int
}

func (t tableDecl) String() string {
	if t.imported != "" {
		return fmt.Sprintf("table %d (imported as %s)", t.index, t.imported)
	}
	return fmt.Sprintf("table %d", t.index)
}

// Import is an import of a table, memory, global or tag.
type Import struct {
	Kind         string // "table", "memory", "global" or "tag"
	Module, Name string
}

// Memory is a memory's declared size in 64 KiB pages.
type Memory struct {
	Min, Max uint32
	HasMax   bool
	Imported bool
}

// TableLimitError is a module whose tables need more references at their
// minimum than Limits.MaxTableElements allows.
type TableLimitError struct {
	Tables []string // the tables, as "table 0" or "table 1 (imported as env.t)"
	Min    uint64   // the references they need at their minimum
	Limit  uint32
}

func (e *TableLimitError) Error() string {
	what := e.Tables[0] + " declares"
	if len(e.Tables) > 1 {
		what = strings.Join(e.Tables, " and ") + " together declare"
	}
	return fmt.Sprintf("%s %d elements at its minimum; a module's tables may hold at most %d elements (%d MiB of host memory): raise Limits.MaxTableElements to load it",
		what, e.Min, e.Limit, uint64(e.Limit)*8>>20)
}

// LimitTables returns wasm with every table bounded so that the module's
// tables hold at most limit references together, whether it changed
// anything, and what it read. It returns wasm itself when no table needed
// a new maximum. An error is a
// module it cannot read (which wazero would refuse too) or a
// *TableLimitError.
func LimitTables(wasm []byte, limit uint32) ([]byte, bool, *Layout, error) {
	lay, err := ReadLayout(wasm)
	if err != nil {
		return nil, false, nil, err
	}
	var sum uint64
	var names []string
	for _, t := range lay.tables {
		sum += uint64(t.min)
		names = append(names, t.String())
	}
	if sum > uint64(limit) {
		if len(lay.tables) > 1 {
			// name the tables that matter: the largest first
			sorted := slices.Clone(lay.tables)
			slices.SortStableFunc(sorted, func(a, b tableDecl) int { return int(int64(b.min) - int64(a.min)) })
			names = names[:0]
			for _, t := range sorted {
				if t.min > 0 {
					names = append(names, fmt.Sprintf("%s (%d)", t, t.min))
				}
			}
			if len(names) == 1 {
				names[0] = sorted[0].String()
				sum = uint64(sorted[0].min)
			}
		}
		return nil, false, nil, &TableLimitError{Tables: names, Min: sum, Limit: limit}
	}
	maxes := shareTableRoom(lay.tables, uint32(uint64(limit)-sum))
	type edit struct {
		start, end int
		enc        []byte
	}
	edits := map[byte][]edit{}
	for i, t := range lay.tables {
		if t.hasMax && t.max <= maxes[i] {
			continue
		}
		enc := binary.AppendUvarint([]byte{0x01}, uint64(t.min))
		enc = binary.AppendUvarint(enc, uint64(maxes[i]))
		edits[t.section] = append(edits[t.section], edit{t.limStart, t.limEnd, enc})
	}
	if len(edits) == 0 {
		return wasm, false, lay, nil
	}
	// Rebuild the import and table sections with the new limits, and
	// copy every other byte as it was.
	out := make([]byte, 0, len(wasm)+16*len(lay.tables))
	out = append(out, wasm[:8]...)
	err = walkSections(wasm, func(id byte, start, bodyStart, bodyEnd int) error {
		es, ok := edits[id]
		if !ok {
			out = append(out, wasm[start:bodyEnd]...)
			return nil
		}
		var body []byte
		at := bodyStart
		for _, e := range es {
			body = append(body, wasm[at:e.start]...)
			body = append(body, e.enc...)
			at = e.end
		}
		body = append(body, wasm[at:bodyEnd]...)
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
		return nil
	})
	if err != nil {
		return nil, false, nil, err
	}
	return out, true, lay, nil
}

// shareTableRoom gives each table a maximum: its minimum plus a share of
// room, the references left under the cap. Tables that ask for little
// (a declared maximum close to the minimum) get what they ask; the rest
// is split evenly among those that ask for more (max-min fairness), so
// no table's growth is starved by another's declaration.
func shareTableRoom(tables []tableDecl, room uint32) []uint32 {
	want := make([]uint64, len(tables))
	order := make([]int, len(tables))
	for i, t := range tables {
		want[i] = 1 << 32 // no maximum: as much as it can get
		if t.hasMax {
			want[i] = uint64(t.max - t.min)
		}
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case want[a] < want[b]:
			return -1
		case want[a] > want[b]:
			return 1
		}
		return 0
	})
	maxes := make([]uint32, len(tables))
	left := uint64(room)
	for k, i := range order {
		share := min(want[i], left/uint64(len(order)-k))
		left -= share
		maxes[i] = tables[i].min + uint32(share)
	}
	return maxes
}

// ReadLayout reads the tables, non-function imports and memory of a
// module, and checks every count and length it declares before wazero's
// decoder sees them (checkSections).
func ReadLayout(wasm []byte) (*Layout, error) {
	if string(wasm[:min(4, len(wasm))]) != "\x00asm" {
		return nil, errors.New("not a WebAssembly binary")
	}
	if len(wasm) < 8 {
		return nil, fmt.Errorf("the module is %d bytes, shorter than the 8-byte header", len(wasm))
	}
	if v := binary.LittleEndian.Uint32(wasm[4:8]); v != 1 {
		return nil, fmt.Errorf("binary format version %d; this host reads version 1", v)
	}
	lay := &Layout{}
	var last byte // the last non-custom section's id, as the order rule sees it
	err := walkSections(wasm, func(id byte, start, bodyStart, bodyEnd int) error {
		var ok bool
		if last, ok = sectionOrder(id, last); !ok {
			return fmt.Errorf("%s section at byte %d: out of order or repeated (each section appears at most once, in the order the specification gives)", sectionName(id), start)
		}
		r := &wasmReader{b: wasm[:bodyEnd], off: bodyStart}
		var err error
		switch id {
		case 0:
			err = checkCustom(r)
		case 1:
			lay.counts[id], err = checkTypes(r)
		case 2:
			err = lay.readImports(r)
		case 3:
			// Each defined function's type index against the types
			// declared: wazero v1.12 indexes its type section by it
			// unchecked when it validates a call, and a module calling a
			// function of type 48 among 4 types panicked the host
			// (found by FuzzLimitTables in make test's fuzz smoke).
			lay.counts[id], err = r.vec(minEntryBytes[id], sectionName(id))
			for i := uint32(0); err == nil && i < lay.counts[id]; i++ {
				err = lay.checkTypeIndex(r, fmt.Sprintf("function %d", lay.importedFuncs+i))
			}
		case 6, 9, 10, 11, 13:
			lay.counts[id], err = r.vec(minEntryBytes[id], sectionName(id))
			if err == nil {
				err = checkEntries(id, r, lay.counts[id])
			}
		case 4:
			err = lay.readTables(r)
		case 5:
			err = lay.readMemories(r)
		case 7:
			lay.counts[id], err = r.vec(minEntryBytes[id], "exports")
			if err == nil {
				err = checkEntries(id, r, lay.counts[id])
			}
		case 8, 12: // start function, data count: one index
			_, err = r.u32()
		default:
			return fmt.Errorf("section id %d at byte %d: no such section", id, start)
		}
		if err == nil && r.off != bodyEnd && id != 0 && id != 3 && id != 6 {
			err = fmt.Errorf("%d bytes after its last entry", bodyEnd-r.off)
		}
		if err != nil {
			return fmt.Errorf("%s section: %w", sectionName(id), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lay, nil
}

// sectionOrder is the specification's order rule, as wazero applies it:
// custom sections anywhere, the others at most once and in order, with
// the tag section (13) between memory and global and data count (12)
// between element and code. It returns the id the next section is
// compared with. ReadLayout applies it so that the module it reads is the
// module wazero would read: a second table section would otherwise have
// its limits rewritten with the first one's (LimitTables edits by section
// id).
func sectionOrder(id, last byte) (byte, bool) {
	rank := func(id byte) int {
		switch id {
		case 13:
			return 5*2 + 1 // after memory, before global
		case 12:
			return 9*2 + 1 // after element, before code
		}
		return int(id) * 2
	}
	if id == 0 {
		return last, true
	}
	if id > 13 {
		return last, false
	}
	return id, last == 0 || rank(id) > rank(last)
}

// Declared counts. wazero's decoder allocates for a vector at the length
// it declares, before reading its entries: a 14-byte module declaring
// 2^24 exports cost 880 MiB and 2 s, one declaring a function type of
// 2^32-1 parameters ended the process (Go's "fatal error: out of memory",
// which no recover catches), 2^32-1 bytes of data segment or 2^28 function
// names 4 to 6 GiB of address space (wazero v1.12). The host checks every
// count the module declares against the bytes left to hold its entries,
// and the counts whose entries cost far more than their bytes against
// sectionCaps, before wazero reads any of it.

// minEntryBytes is the fewest bytes an entry of each section's vector
// takes; a count whose entries could not fit in the section is refused.
var minEntryBytes = [14]int{
	1:  2, // type: 0x60 or a rec group, at least two bytes
	2:  4, // import: two names and a kind and its index
	3:  1, // function: a type index
	4:  3, // table: reference type, flags, minimum
	5:  2, // memory: flags, minimum
	6:  3, // global: type, mutability, expression
	7:  3, // export: name, kind, index
	9:  3, // element segment: prefix, and two more
	10: 2, // code: size and a locals count
	11: 2, // data segment: prefix and length
	13: 2, // tag: attribute and type index
}

// maxFunctionLocals is the most locals a function may declare, the limit
// browsers' engines apply (V8's kV8MaxWasmFunctionLocals). wazero takes
// up to 2^32 and makes a slice of that many before it reads the body:
// two bytes declaring 2^28 locals cost the host 256 MiB.
const maxFunctionLocals = 50000

// vec reads a vector's length and refuses one whose entries, each at
// least size bytes, cannot fit in what is left of the section.
func (r *wasmReader) vec(size int, what string) (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, fmt.Errorf("%s: count: %w", what, err)
	}
	if left := len(r.b) - r.off; uint64(n)*uint64(size) > uint64(left) {
		return 0, &sizeError{fmt.Sprintf("declares %d %s in %d bytes: each takes at least %d", n, what, left, size)}
	}
	return n, nil
}

// sizeError is a count or length wazero must not see: it would allocate
// by it.
type sizeError struct{ msg string }

func (e *sizeError) Error() string { return e.msg }

// checkEntries reads the entries of the sections whose entries hold
// vectors or names of their own (exports, element segments, function
// bodies, data segments) and checks those; the others it leaves to wazero.
// An export's name is checked against the bytes behind it: wazero
// allocates a name by its declared length before it reads it (81 bytes
// declaring a 100 MB name cost 100 MB, found by FuzzLimitTables).
func checkEntries(id byte, r *wasmReader, n uint32) error {
	var check func(*wasmReader) error
	switch id {
	case 7:
		check = func(r *wasmReader) error {
			if _, err := r.name(); err != nil {
				return err
			}
			if _, err := r.byte(); err != nil { // func, table, memory, global or tag
				return err
			}
			_, err := r.u32()
			return err
		}
	case 9:
		check = checkElement
	case 10:
		check = checkCode
	case 11:
		check = checkData
	case 13:
		check = func(r *wasmReader) error {
			if _, err := r.byte(); err != nil {
				return err
			}
			_, err := r.u32()
			return err
		}
	default:
		return nil
	}
	for i := uint32(0); i < n; i++ {
		if err := check(r); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return nil
}

// checkCustom checks a custom section's name and, in the "name" section
// (which wazero decodes whatever the configuration), every count.
func checkCustom(r *wasmReader) error {
	name, err := r.name()
	if err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if name != "name" {
		return nil
	}
	for r.off < len(r.b) {
		sub, err := r.byte()
		if err != nil {
			return err
		}
		size, err := r.u32()
		if err != nil {
			return fmt.Errorf("names: subsection %d: size: %w", sub, err)
		}
		switch sub {
		case 0: // module name
			_, err = r.name()
		case 1: // function names: index, name
			err = checkNameMap(r)
		case 2: // local names: function index, then a name map
			var n uint32
			if n, err = r.vec(2, "functions' local names"); err != nil {
				break
			}
			for i := uint32(0); i < n && err == nil; i++ {
				if _, err = r.u32(); err == nil {
					err = checkNameMap(r)
				}
			}
		default:
			err = r.skip(int(size))
		}
		if err != nil {
			return fmt.Errorf("names: subsection %d: %w", sub, err)
		}
	}
	return nil
}

func checkNameMap(r *wasmReader) error {
	n, err := r.vec(2, "names")
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if _, err := r.u32(); err != nil {
			return err
		}
		if _, err := r.name(); err != nil {
			return err
		}
	}
	return nil
}

// checkTypes checks the type section: function types (0x60) and
// recursion groups of them (0x4e), each parameter and result list.
func checkTypes(r *wasmReader) (uint32, error) {
	n, err := r.vec(minEntryBytes[1], "types")
	if err != nil {
		return 0, err
	}
	total := n
	for i := uint32(0); i < n; i++ {
		b, err := r.byte()
		if err != nil {
			return 0, err
		}
		group := uint32(1)
		if b == 0x4e {
			if group, err = r.vec(3, "types in a recursion group"); err != nil {
				return 0, fmt.Errorf("type %d: %w", i, err)
			}
			total += group // cannot overflow: each takes three bytes of the module
		} else {
			r.off--
		}
		for j := uint32(0); j < group; j++ {
			if err := checkFuncType(r); err != nil {
				return 0, fmt.Errorf("type %d: %w", i, err)
			}
		}
	}
	return total, nil
}

func checkFuncType(r *wasmReader) error {
	if b, err := r.byte(); err != nil {
		return err
	} else if b != 0x60 {
		return fmt.Errorf("%#x is not a function type", b)
	}
	for _, what := range []string{"parameters", "results"} {
		n, err := r.vec(1, what)
		if err != nil {
			return err
		}
		for k := uint32(0); k < n; k++ {
			if err := r.valueType(); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkElement checks one element segment (its eight forms) and skips
// it.
func checkElement(r *wasmReader) error {
	prefix, err := r.u32()
	if err != nil {
		return err
	}
	if prefix > 7 {
		return fmt.Errorf("element segment prefix %d", prefix)
	}
	if prefix == 2 || prefix == 6 { // table index
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	if prefix&1 == 0 { // active: an offset
		if err := r.skipConstExpr(); err != nil {
			return err
		}
	}
	if prefix&3 != 0 { // element kind (0x00) or reference type
		b, err := r.byte()
		if err != nil {
			return err
		}
		if prefix&4 != 0 {
			if err := r.refTypeAfter(b); err != nil {
				return err
			}
		}
	}
	if prefix&4 == 0 { // function indices
		n, err := r.vec(1, "function indices")
		if err != nil {
			return err
		}
		for i := uint32(0); i < n; i++ {
			if _, err := r.u32(); err != nil {
				return err
			}
		}
		return nil
	}
	n, err := r.vec(1, "expressions")
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if err := r.skipConstExpr(); err != nil {
			return err
		}
	}
	return nil
}

// checkCode checks one function body's locals and skips the body.
func checkCode(r *wasmReader) error {
	size, err := r.u32()
	if err != nil {
		return err
	}
	if left := len(r.b) - r.off; uint64(size) > uint64(left) {
		return &sizeError{fmt.Sprintf("a body of %d bytes in the %d bytes left", size, left)}
	}
	end := r.off + int(size)
	body := &wasmReader{b: r.b[:end], off: r.off}
	n, err := body.vec(2, "local declarations")
	if err != nil {
		return err
	}
	var sum uint64
	for i := uint32(0); i < n; i++ {
		k, err := body.u32()
		if err != nil {
			return err
		}
		if sum += uint64(k); sum > maxFunctionLocals {
			return &sizeError{fmt.Sprintf("declares %d locals or more; a function may have at most %d", sum, maxFunctionLocals)}
		}
		if err := body.valueType(); err != nil {
			return err
		}
	}
	r.off = end
	return nil
}

// checkData checks one data segment's length and skips it.
func checkData(r *wasmReader) error {
	prefix, err := r.u32()
	if err != nil {
		return err
	}
	switch prefix {
	case 0:
		err = r.skipConstExpr()
	case 1:
	case 2:
		if _, err = r.u32(); err == nil {
			err = r.skipConstExpr()
		}
	default:
		return fmt.Errorf("data segment prefix %d", prefix)
	}
	if err != nil {
		return err
	}
	n, err := r.vec(1, "bytes of data")
	if err != nil {
		return err
	}
	return r.skip(int(n))
}

func sectionName(id byte) string {
	if int(id) < len(sectionNames) {
		return sectionNames[id]
	}
	return fmt.Sprintf("section %d", id)
}

var sectionNames = []string{"custom", "type", "import", "function", "table", "memory", "global", "export", "start", "element", "code", "data", "data count", "tag"}

// Section is one section of a module: its id, and where it starts, where
// its body (after the id and size) starts, and where it ends, as offsets
// into the module's bytes.
type Section struct {
	ID                    byte
	Start, BodyStart, End int
}

// WalkSections calls f for each section of wasm (a module, its 8-byte
// header not checked here), in order, after checking only the section's
// size against the module's end. It is the one walk of a module's
// sections: the rewrites here and bundle's custom-section reader use it.
func WalkSections(wasm []byte, f func(Section) error) error {
	r := &wasmReader{b: wasm, off: 8}
	for r.off < len(wasm) {
		start := r.off
		id, err := r.byte()
		if err != nil {
			return err
		}
		size, err := r.u32()
		if err != nil {
			return fmt.Errorf("section %d at byte %d: size: %w", id, start, err)
		}
		if uint64(r.off)+uint64(size) > uint64(len(wasm)) {
			// a sizeError: wazero decodes the section's entries before it
			// compares their length with the section's
			return &sizeError{fmt.Sprintf("section %d at byte %d is %d bytes long, past the end of the module (%d bytes)", id, start, size, len(wasm))}
		}
		bodyStart := r.off
		r.off += int(size)
		if err := f(Section{ID: id, Start: start, BodyStart: bodyStart, End: r.off}); err != nil {
			return err
		}
	}
	return nil
}

// walkSections is WalkSections for the rewrites, which take the offsets
// apart.
func walkSections(wasm []byte, f func(id byte, start, bodyStart, bodyEnd int) error) error {
	return WalkSections(wasm, func(s Section) error { return f(s.ID, s.Start, s.BodyStart, s.End) })
}

func (lay *Layout) readImports(r *wasmReader) error {
	n, err := r.vec(minEntryBytes[2], "imports")
	if err != nil {
		return err
	}
	lay.counts[2] = n
	for i := uint32(0); i < n; i++ {
		mod, err := r.name()
		if err != nil {
			return fmt.Errorf("import %d: module name: %w", i, err)
		}
		name, err := r.name()
		if err != nil {
			return fmt.Errorf("import %d: field name: %w", i, err)
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		what := mod + "." + name
		if mod == InterruptModule {
			lay.importsInterrupt = true
		}
		switch kind {
		case 0x00: // function: type index
			lay.importedFuncs++
			err = lay.checkTypeIndex(r, "the imported function")
		case 0x01: // table
			lay.Imports = append(lay.Imports, Import{"table", mod, name})
			err = lay.readTable(r, 2, what)
		case 0x02: // memory
			lay.Imports = append(lay.Imports, Import{"memory", mod, name})
			var m Memory
			if m, err = readMemory(r); err == nil {
				m.Imported = true
				lay.setMemory(m)
			}
		case 0x03: // global: value type, mutability
			lay.Imports = append(lay.Imports, Import{"global", mod, name})
			if err = r.valueType(); err == nil {
				_, err = r.byte()
			}
		case 0x04: // tag: attribute, type index
			lay.Imports = append(lay.Imports, Import{"tag", mod, name})
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return fmt.Errorf("import %s: unknown kind %#x", what, kind)
		}
		if err != nil {
			return fmt.Errorf("import %s: %w", what, err)
		}
	}
	return nil
}

// checkTypeIndex reads a function's type index and refuses one past the
// types the type section declared (which comes first, or there is none).
func (lay *Layout) checkTypeIndex(r *wasmReader, what string) error {
	t, err := r.u32()
	if err != nil {
		return err
	}
	if t >= lay.counts[1] {
		return fmt.Errorf("%s is of type %d, but the module declares %d types", what, t, lay.counts[1])
	}
	return nil
}

func (lay *Layout) readTables(r *wasmReader) error {
	n, err := r.vec(minEntryBytes[4], "tables")
	if err != nil {
		return err
	}
	lay.counts[4] = n
	for i := uint32(0); i < n; i++ {
		if err := lay.readTable(r, 4, ""); err != nil {
			return fmt.Errorf("table %d: %w", len(lay.tables), err)
		}
	}
	return nil
}

// readTable reads a table type (and, in the table section, the
// initializer of the function-references form 0x40 0x00).
func (lay *Layout) readTable(r *wasmReader, section byte, imported string) error {
	b, err := r.byte()
	if err != nil {
		return err
	}
	withInit := false
	if b == 0x40 && section == 4 {
		if z, err := r.byte(); err != nil || z != 0 {
			return errors.New("malformed table initializer prefix")
		}
		withInit = true
		if b, err = r.byte(); err != nil {
			return err
		}
	}
	if err := r.refTypeAfter(b); err != nil {
		return err
	}
	t := tableDecl{index: len(lay.tables), imported: imported, section: section, limStart: r.off}
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if flags > 1 {
		return fmt.Errorf("table limits flags %#x: a table is neither shared nor 64-bit here", flags)
	}
	if t.min, err = r.u32(); err != nil {
		return err
	}
	if flags == 1 {
		if t.max, err = r.u32(); err != nil {
			return err
		}
		if t.max < t.min {
			return fmt.Errorf("maximum %d is below its minimum %d", t.max, t.min)
		}
		t.hasMax = true
	}
	t.limEnd = r.off
	lay.tables = append(lay.tables, t)
	if withInit {
		return r.skipConstExpr()
	}
	return nil
}

func (lay *Layout) readMemories(r *wasmReader) error {
	n, err := r.vec(minEntryBytes[5], "memories")
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		m, err := readMemory(r)
		if err != nil {
			return fmt.Errorf("memory %d: %w", i, err)
		}
		lay.setMemory(m)
	}
	return nil
}

// setMemory keeps the largest memory: wazero runs modules with one.
func (lay *Layout) setMemory(m Memory) {
	if lay.Memory == nil || m.Min > lay.Memory.Min {
		lay.Memory = &m
	}
}

func readMemory(r *wasmReader) (Memory, error) {
	var m Memory
	flags, err := r.byte()
	if err != nil {
		return m, err
	}
	if flags > 3 {
		return m, fmt.Errorf("memory limits flags %#x: 64-bit memories are not supported", flags)
	}
	if m.Min, err = r.u32(); err != nil {
		return m, err
	}
	if flags&1 != 0 {
		if m.Max, err = r.u32(); err != nil {
			return m, err
		}
		m.HasMax = true
	}
	return m, nil
}

// wasmReader reads the binary format's integers, names and types.
type wasmReader struct {
	b   []byte
	off int
}

var errTruncated = errors.New("unexpected end of the module")

func (r *wasmReader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// u32 reads an unsigned LEB128 of at most 5 bytes.
func (r *wasmReader) u32() (uint32, error) {
	var v uint64
	for i := 0; i < 5; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			if v > 1<<32-1 {
				return 0, errors.New("LEB128 integer overflows 32 bits")
			}
			return uint32(v), nil
		}
	}
	return 0, errors.New("LEB128 integer longer than 5 bytes")
}

// sleb skips a signed LEB128 of at most n bytes.
func (r *wasmReader) sleb(n int) error {
	for i := 0; i < n; i++ {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
	}
	return fmt.Errorf("LEB128 integer longer than %d bytes", n)
}

func (r *wasmReader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	if left := len(r.b) - r.off; uint64(n) > uint64(left) {
		return "", &sizeError{fmt.Sprintf("a name of %d bytes in the %d bytes left", n, left)}
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

// refTypeAfter reads the rest of a reference type whose first byte is b:
// a short form (funcref 0x70, externref 0x6f, ...), or 0x63/0x64 and a
// heap type.
func (r *wasmReader) refTypeAfter(b byte) error {
	if b == 0x63 || b == 0x64 {
		return r.sleb(5)
	}
	if b < 0x69 || b > 0x74 {
		return fmt.Errorf("%#x is not a reference type", b)
	}
	return nil
}

func (r *wasmReader) valueType() error {
	b, err := r.byte()
	if err != nil {
		return err
	}
	switch b {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b: // i32 i64 f32 f64 v128
		return nil
	}
	return r.refTypeAfter(b)
}

// skipConstExpr skips a constant expression up to and including its end.
func (r *wasmReader) skipConstExpr() error {
	for {
		if r.off < len(r.b) && r.b[r.off] == 0x0b { // end
			r.off++
			return nil
		}
		if err := r.skipConstOp(); err != nil {
			return err
		}
	}
}

// skipConstOp skips one instruction of a constant expression.
func (r *wasmReader) skipConstOp() error {
	op, err := r.byte()
	if err != nil {
		return err
	}
	switch op {
	case 0x41: // i32.const
		err = r.sleb(5)
	case 0x42: // i64.const
		err = r.sleb(10)
	case 0x43: // f32.const
		err = r.skip(4)
	case 0x44: // f64.const
		err = r.skip(8)
	case 0x23, 0xd2: // global.get, ref.func
		_, err = r.u32()
	case 0xd0: // ref.null heaptype
		err = r.sleb(5)
	case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant arithmetic
	case 0xfd: // v128.const
		var sub uint32
		if sub, err = r.u32(); err == nil {
			if sub != 12 {
				return fmt.Errorf("vector opcode %d in a constant expression", sub)
			}
			err = r.skip(16)
		}
	default:
		return fmt.Errorf("opcode %#x in a constant expression", op)
	}
	return err
}

func (r *wasmReader) skip(n int) error {
	if r.off+n > len(r.b) {
		return errTruncated
	}
	r.off += n
	return nil
}
