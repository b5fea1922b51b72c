package hostile

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Code that runs for ever without a loop: a call tree, in which f_0 does
// nothing and f_{i+1} calls f_i twice, makes 2^depth calls at a depth of
// depth+1. A deadline that checks only loop headers never sees it (issue
// 27); the hostile tests run it in C, as a WASI command, and in every
// language that compiles.

// CallTreeC is the tree as a C (or C++) program whose main calls f_depth.
func CallTreeC(depth int) string {
	var b strings.Builder
	b.WriteString("volatile int sink;\n__attribute__((noinline)) void f0(void) { sink++; }\n")
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, "__attribute__((noinline)) void f%d(void) { f%d(); f%d(); }\n", i, i-1, i-1)
	}
	fmt.Fprintf(&b, "int main(void) { f%d(); return 0; }\n", depth)
	return b.String()
}

// CallTreeWasm is the tree as a WASI command whose _start calls f_depth
// (depth < 127, so that every index is one byte).
func CallTreeWasm(depth int) []byte {
	vec := func(n int, item func(i int) []byte) []byte {
		b := binary.AppendUvarint(nil, uint64(n))
		for i := range n {
			b = append(b, item(i)...)
		}
		return b
	}
	sec := func(id byte, body []byte) []byte {
		return append(binary.AppendUvarint([]byte{id}, uint64(len(body))), body...)
	}
	d := byte(depth)
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, sec(1, []byte{1, 0x60, 0, 0})...)
	m = append(m, sec(3, vec(depth+2, func(int) []byte { return []byte{0} }))...)
	m = append(m, sec(7, append([]byte{1, 6}, append([]byte("_start"), 0x00, d+1)...))...)
	return append(m, sec(10, vec(depth+2, func(i int) []byte {
		switch {
		case i == 0:
			return []byte{2, 0, 0x0b}
		case i <= depth:
			return []byte{6, 0, 0x10, byte(i - 1), 0x10, byte(i - 1), 0x0b}
		}
		return []byte{4, 0, 0x10, d, 0x0b}
	}))...)
}
