package python

import (
	"fmt"
	"path"
	"strings"

	"github.com/moat-sandbox/moat/languages"
)

// Validate implements languages.Language. Beyond the generic checks it
// refuses the constructs named in the profile's Deny list:
//
//   - "import:MODULE": import MODULE, import MODULE.sub, from MODULE import
//     x, from MODULE.sub import x, __import__("MODULE") and
//     importlib.import_module("MODULE") ("import:os", "import:subprocess",
//     "import:socket", "import:ctypes");
//   - "MODULE.NAME": a reference to an attribute, os.system or
//     subprocess.run, written with a dot;
//   - "NAME": a builtin used by name, not as an attribute ("eval", "exec",
//     "compile", "open", "__import__").
//
// The check works on tokens, so names in comments and strings do not
// count (f-string replacement fields do). It is defense in depth, not the
// boundary: Python can reach anything through getattr, globals() or
// builtins tricks a static scan cannot follow. What bounds a script is
// the sandbox: a WASI build has no subprocesses and no sockets to begin
// with, no files but /src (read-only), and ops only through the grants.
func (Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p) // size, file count, UTF-8, paths
	if len(p.Deny) == 0 {
		return vs
	}
	for _, f := range src.Files {
		if path.Ext(f.Name) != ".py" {
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
	imps := imports(toks)
	for _, entry := range deny {
		if mod, ok := strings.CutPrefix(entry, "import:"); ok {
			for _, im := range imps {
				if im.text == mod || strings.HasPrefix(im.text, mod+".") {
					add(im.line, "import", entry, fmt.Sprintf("importing %q", im.text))
				}
			}
			continue
		}
		parts := strings.Split(entry, ".")
		for i, t := range toks {
			if t.kind != tokName || t.text != parts[0] || i > 0 && isOp(toks[i-1], ".") {
				continue
			}
			if dottedAt(toks, i, parts) {
				add(t.line, "call", entry, entry)
			}
		}
	}
	return vs
}

// dottedAt reports whether toks[i:] spell the dotted name parts.
func dottedAt(toks []token, i int, parts []string) bool {
	for k, p := range parts {
		j := i + 2*k
		if j >= len(toks) || toks[j].kind != tokName || toks[j].text != p {
			return false
		}
		if k+1 < len(parts) && (j+1 >= len(toks) || !isOp(toks[j+1], ".")) {
			return false
		}
	}
	return true
}

// imports returns the modules a file imports, each as a token carrying the
// dotted module name and its line.
func imports(toks []token) []token {
	var out []token
	dotted := func(i int) (string, int) { // a dotted name at toks[i:] and the index after it
		var b strings.Builder
		for i < len(toks) && toks[i].kind == tokName {
			b.WriteString(toks[i].text)
			if i+1 < len(toks) && isOp(toks[i+1], ".") {
				b.WriteByte('.')
				i += 2
				continue
			}
			i++
			break
		}
		return b.String(), i
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind != tokName || i > 0 && isOp(toks[i-1], ".") {
			continue
		}
		switch t.text {
		case "import": // import a.b as c, d
			if i > 0 && toks[i-1].kind == tokName && toks[i-1].line == t.line && i >= 2 {
				continue // the import of from X import ...: handled at from
			}
			j := i + 1
			for {
				name, next := dotted(j)
				if name == "" {
					break
				}
				out = append(out, token{kind: tokName, text: name, line: t.line})
				j = next
				if j+1 < len(toks) && toks[j].kind == tokName && toks[j].text == "as" {
					j += 2
				}
				if j < len(toks) && isOp(toks[j], ",") {
					j++
					continue
				}
				break
			}
		case "from": // from a.b import c (relative imports start with a dot: skipped)
			if name, next := dotted(i + 1); name != "" && next < len(toks) && toks[next].kind == tokName && toks[next].text == "import" {
				out = append(out, token{kind: tokName, text: name, line: t.line})
			}
		case "__import__":
			if i+2 < len(toks) && isOp(toks[i+1], "(") && toks[i+2].kind == tokString {
				out = append(out, token{kind: tokName, text: toks[i+2].text, line: t.line})
			}
		case "importlib":
			if i+4 < len(toks) && isOp(toks[i+1], ".") && toks[i+2].text == "import_module" && isOp(toks[i+3], "(") && toks[i+4].kind == tokString {
				out = append(out, token{kind: tokName, text: toks[i+4].text, line: t.line})
			}
		}
	}
	return out
}
