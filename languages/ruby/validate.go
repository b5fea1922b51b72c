package ruby

import (
	"fmt"
	"path"
	"strings"

	"github.com/moat-sandbox/moat/languages"
)

// Validate implements languages.Language. Beyond the generic checks it
// refuses the constructs named in the profile's Deny list:
//
//   - "backticks": command substitution, `cmd` or %x(cmd);
//   - "import:LIB": require "LIB", require_relative or load of it
//     ("import:socket", "import:open3");
//   - "Const.method": a method called on a constant, IO.popen,
//     Process.spawn, Open3.capture2 (with . or ::);
//   - "name": a Kernel method called without a receiver or on Kernel
//     ("system", "exec", "spawn", "fork", "eval", "open", "syscall").
//
// The check works on tokens, so names in comments and strings do not
// count (#{} interpolation does). It is defense in depth, not the
// boundary: Ruby reaches methods through send, method(:system) or
// const_get, which a static scan cannot follow. In this build there are no
// subprocesses or sockets anyway; what bounds a script is the sandbox.
func (Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p) // size, file count, UTF-8, paths
	if len(p.Deny) == 0 {
		return vs
	}
	for _, f := range src.Files {
		if path.Ext(f.Name) != ".rb" {
			continue
		}
		vs = append(vs, scan(f.Name, lex(string(f.Content)), p.Deny)...)
	}
	return vs
}

func scan(file string, toks []token, deny []string) []languages.Violation {
	var vs []languages.Violation
	add := func(line int, rule, entry, what string) {
		vs = append(vs, languages.Violation{Rule: rule, File: file, Line: line,
			Message: fmt.Sprintf("%s is denied by the validation profile (deny: %s); remove it, or run under a profile that allows it", what, entry)})
	}
	for _, entry := range deny {
		if entry == "backticks" {
			for _, t := range toks {
				if t.kind == tokShell {
					add(t.line, "shell", entry, "command substitution (backticks or %x)")
				}
			}
			continue
		}
		if lib, ok := strings.CutPrefix(entry, "import:"); ok {
			for i, t := range toks {
				if t.kind != tokName || (t.text != "require" && t.text != "require_relative" && t.text != "load") || receiver(toks, i) != "" {
					continue
				}
				j := i + 1
				if j < len(toks) && isPunct(toks[j], "(") {
					j++
				}
				if j < len(toks) && toks[j].kind == tokString && strings.TrimSuffix(toks[j].text, ".rb") == lib {
					add(t.line, "import", entry, fmt.Sprintf("requiring %q", lib))
				}
			}
			continue
		}
		recv, method, dotted := strings.Cut(entry, ".")
		for i, t := range toks {
			if t.kind != tokName {
				continue
			}
			switch {
			case dotted && t.text == method && receiver(toks, i) == recv:
				add(t.line, "call", entry, entry)
			case !dotted && t.text == entry && (receiver(toks, i) == "" || receiver(toks, i) == "Kernel"):
				if i > 0 && toks[i-1].kind == tokName && toks[i-1].text == "def" {
					continue // defining a method of that name
				}
				add(t.line, "call", entry, entry)
			}
		}
	}
	return vs
}

// receiver returns the receiver written before toks[i] ("IO" in IO.popen,
// "?" for an expression), or "" when there is none.
func receiver(toks []token, i int) string {
	if i == 0 || !isPunct(toks[i-1], ".", "::", "&.") {
		return ""
	}
	if i >= 2 && toks[i-2].kind == tokName {
		return toks[i-2].text
	}
	return "?"
}
