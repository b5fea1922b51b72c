package wasmsnap

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Recording a function's first argument. An entry may need a value the
// guest cannot say on its park line: QuickJS's eval takes the JSContext,
// whose address no script can learn. RecordParam gives the module a
// global of its own that a function sets to its first argument on every
// call, so the image captured later holds the value it was last called
// with (a global is copied and restored with the rest); FunctionIndex
// finds that function, and an entry, by the name the module's name
// section gives them (a build that keeps them: the prebuilt qjs does).

// FunctionIndex returns the index of the function the module's name
// section calls name.
func FunctionIndex(wasm []byte, name string) (uint32, error) {
	m, err := parse(wasm)
	if err != nil {
		return 0, err
	}
	if i, ok := m.funcNames[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("wasmsnap: the module names no function %q (a build without its name section?)", name)
}

// RecordParam returns wasm with one more global, defined last (a mutable
// i32, initially 0, exported by Prepare as the last of its globals), that
// function fn sets to its first argument, an i32, as it is entered. The
// DWARF sections are dropped: the code's offsets no longer hold.
func RecordParam(wasm []byte, fn uint32) ([]byte, error) {
	m, err := parse(wasm)
	if err != nil {
		return nil, err
	}
	if fn < m.importedFuncs || fn-m.importedFuncs >= uint32(len(m.bodies)) {
		return nil, fmt.Errorf("wasmsnap: function %d is not defined by the module", fn)
	}
	if p := m.firstParam(fn); p != 0x7f {
		return nil, fmt.Errorf("wasmsnap: function %d's first parameter is not an i32", fn)
	}
	if m.globalSection == [2]int{} || m.codeSection == [2]int{} {
		return nil, fmt.Errorf("wasmsnap: the module has no global or no code section")
	}
	g := m.importedGlobals + uint32(len(m.globals))
	// The global section: one more, i32 mutable = i32.const 0.
	gs := m.wasm[m.globalSection[0]:m.globalSection[1]]
	r := &reader{b: gs, off: 1}
	size := r.u32()
	body := gs[r.off : r.off+int(size)]
	br := &reader{b: body}
	n := br.u32()
	newGlobals := binary.AppendUvarint(nil, uint64(n+1))
	newGlobals = append(newGlobals, body[br.off:]...)
	newGlobals = append(newGlobals, 0x7f, 0x01, 0x41, 0x00, 0x0b)
	// The code section: fn's body begins with local.get 0, global.set g.
	cs := m.wasm[m.codeSection[0]:m.codeSection[1]]
	r = &reader{b: cs, off: 1}
	size = r.u32()
	code := cs[r.off : r.off+int(size)]
	b := m.bodies[fn-m.importedFuncs]
	fr := &reader{b: code, off: b.start}
	fsize := fr.u32()
	bodyStart := fr.off
	for range fr.u32() { // the locals' declarations
		fr.u32()
		fr.byte()
	}
	if fr.err != nil || fr.off > bodyStart+int(fsize) {
		return nil, fmt.Errorf("wasmsnap: function %d's body: %v", fn, fr.err)
	}
	ins := append([]byte{0x20, 0x00, 0x24}, binary.AppendUvarint(nil, uint64(g))...)
	newCode := append([]byte{}, code[:b.start]...)
	newCode = binary.AppendUvarint(newCode, uint64(int(fsize)+len(ins)))
	newCode = append(newCode, code[bodyStart:fr.off]...)
	newCode = append(newCode, ins...)
	newCode = append(newCode, code[fr.off:]...)

	section := func(id byte, body []byte) []byte {
		return append(binary.AppendUvarint([]byte{id}, uint64(len(body))), body...)
	}
	out := make([]byte, 0, len(wasm)+64)
	out = append(out, wasm[:8]...)
	for _, s := range m.sections {
		switch {
		case s.start == m.globalSection[0]:
			out = append(out, section(6, newGlobals)...)
		case s.start == m.codeSection[0]:
			out = append(out, section(10, newCode)...)
		case s.id == 0 && strings.HasPrefix(s.name, ".debug"):
		default:
			out = append(out, wasm[s.start:s.end]...)
		}
	}
	return out, nil
}

// firstParam is the type of function fn's first parameter (0: none).
func (m *module) firstParam(fn uint32) byte {
	var t uint32
	switch {
	case fn < m.importedFuncs:
		return 0
	case int(fn-m.importedFuncs) < len(m.funcTypes):
		t = m.funcTypes[fn-m.importedFuncs]
	default:
		return 0
	}
	if int(t) >= len(m.typeParams) || len(m.typeParams[t]) == 0 {
		return 0
	}
	return m.typeParams[t][0]
}
