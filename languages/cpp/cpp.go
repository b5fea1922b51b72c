// Package cpp is the C++ language: Debian's clang++-19 with libc++ and
// wasi-libc builds a WASI command (wasm32-wasi). There are no exceptions
// (-fno-exceptions): the wasm32-wasi libc++ of Debian 12 is built without
// them, and wazero would need the exception-handling proposal. Import it
// for its side effect of registering "cpp".
//
// Validation profile rules: "include:HEADER" (e.g. "include:sys/socket.h").
package cpp

import (
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/clangwasm"
)

func init() {
	languages.Register(CPP)
	CPP.Registered()
}

// CPP is the registered language.
var CPP = &Language{clangwasm.Compiler{
	Lang: "cpp", Binary: "clang++-19", Package: "clang-19", Sources: []string{".cpp", ".cc", ".cxx", ".c++"},
	Flags:   []string{"-std=c++20", "-fno-exceptions"},
	Sysroot: "/usr/lib/wasm32-wasi/libc++.a", SysrootPkg: "libc++-19-dev-wasm32",
}}

// Language compiles C++.
type Language struct{ clangwasm.Compiler }

// Info describes C++.
func (l *Language) Info() languages.Info {
	return languages.Info{
		Name: "cpp", Aliases: []string{"c++", "g++", "clang++", "cxx"}, Version: l.VersionOrUnknown(),
		Path: languages.PathCompiled, Extensions: []string{".cpp", ".cc", ".cxx", ".hpp", ".h"},
		Toolchain: "clang++ " + l.VersionOrUnknown() + " + libc++ + wasi-libc (wasm32-wasi, no exceptions)",
	}
}
