package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Tables are the one part of a WebAssembly instance that wazero does not
// let an embedder bound: linear memory goes through the MemoryAllocator
// (memory.go), but a table is a Go slice of 8-byte references that wazero
// sizes to the table's declared minimum at instantiation and grows on
// table.grow up to the declared maximum, or without end when there is
// none. A guest declaring (table 100000000 funcref), or growing a table
// without a maximum by 2^26, costs the host 800 MiB or 512 MiB of heap that
// no memory limit sees.
//
// wazero v1.12 has no option for this, so the host fixes it in the bytes
// it compiles: before compiling, it reads the module's import and table
// sections and gives every table a maximum, so that all of a module's
// tables together hold at most Limits.MaxTableElements references. A table
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

// DefaultMaxTableElements is the default of Limits.MaxTableElements:
// 2^20 references, 8 MiB of host memory. Real modules stay far below it
// (CPython 3.12: 5 903, ruby.wasm: 8 776, QuickJS: 546).
const DefaultMaxTableElements = 1 << 20

// MaxTableElementsCeiling is the most Limits.MaxTableElements may be set
// to: wazero's own bound on a table's size (2^27 references, 1 GiB).
const MaxTableElementsCeiling = 1 << 27

// layout is what the host reads from a module's binary before compiling
// it.
type layout struct {
	tables  []tableDecl
	imports []importDecl // imports that are not functions
	memory  *memoryDecl  // the module's memory, defined or imported
	counts  [14]uint32   // entries declared by each section, by id
}

// The most entries a module may declare per section. wazero keeps a Go
// value per entry, and compiled code per function, costing the host far
// more than the bytes declaring it: measured on wazero v1.12, an empty
// function (4 bytes) costs 260 bytes of heap for as long as the module is
// loaded, a global (5 bytes) 56, a passive element or data segment (3-4
// bytes) 70-100. A 64 MiB upload of empty functions would hold 4 GiB.
// Real modules stay far below these (CPython 3.12: 9 800 functions, 90
// globals; ruby.wasm: 17 000 functions).
var sectionCaps = []struct {
	id   byte
	what string
	max  uint32
}{
	{3, "functions", 1 << 18},
	{6, "globals", 1 << 16},
	{9, "element segments", 1 << 16},
	{11, "data segments", 1 << 16},
}

// checkCounts refuses a module declaring more entries than sectionCaps.
func (lay *layout) checkCounts() error {
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

// importDecl is an import of a table, memory, global or tag.
type importDecl struct {
	kind         string
	module, name string
}

// memoryDecl is a memory's declared size in 64 KiB pages.
type memoryDecl struct {
	min, max uint32
	hasMax   bool
	imported bool
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

// limitTables returns wasm with every table bounded so that the module's
// tables hold at most limit references together, whether it changed
// anything, and what it read. It returns wasm itself when no table needed
// a new maximum. An error is a
// module it cannot read (which wazero would refuse too) or a
// *TableLimitError.
func limitTables(wasm []byte, limit uint32) ([]byte, bool, *layout, error) {
	lay, err := readLayout(wasm)
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

// readLayout reads the tables, non-function imports and memory of a
// module.
func readLayout(wasm []byte) (*layout, error) {
	if string(wasm[:min(4, len(wasm))]) != "\x00asm" {
		return nil, errors.New("not a WebAssembly binary")
	}
	if len(wasm) < 8 {
		return nil, fmt.Errorf("the module is %d bytes, shorter than the 8-byte header", len(wasm))
	}
	if v := binary.LittleEndian.Uint32(wasm[4:8]); v != 1 {
		return nil, fmt.Errorf("binary format version %d; this host reads version 1", v)
	}
	lay := &layout{}
	err := walkSections(wasm, func(id byte, _, bodyStart, bodyEnd int) error {
		r := &wasmReader{b: wasm[:bodyEnd], off: bodyStart}
		var err error
		switch id {
		case 3, 6, 9, 11:
			lay.counts[id], err = r.u32()
			if err != nil {
				return fmt.Errorf("section %d: %w", id, err)
			}
			return nil
		case 2:
			err = lay.readImports(r)
		case 4:
			err = lay.readTables(r)
		case 5:
			err = lay.readMemories(r)
		default:
			return nil
		}
		if err == nil && r.off != bodyEnd {
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

func sectionName(id byte) string {
	switch id {
	case 2:
		return "import"
	case 4:
		return "table"
	case 5:
		return "memory"
	}
	return fmt.Sprintf("section %d", id)
}

// walkSections calls f for each section of wasm: its id, where it starts
// and where its body starts and ends.
func walkSections(wasm []byte, f func(id byte, start, bodyStart, bodyEnd int) error) error {
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
			return fmt.Errorf("section %d at byte %d is %d bytes long, past the end of the module (%d bytes)", id, start, size, len(wasm))
		}
		bodyStart := r.off
		r.off += int(size)
		if err := f(id, start, bodyStart, r.off); err != nil {
			return err
		}
	}
	return nil
}

func (lay *layout) readImports(r *wasmReader) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
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
		switch kind {
		case 0x00: // function: type index
			_, err = r.u32()
		case 0x01: // table
			lay.imports = append(lay.imports, importDecl{"table", mod, name})
			err = lay.readTable(r, 2, what)
		case 0x02: // memory
			lay.imports = append(lay.imports, importDecl{"memory", mod, name})
			var m memoryDecl
			if m, err = readMemory(r); err == nil {
				m.imported = true
				lay.setMemory(m)
			}
		case 0x03: // global: value type, mutability
			lay.imports = append(lay.imports, importDecl{"global", mod, name})
			if err = r.valueType(); err == nil {
				_, err = r.byte()
			}
		case 0x04: // tag: attribute, type index
			lay.imports = append(lay.imports, importDecl{"tag", mod, name})
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

func (lay *layout) readTables(r *wasmReader) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if err := lay.readTable(r, 4, ""); err != nil {
			return fmt.Errorf("table %d: %w", len(lay.tables), err)
		}
	}
	return nil
}

// readTable reads a table type (and, in the table section, the
// initializer of the function-references form 0x40 0x00).
func (lay *layout) readTable(r *wasmReader, section byte, imported string) error {
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

func (lay *layout) readMemories(r *wasmReader) error {
	n, err := r.u32()
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
func (lay *layout) setMemory(m memoryDecl) {
	if lay.memory == nil || m.min > lay.memory.min {
		lay.memory = &m
	}
}

func readMemory(r *wasmReader) (memoryDecl, error) {
	var m memoryDecl
	flags, err := r.byte()
	if err != nil {
		return m, err
	}
	if flags > 3 {
		return m, fmt.Errorf("memory limits flags %#x: 64-bit memories are not supported", flags)
	}
	if m.min, err = r.u32(); err != nil {
		return m, err
	}
	if flags&1 != 0 {
		if m.max, err = r.u32(); err != nil {
			return m, err
		}
		m.hasMax = true
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
	if uint64(r.off)+uint64(n) > uint64(len(r.b)) {
		return "", errTruncated
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
		op, err := r.byte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0b: // end
			return nil
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
		if err != nil {
			return err
		}
	}
}

func (r *wasmReader) skip(n int) error {
	if r.off+n > len(r.b) {
		return errTruncated
	}
	r.off += n
	return nil
}
