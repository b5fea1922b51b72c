package ops_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/guests"
	"github.com/moat-sandbox/moat/host/ops"
)

// productionOps is the table as the package itself builds it: package
// variables are initialized before any init function of this test
// package runs, so the test ops ops_test.go registers in its init are not
// in it (they are in ops.Names() by the time a test runs, which
// TestSDKCoverageRefusesUncoveredOps uses).
var productionOps = ops.Names()

// sdkLanguages are the SDKs an op must reach, by the language guests.Files
// knows them as: each is the set of files the moat binary hands a plugin.
var sdkLanguages = []string{"go", "c", "rust", "assemblyscript", "javascript", "python", "ruby"}

// rawOnly lists, per SDK, the ops it deliberately leaves to its raw call
// (Call, moat_call, call, ...) and why. Every other op of the table must
// appear in the SDK by name. An entry for an op the SDK does wrap, or for
// an op that is not in the table, fails the test: the list only says what
// is true.
var rawOnly = map[string]map[string]string{}

// notInTable lists the abi op constants that are no op of the table, and
// why: each other abi constant must be a registered op.
var notInTable = map[string]string{
	abi.OpNext: "the device-file transport's message by which a resident script asks for its next call; the transport answers it, the table never sees it",
}

// opIdents maps each op name abi declares to its constant's identifier
// (e.g. "kv.get" -> "OpKVGet"), read from abi's own source.
func opIdents(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	err := fs.WalkDir(abi.Source, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		src, err := fs.ReadFile(abi.Source, p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Op") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						out[v] = name.Name
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("only %d op constants found in abi's source: is the parse reading it?", len(out))
	}
	return out
}

// sdkSource returns the code of lang's SDK as the binary carries it,
// without its whole-line comments: a name in a comment is no support.
// For Go, the SDK's own package only (not the abi it ships beside it).
func sdkSource(t *testing.T, lang string) string {
	t.Helper()
	files, err := guests.Files(lang)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if lang == "go" && (!strings.HasPrefix(name, "guests/go/") || strings.HasSuffix(name, "_test.go")) {
			continue
		}
		if !strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, ".h") && !strings.HasSuffix(name, ".rs") &&
			!strings.HasSuffix(name, ".ts") && !strings.HasSuffix(name, ".js") && !strings.HasSuffix(name, ".py") && !strings.HasSuffix(name, ".rb") {
			continue
		}
		b.WriteString(stripComments(lang, string(files[name])))
	}
	if b.Len() == 0 {
		t.Fatalf("the %s SDK has no source in guests.Files", lang)
	}
	return b.String()
}

// stripComments drops whole-line comments: //, /* and * lines in the
// C-like languages, # lines in Python and Ruby (in C, # is the
// preprocessor, which may well name an op).
func stripComments(lang, src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		s := strings.TrimSpace(line)
		switch lang {
		case "python", "ruby":
			if strings.HasPrefix(s, "#") {
				continue
			}
		default:
			if strings.HasPrefix(s, "//") || strings.HasPrefix(s, "/*") || strings.HasPrefix(s, "*") {
				continue
			}
		}
		b.WriteString(line)
	}
	return b.String()
}

// mentions reports whether src names op as code: the quoted name in any
// language, or, in Go, abi's constant for it.
func mentions(lang, src, op, ident string) bool {
	if strings.Contains(src, `"`+op+`"`) || strings.Contains(src, `'`+op+`'`) {
		return true
	}
	if lang == "go" && ident != "" {
		return regexp.MustCompile(`\babi\.` + ident + `\b`).MatchString(src)
	}
	return false
}

// uncovered returns one failure per op of names that an SDK of sources
// neither names nor lists in raw, and one per entry of raw that is not
// true (the op is wrapped after all, or is no op of the table).
func uncovered(names []string, sources map[string]string, raw map[string]map[string]string, idents map[string]string) []string {
	var out []string
	for _, lang := range slices.Sorted(maps.Keys(sources)) {
		src := sources[lang]
		for _, op := range names {
			has := mentions(lang, src, op, idents[op])
			why, listed := raw[lang][op]
			switch {
			case !has && !listed:
				out = append(out, fmt.Sprintf("op %s is in the op table but the %s SDK (guests.Files(%q)) neither wraps it nor lists it in rawOnly: add a wrapper there, or add %q to rawOnly[%q] with the reason callers use the raw call", op, lang, lang, op, lang))
			case has && listed:
				out = append(out, fmt.Sprintf("rawOnly[%q] lists op %s (%s), but the %s SDK wraps it: remove the entry", lang, op, why, lang))
			}
		}
		for op := range raw[lang] {
			if !slices.Contains(names, op) {
				out = append(out, fmt.Sprintf("rawOnly[%q] lists %s, which is no op of the table: remove the entry", lang, op))
			}
		}
	}
	return out
}

func sdkSources(t *testing.T) map[string]string {
	sources := map[string]string{}
	for _, lang := range sdkLanguages {
		sources[lang] = sdkSource(t, lang)
	}
	return sources
}

// TestSDKCoverage: every op of the table reaches every SDK the binary
// carries (or is knowingly left to that SDK's raw call), and the table
// and abi's op constants name the same ops.
func TestSDKCoverage(t *testing.T) {
	idents := opIdents(t)
	if len(productionOps) < 20 {
		t.Fatalf("only %d ops in the table before the tests' own: is the snapshot taken after init?", len(productionOps))
	}
	for _, op := range productionOps {
		if strings.HasPrefix(op, "testnotes.") {
			t.Fatalf("the snapshot holds the test op %s: it was taken after this package's init", op)
		}
		if idents[op] == "" {
			t.Errorf("op %s is in the op table but abi declares no constant for it: add one (Op...) in abi beside its request type", op)
		}
	}
	for op, ident := range idents {
		if _, ok := notInTable[op]; !ok && !slices.Contains(productionOps, op) {
			t.Errorf("abi.%s (%q) is no op of the table: register it in host/ops, or list it in notInTable with the reason", ident, op)
		}
	}
	for op := range notInTable {
		if slices.Contains(productionOps, op) {
			t.Errorf("notInTable lists %s, which the table has: remove the entry", op)
		}
	}
	for _, msg := range uncovered(productionOps, sdkSources(t), rawOnly, idents) {
		t.Error(msg)
	}
}

// TestSDKCoverageRefusesUncoveredOps: the check fails when an op is added
// without SDK support. The table here is the live one, which holds the
// test ops this package's init registered for real (testnotes.add,
// testnotes.forgetful), plus a name added in the test; each must be
// reported once per SDK, and the hostile sources below must not pass.
func TestSDKCoverageRefusesUncoveredOps(t *testing.T) {
	idents := opIdents(t)
	sources := sdkSources(t)
	live := append(ops.Names(), "widget.spin")
	var added []string
	for _, op := range live {
		if !slices.Contains(productionOps, op) {
			added = append(added, op)
		}
	}
	if !slices.Contains(added, "testnotes.add") || !slices.Contains(added, "testnotes.forgetful") {
		t.Fatalf("the live table lacks the test ops ops_test.go registers: %v", added)
	}
	got := uncovered(live, sources, rawOnly, idents)
	if want := len(added) * len(sdkLanguages); len(got) != want {
		t.Fatalf("%d failures, want %d (each of %v in each of %d SDKs): %q", len(got), want, added, len(sdkLanguages), got)
	}
	for _, op := range added {
		for _, lang := range sdkLanguages {
			want := fmt.Sprintf("op %s is in the op table but the %s SDK", op, lang)
			if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, want) }) {
				t.Errorf("no failure says %q", want)
			}
		}
	}

	// Listed as raw-only with a reason, the new op passes in that SDK only.
	raw := map[string]map[string]string{"c": {"widget.spin": "a test op"}}
	if got := uncovered([]string{"widget.spin"}, sources, raw, idents); len(got) != len(sdkLanguages)-1 || slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, "the c SDK") }) {
		t.Errorf("widget.spin raw-only in c: %q", got)
	}

	// Hostile SDK sources: none of these supports kv.get.
	for _, c := range []struct{ name, lang, src string }{
		{"only in a Go comment", "go", "package moat\n// Call(abi.OpKVGet, ...) would fetch it\n"},
		{"only in a C comment", "c", "/* \"kv.get\" */\n * \"kv.get\" is for later\n"},
		{"only in a Python comment", "python", "# call(\"kv.get\", {})\n"},
		{"only in a Ruby comment", "ruby", "  # Moat.call(\"kv.get\")\n"},
		{"a prefix of another op", "javascript", `call("kv.getall", {})`},
		{"unquoted", "rust", "// kv.get\nlet op = kv.get;\n"},
		{"another constant", "go", "Call(abi.OpKVGetAll, nil, nil)\n"},
		{"an unqualified constant", "go", "Call(OpKVGet, nil, nil)\n"},
	} {
		src := stripComments(c.lang, c.src)
		if got := uncovered([]string{abi.OpKVGet}, map[string]string{c.lang: src}, nil, idents); len(got) != 1 {
			t.Errorf("%s: %d failures, want 1 (kv.get uncovered): %q", c.name, len(got), got)
		}
	}

	// And the supported forms pass.
	for _, c := range []struct{ name, lang, src string }{
		{"Go constant", "go", "Call(abi.OpKVGet, req, &resp)\n"},
		{"quoted", "c", `moat__call_built("kv.get", &req, &reply);`},
		{"single-quoted", "python", `call('kv.get', {})`},
		{"Ruby", "ruby", `Moat.call("kv.get", { "key" => key })`},
	} {
		if got := uncovered([]string{abi.OpKVGet}, map[string]string{c.lang: stripComments(c.lang, c.src)}, nil, idents); len(got) != 0 {
			t.Errorf("%s: refused: %q", c.name, got)
		}
	}

	// A raw-only entry that is not true fails.
	for _, c := range []struct {
		name string
		raw  map[string]map[string]string
		want string
	}{
		{"wrapped after all", map[string]map[string]string{"go": {abi.OpKVGet: "old reason"}}, `rawOnly["go"] lists op kv.get (old reason), but the go SDK wraps it`},
		{"no such op", map[string]map[string]string{"go": {"kv.gone": "old reason"}}, `rawOnly["go"] lists kv.gone, which is no op of the table`},
	} {
		got := uncovered([]string{abi.OpKVGet}, map[string]string{"go": "Call(abi.OpKVGet, req, &resp)\n"}, c.raw, idents)
		if len(got) != 1 || !strings.Contains(got[0], c.want) {
			t.Errorf("%s: %q, want one failure saying %q", c.name, got, c.want)
		}
	}
}
