// Package archtest holds docs/ARCHITECTURE.md's "Rooms and doors" table
// to the code: every package of the module has a row, and each of its
// files imports only the packages of ours that its row's last column
// allows. A new import across rooms is then a change to the table, in the
// same commit, where a reviewer sees it.
//
// The table is an allow-list, and a row is one line of prose to edit. So
// the layers are held as well, from a list in this file that no row can
// change: abi < policy < host/* < languages < server < cmd. Every file,
// tests included (a test drives its package with whatever lower room it
// needs, which the rows do not list), imports its own layer or lower
// ones; an upward arrow fails even when its row was edited to allow it.
package archtest_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

const module = "github.com/moat-sandbox/moat/"

// layers is the order of the rooms, lowest first. Each package is in the
// layer of its longest matching pattern, and may import packages of its
// own layer and of the layers before it. Leaves (the SDKs, the internal
// mechanisms, the toolchain finder) sit with abi at the bottom: they serve
// every room and must import none of them.
var layers = []struct {
	name     string
	packages []string
}{
	{"abi and the leaves", []string{"abi", "guests", "guests/...", "internal/...", "toolchains"}},
	{"policy", []string{"policy", "policy/..."}},
	{"host/*", []string{"host", "host/..."}},
	// bundle (what a plugin is) decides a plugin's kind with the
	// languages' registry and builds a Script through it, and is read by
	// the server and the CLI: it sits with the languages.
	{"languages", []string{"languages", "languages/...", "bundle"}},
	{"server", []string{"server", "server/..."}},
	{"cmd", []string{"cmd/...", "deploy"}},
}

// layerOrder is how a failure states the rule.
func layerOrder() string {
	var names []string
	for _, l := range layers {
		names = append(names, l.name)
	}
	return strings.Join(names, " < ")
}

// layerOf returns the index of pkg's layer, -1 when no layer names it.
func layerOf(pkg string) int {
	best, bestLen := -1, -1
	for i, l := range layers {
		for _, p := range l.packages {
			if matches(p, pkg) && len(p) > bestLen {
				best, bestLen = i, len(p)
			}
		}
	}
	return best
}

// upward is every file whose upward import is allowed, and why. Each is a
// test reaching a higher layer to drive the code under test through the
// real thing; the test fails when an entry is no longer used, so the list
// only shrinks, and it may not grow past maxUpward without a reviewer
// changing that number too. The fix for an entry is to move the test to
// the layer it drives.
var upward = map[string]string{
	// moat.py driven over its three transports through a real host, the
	// python language and the native runner: it belongs in languages/python.
	"guests/python/transports_test.go -> host":             "drives moat.py through a real host",
	"guests/python/transports_test.go -> host/native":      "drives moat.py through a real host",
	"guests/python/transports_test.go -> languages":        "drives moat.py through a real host",
	"guests/python/transports_test.go -> languages/python": "drives moat.py through a real host",
	"guests/python/transports_test.go -> policy":           "drives moat.py through a real host",
	"guests/python/transports_test.go -> policy/kernel":    "drives moat.py through a real host",
	// moat.rb's copy of the device file's variable name, checked against
	// the transport's constant (which would belong in abi).
	"guests/ruby/sdk_test.go -> host/transport": "checks moat.rb's copy of transport.DeviceEnv",
}

const maxUpward = 7

// row is one row of the table: the packages it names (patterns: a
// trailing /... matches every package below, <lang> one path element) and
// the packages of ours they may import (nil and any=false: none).
type row struct {
	line     int
	packages []string
	allowed  []string
	any      bool
}

var ticked = regexp.MustCompile("`([^`]+)`")

func readTable(t *testing.T, file string) []row {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []row
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cols := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cols) < 3 {
			t.Fatalf("%s:%d: a table row with %d columns", file, n, len(cols))
		}
		r := row{line: n}
		for _, m := range ticked.FindAllStringSubmatch(cols[0], -1) {
			r.packages = append(r.packages, m[1])
		}
		last := cols[len(cols)-1]
		switch {
		case strings.Contains(last, "everything"):
			r.any = true
		default:
			for _, m := range ticked.FindAllStringSubmatch(last, -1) {
				r.allowed = append(r.allowed, m[1])
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// matches reports whether pkg is named by pattern.
func matches(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	ok, _ := path.Match(strings.ReplaceAll(pattern, "<lang>", "*"), pkg)
	return ok
}

// rowOf returns the most specific row naming pkg: an exact name beats a
// pattern.
func rowOf(rows []row, pkg string) *row {
	var r *row
	for i := range rows {
		for _, name := range rows[i].packages {
			if name == pkg {
				r = &rows[i]
			} else if r == nil && matches(name, pkg) {
				r = &rows[i]
			}
		}
	}
	return r
}

// goPackage is what go list says of one package of the module.
type goPackage struct {
	ImportPath, Dir                    string
	GoFiles, TestGoFiles, XTestGoFiles []string
	IgnoredGoFiles                     []string
}

// anImport is one import of ours in one file.
type anImport struct {
	pkg  string // the importing package, relative to the module
	file string // relative to the repository
	test bool   // a _test.go file (of the package or its external test package)
	imp  string // the imported package, relative to the module
}

// imports lists every import of ours by every Go file of the module that
// `go list` reports for this platform, tests included, and for each file
// excluded by its build constraints (wasip1 SDKs and the like), so a
// constraint hides no import.
func imports(t *testing.T, root string) (pkgs []string, all []anImport) {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Dir,GoFiles,TestGoFiles,XTestGoFiles,IgnoredGoFiles", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	fset := token.NewFileSet()
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(p.ImportPath, module)
		if strings.HasPrefix(pkg, "testdata/") || strings.HasPrefix(pkg, "examples/") {
			continue // fixtures and examples: guests, not rooms of the host
		}
		pkgs = append(pkgs, pkg)
		var files []string
		files = append(files, p.GoFiles...)
		files = append(files, p.TestGoFiles...)
		files = append(files, p.XTestGoFiles...)
		files = append(files, p.IgnoredGoFiles...)
		for _, name := range files {
			full := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, full, nil, parser.ImportsOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(p.IgnoredGoFiles, name) && ignoredForGood(f.Comments) {
				continue
			}
			rel, _ := filepath.Rel(root, full)
			for _, s := range f.Imports {
				imp, _ := strconv.Unquote(s.Path.Value)
				ours, ok := strings.CutPrefix(imp, module)
				if !ok {
					continue
				}
				all = append(all, anImport{pkg: pkg, file: filepath.ToSlash(rel), test: strings.HasSuffix(name, "_test.go"), imp: ours})
			}
		}
	}
	if len(pkgs) < 40 {
		t.Fatalf("only %d packages listed: is go list reading the module?", len(pkgs))
	}
	return pkgs, all
}

// ignoredForGood reports whether a file is built by no platform of ours
// (//go:build ignore: a generator or a program run by hand).
func ignoredForGood(comments []*ast.CommentGroup) bool {
	for _, g := range comments {
		for _, c := range g.List {
			if strings.HasPrefix(c.Text, "//go:build") && strings.Contains(c.Text, "ignore") {
				return true
			}
		}
	}
	return false
}

func TestImportsFollowTheTable(t *testing.T) {
	root := testwasm.RepoRoot(t)
	rows := readTable(t, root+"/docs/ARCHITECTURE.md")
	pkgs, all := imports(t, root)
	for _, pkg := range pkgs {
		if rowOf(rows, pkg) == nil {
			t.Errorf("package %s has no row in docs/ARCHITECTURE.md's table: add one (what it is, what it may import)", pkg)
		}
	}
	for _, e := range all {
		if e.test {
			continue // a test's imports are held by the layers (TestImportsFollowTheLayers)
		}
		r := rowOf(rows, e.pkg)
		if r == nil || r.any {
			continue
		}
		if e.imp == e.pkg || strings.HasPrefix(e.imp, e.pkg+"/") && slices.Contains(r.allowed, "./...") {
			continue
		}
		if !slices.ContainsFunc(r.allowed, func(a string) bool { return matches(a, e.imp) }) {
			t.Errorf("%s imports %s, which the row of %s (docs/ARCHITECTURE.md:%d) does not allow (%s): add it there, or remove the import",
				e.file, e.imp, e.pkg, r.line, strings.Join(r.allowed, ", "))
		}
	}
}

// violations returns each import in all that goes up the layers, as the
// message a failure shows, and the allowances of upward it used.
func violations(all []anImport, upward map[string]string) (msgs []string, used map[string]bool) {
	used = map[string]bool{}
	for _, e := range all {
		from, to := layerOf(e.pkg), layerOf(e.imp)
		switch {
		case from < 0:
			msgs = append(msgs, fmt.Sprintf("package %s is in no layer: add it to archtest's layers (%s)", e.pkg, layerOrder()))
			continue
		case to < 0:
			msgs = append(msgs, fmt.Sprintf("%s imports %s, which is in no layer: add it to archtest's layers (%s)", e.file, e.imp, layerOrder()))
			continue
		case to <= from:
			continue
		}
		key := e.file + " -> " + e.imp
		if _, ok := upward[key]; ok {
			used[key] = true
			continue
		}
		msgs = append(msgs, fmt.Sprintf("%s imports %s: %s (layer %q) may not import %s (layer %q), the layers go %s",
			e.file, e.imp, e.pkg, layers[from].name, e.imp, layers[to].name, layerOrder()))
	}
	return msgs, used
}

func TestImportsFollowTheLayers(t *testing.T) {
	root := testwasm.RepoRoot(t)
	_, all := imports(t, root)
	msgs, used := violations(all, upward)
	for _, m := range slices.Compact(msgs) {
		t.Error(m)
	}
	for key := range upward {
		if !used[key] {
			t.Errorf("archtest's upward allowance %q is no longer used: remove it", key)
		}
	}
	if len(upward) > maxUpward {
		t.Errorf("archtest allows %d upward imports, more than maxUpward (%d): move the test to the layer it drives instead", len(upward), maxUpward)
	}
}

// TestLayersRefuseUpwardArrows: the rule holds whatever the table says.
// Each case is one hostile import (an edited row would let it through
// TestImportsFollowTheTable), checked by the function the real test uses.
func TestLayersRefuseUpwardArrows(t *testing.T) {
	for _, c := range []struct {
		pkg, imp, want string
	}{
		{"abi", "policy", `abi (layer "abi and the leaves") may not import policy (layer "policy")`},
		{"policy", "host", `policy (layer "policy") may not import host (layer "host/*")`},
		{"policy/kernel", "host/native", `policy/kernel (layer "policy") may not import host/native (layer "host/*")`},
		{"host", "languages", `host (layer "host/*") may not import languages (layer "languages")`},
		{"host/ops", "server", `host/ops (layer "host/*") may not import server (layer "server")`},
		{"languages/python", "server", `languages/python (layer "languages") may not import server (layer "server")`},
		{"server", "cmd/moat", `server (layer "server") may not import cmd/moat (layer "cmd")`},
		{"server/console", "cmd/moat", `server/console (layer "server") may not import cmd/moat (layer "cmd")`},
		{"internal/moatdir", "host", `internal/moatdir (layer "abi and the leaves") may not import host (layer "host/*")`},
		{"guests/go", "policy", `guests/go (layer "abi and the leaves") may not import policy (layer "policy")`},
		{"toolchains", "languages", `toolchains (layer "abi and the leaves") may not import languages (layer "languages")`},
		{"nowhere", "abi", `package nowhere is in no layer`},
		{"host", "nowhere", `imports nowhere, which is in no layer`},
	} {
		file := c.pkg + "/x_test.go"
		msgs, _ := violations([]anImport{{pkg: c.pkg, file: file, test: true, imp: c.imp}}, nil)
		if len(msgs) != 1 || !strings.Contains(msgs[0], c.want) {
			t.Errorf("%s importing %s: got %q, want one failure saying %q", c.pkg, c.imp, msgs, c.want)
		}
		if len(msgs) == 1 && !strings.Contains(c.want, "no layer") && !strings.HasPrefix(msgs[0], file+" imports "+c.imp+": ") {
			t.Errorf("%s importing %s: the failure %q does not name the file and the import first", c.pkg, c.imp, msgs[0])
		}
	}
	// Downward and sideways arrows pass.
	for _, c := range [][2]string{{"cmd/moat", "server"}, {"server", "languages"}, {"languages", "host"}, {"host", "policy"}, {"policy", "abi"}, {"host/ops", "host/store"}, {"languages/ruby", "internal/wasmsnap"}} {
		if msgs, _ := violations([]anImport{{pkg: c[0], file: c[0] + "/x.go", imp: c[1]}}, nil); len(msgs) != 0 {
			t.Errorf("%s importing %s: refused (%q), but it goes down the layers", c[0], c[1], msgs)
		}
	}
	// An allowance lets exactly its file's import through.
	allow := map[string]string{"guests/ruby/sdk_test.go -> host/transport": "why"}
	if msgs, used := violations([]anImport{{pkg: "guests/ruby", file: "guests/ruby/sdk_test.go", test: true, imp: "host/transport"}}, allow); len(msgs) != 0 || len(used) != 1 {
		t.Errorf("the allowed import was refused: %q", msgs)
	}
	if msgs, _ := violations([]anImport{{pkg: "guests/ruby", file: "guests/ruby/other_test.go", test: true, imp: "host/transport"}}, allow); len(msgs) != 1 {
		t.Errorf("another file's import passed on the allowance of sdk_test.go")
	}
}
