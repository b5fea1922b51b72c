// Package c is the C language: Debian's clang-19 with wasi-libc builds a
// WASI command (wasm32-wasi), run by wazero. Import it for its side effect
// of registering "c" with package languages.
//
// Validation profile rules: "include:HEADER" (e.g. "include:sys/socket.h")
// refuses a submission that #includes HEADER.
package c

import (
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/clangwasm"
)

func init() {
	languages.Register(C)
	C.Registered()
}

// C is the registered language.
var C = &Language{clangwasm.Compiler{
	Lang: "c", Binary: "clang-19", Package: "clang-19", Sources: []string{".c"},
	Flags: []string{"-std=c17"},
}}

// Language compiles C.
type Language struct{ clangwasm.Compiler }

// Info describes C.
func (l *Language) Info() languages.Info {
	return languages.Info{
		Name: "c", Aliases: []string{"gcc", "clang", "c17"}, Version: l.VersionOrUnknown(),
		Path: languages.PathCompiled, Extensions: []string{".c", ".h"},
		Toolchain: "clang " + l.VersionOrUnknown() + " + wasi-libc (wasm32-wasi)",
	}
}
