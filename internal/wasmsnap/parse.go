package wasmsnap

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// module is what Prepare reads of a module: just enough to add exports
// and to map DWARF's code offsets to function indices. The module is
// validated when it is compiled; here a malformed one is only not
// misread.
type module struct {
	wasm            []byte
	importedFuncs   uint32
	importedGlobals uint32
	globals         []struct{} // one per defined global
	exports         []export
	exportSection   [2]int // [start, end) of the whole section, or zero
	insertExportsAt int    // where a new export section goes
	bodies          []span // each function body, in its section
	// For RecordParam and FunctionIndex (record.go).
	sections      []section         // every section, in order
	globalSection [2]int            // [start, end) of the global section, or zero
	codeSection   [2]int            // [start, end) of the code section, or zero
	typeParams    [][]byte          // each type's parameter types
	funcTypes     []uint32          // each defined function's type
	funcNames     map[string]uint32 // the name section's function names
}

type section struct {
	id         byte
	name       string // a custom section's
	start, end int
}

type export struct {
	name  string
	kind  byte
	index uint32
}

type span struct{ start, end int }

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 || v > 1<<32-1 {
		r.err = fmt.Errorf("bad LEB128 at byte %d", r.off)
		return 0
	}
	r.off += n
	return uint32(v)
}

func (r *reader) byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail()
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *reader) bytes(n uint32) []byte {
	if r.err != nil || uint64(r.off)+uint64(n) > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	r.off += int(n)
	return r.b[r.off-int(n) : r.off]
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("truncated at byte %d", r.off)
	}
}

// skipConst skips a constant expression up to its end opcode. Constant
// expressions hold no nested blocks, so the first 0x0b that is an opcode
// ends it; the immediates of the opcodes allowed are read, not scanned.
func (r *reader) skipConst() {
	for r.err == nil {
		switch op := r.byte(); op {
		case 0x0b:
			return
		case 0x41, 0x42: // i32.const, i64.const: a signed LEB
			for r.err == nil && r.byte()&0x80 != 0 {
			}
		case 0x43:
			r.bytes(4)
		case 0x44:
			r.bytes(8)
		case 0x23, 0xd2: // global.get, ref.func
			r.u32()
		case 0xd0: // ref.null
			r.byte()
		case 0xfd: // v128.const
			r.u32()
			r.bytes(16)
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant arithmetic
		default:
			r.err = fmt.Errorf("opcode 0x%02x in a constant expression", op)
		}
	}
}

func parse(wasm []byte) (*module, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, errors.New("wasmsnap: not a WebAssembly module")
	}
	m := &module{wasm: wasm}
	r := &reader{b: wasm, off: 8}
	for r.off < len(wasm) && r.err == nil {
		start := r.off
		id := r.byte()
		size := r.u32()
		body := r.bytes(size)
		if r.err != nil {
			break
		}
		s := &reader{b: body}
		sec := section{id: id, start: start, end: r.off}
		switch id {
		case 0:
			sec.name = string(s.bytes(s.u32()))
			if sec.name == "name" && s.err == nil {
				m.readNames(s)
			}
			s.err = nil // a custom section's content is no reason to refuse the module
		case 1:
			for range s.u32() {
				if s.byte() != 0x60 {
					s.err = fmt.Errorf("a type that is not a function")
					break
				}
				m.typeParams = append(m.typeParams, s.bytes(s.u32()))
				s.bytes(s.u32())
			}
		case 3:
			for range s.u32() {
				m.funcTypes = append(m.funcTypes, s.u32())
			}
		case 2:
			for range s.u32() {
				s.bytes(s.u32())
				s.bytes(s.u32())
				switch kind := s.byte(); kind {
				case 0:
					m.importedFuncs++
					s.u32()
				case 1: // table: reftype, limits
					s.byte()
					s.limits()
				case 2:
					s.limits()
				case 3:
					m.importedGlobals++
					s.byte()
					s.byte()
				default:
					s.err = fmt.Errorf("import kind %d", kind)
				}
			}
		case 6:
			m.globalSection = [2]int{start, r.off}
			n := s.u32()
			for range n {
				s.byte() // value type
				s.byte() // mutability
				s.skipConst()
				m.globals = append(m.globals, struct{}{})
			}
		case 7:
			m.exportSection = [2]int{start, r.off}
			for range s.u32() {
				name := string(s.bytes(s.u32()))
				kind := s.byte()
				m.exports = append(m.exports, export{name: name, kind: kind, index: s.u32()})
			}
		case 10:
			m.codeSection = [2]int{start, r.off}
			for range s.u32() {
				from := s.off // DWARF may address the size field or what follows it
				s.bytes(s.u32())
				m.bodies = append(m.bodies, span{from, s.off})
			}
		}
		if s.err != nil {
			return nil, fmt.Errorf("wasmsnap: section %d: %w", id, s.err)
		}
		m.sections = append(m.sections, sec)
		// A new export section goes after the sections that precede it
		// in the specification's order (type 1 … global 6), before the
		// rest (start 8 onwards, and data count 12, which sits between
		// element 9 and code 10).
		if id >= 1 && id <= 7 {
			m.insertExportsAt = r.off
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("wasmsnap: %w", r.err)
	}
	if m.insertExportsAt == 0 {
		m.insertExportsAt = 8
	}
	return m, nil
}

func (r *reader) limits() {
	switch flags := r.byte(); flags {
	case 0x00:
		r.u32()
	case 0x01:
		r.u32()
		r.u32()
	default:
		r.err = fmt.Errorf("limits flags 0x%02x", flags)
	}
}

// withExports returns the module with add appended to its exports.
func (m *module) withExports(add []export) ([]byte, error) {
	have := map[string]bool{}
	for _, e := range m.exports {
		have[e.name] = true
	}
	all := append(append([]export{}, m.exports...), add...)
	for _, e := range add {
		if have[e.name] {
			return nil, fmt.Errorf("wasmsnap: the module already exports %q, a name the host reserves", e.name)
		}
	}
	body := binary.AppendUvarint(nil, uint64(len(all)))
	for _, e := range all {
		body = binary.AppendUvarint(body, uint64(len(e.name)))
		body = append(body, e.name...)
		body = append(body, e.kind)
		body = binary.AppendUvarint(body, uint64(e.index))
	}
	section := append([]byte{7}, binary.AppendUvarint(nil, uint64(len(body)))...)
	section = append(section, body...)
	from, to := m.insertExportsAt, m.insertExportsAt
	if m.exportSection != [2]int{} {
		from, to = m.exportSection[0], m.exportSection[1]
	}
	out := make([]byte, 0, len(m.wasm)+len(section))
	out = append(out, m.wasm[:from]...)
	out = append(out, section...)
	return append(out, m.wasm[to:]...), nil
}

// readNames reads the name section's function names (subsection 1), at
// most 1<<20 of them; a malformed one leaves the names read so far.
func (m *module) readNames(r *reader) {
	m.funcNames = map[string]uint32{}
	for r.err == nil && r.off < len(r.b) {
		id := r.byte()
		sub := &reader{b: r.bytes(r.u32())}
		if id != 1 || r.err != nil {
			continue
		}
		for n := sub.u32(); n > 0 && n <= 1<<20 && sub.err == nil; n-- {
			idx := sub.u32()
			name := string(sub.bytes(sub.u32()))
			if sub.err == nil {
				if _, dup := m.funcNames[name]; !dup {
					m.funcNames[name] = idx
				}
			}
		}
	}
}
