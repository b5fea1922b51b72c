package javascript

import (
	"fmt"
	"path"
	"strings"

	"github.com/moat-sandbox/moat/languages"
)

// Validate implements languages.Language. Beyond the generic checks it
// refuses the constructs named in the profile's Deny list:
//
//   - "import:MODULE": a static or dynamic import of MODULE, or an export
//     from it ("import:os" matches "os" and "qjs:os", QuickJS-NG's two
//     names for one module);
//   - "OBJECT.MEMBER": a reference to a member, written obj.member,
//     obj?.member or obj["member"] ("std.popen", "os.exec", "os.setReadHandler");
//   - "NAME": a reference to a global that is not a member ("eval",
//     "Function").
//
// The check works on tokens, so names in comments and strings do not
// count. It is defense in depth, not the boundary: JavaScript can reach a
// member through an alias or a computed name the scanner cannot follow
// (const o = os; o["ex" + "ec"]). What bounds a script is the sandbox
// (no ambient files, no network, the op table's grants).
func (Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p) // size, file count, UTF-8, paths
	if len(p.Deny) == 0 {
		return vs
	}
	for _, f := range src.Files {
		if ext := path.Ext(f.Name); ext != ".js" && ext != ".mjs" {
			continue
		}
		vs = append(vs, scan(f.Name, lex(string(f.Content)), p.Deny)...)
	}
	return vs
}

// scan matches the token stream against the deny list.
func scan(file string, toks []token, deny []string) []languages.Violation {
	var vs []languages.Violation
	add := func(line int, rule, entry, what string) {
		vs = append(vs, languages.Violation{Rule: rule, File: file, Line: line,
			Message: fmt.Sprintf("%s is denied by the validation profile (deny: %s); remove it, or run under a profile that allows it", what, entry)})
	}
	for _, entry := range deny {
		if mod, ok := strings.CutPrefix(entry, "import:"); ok {
			for _, im := range imports(toks) {
				if moduleName(im.text) == moduleName(mod) {
					add(im.line, "import", entry, fmt.Sprintf("importing %q", im.text))
				}
			}
			continue
		}
		obj, member, dotted := strings.Cut(entry, ".")
		for i, t := range toks {
			if t.kind != tokName {
				continue
			}
			if dotted {
				if t.text == obj && memberAt(toks, i+1) == member {
					add(t.line, "call", entry, fmt.Sprintf("%s.%s", obj, member))
				}
			} else if t.text == entry && !(i > 0 && isPunct(toks[i-1], ".", "?.")) {
				add(t.line, "call", entry, entry)
			}
		}
	}
	return vs
}

// moduleName drops QuickJS-NG's "qjs:" prefix: "qjs:os" and "os" are one
// module.
func moduleName(s string) string { return strings.TrimPrefix(s, "qjs:") }

// memberAt returns the member name accessed at toks[i:] (".x", "?.x",
// "["x"]"), or "".
func memberAt(toks []token, i int) string {
	switch {
	case i+1 < len(toks) && isPunct(toks[i], ".", "?.") && toks[i+1].kind == tokName:
		return toks[i+1].text
	case i+2 < len(toks) && isPunct(toks[i], "[") && toks[i+1].kind == tokString && isPunct(toks[i+2], "]"):
		return toks[i+1].text
	case i+3 < len(toks) && isPunct(toks[i], "?.") && isPunct(toks[i+1], "[") && toks[i+2].kind == tokString && isPunct(toks[i+3], "]"):
		return toks[i+2].text
	}
	return ""
}

// imports returns the module specifiers of import declarations, export
// ... from, dynamic import("x") and require("x").
func imports(toks []token) []token {
	var out []token
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind != tokName {
			continue
		}
		switch t.text {
		case "import", "require":
			if i > 0 && isPunct(toks[i-1], ".", "?.") {
				continue // import.meta, x.require
			}
			if i+2 < len(toks) && isPunct(toks[i+1], "(") && toks[i+2].kind == tokString {
				out = append(out, toks[i+2])
				continue
			}
			if t.text == "require" {
				continue
			}
			if i+1 < len(toks) && toks[i+1].kind == tokString { // import "x"
				out = append(out, toks[i+1])
				continue
			}
			fallthrough
		case "export":
			// import/export ... from "x": the specifier follows the first
			// "from" before the statement ends.
			for j := i + 1; j < len(toks) && !isPunct(toks[j], ";"); j++ {
				if toks[j].kind == tokName && toks[j].text == "from" && j+1 < len(toks) && toks[j+1].kind == tokString {
					out = append(out, toks[j+1])
					break
				}
				if toks[j].kind == tokName && (toks[j].text == "import" || toks[j].text == "export") {
					break
				}
			}
		}
	}
	return out
}
