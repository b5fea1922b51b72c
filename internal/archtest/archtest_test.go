// Package archtest holds docs/ARCHITECTURE.md's "Rooms and doors" table
// to the code: every package of the module has a row, and imports only
// the packages of ours that its row's last column allows. A new import
// across rooms is then a change to the table, in the same commit, where a
// reviewer sees it.
package archtest_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

const module = "github.com/moat-sandbox/moat/"

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

func TestImportsFollowTheTable(t *testing.T) {
	root := testwasm.RepoRoot(t)
	rows := readTable(t, root+"/docs/ARCHITECTURE.md")
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(p.ImportPath, module)
		if strings.HasPrefix(pkg, "testdata/") || strings.HasPrefix(pkg, "examples/") {
			continue // fixtures and examples: guests, not rooms of the host
		}
		// The most specific row: an exact name beats a pattern.
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
		if r == nil {
			t.Errorf("package %s has no row in docs/ARCHITECTURE.md's table: add one (what it is, what it may import)", pkg)
			continue
		}
		checked++
		if r.any {
			continue
		}
		for _, imp := range p.Imports {
			ours, ok := strings.CutPrefix(imp, module)
			if !ok || ours == pkg || strings.HasPrefix(ours, pkg+"/") && slices.Contains(r.allowed, "./...") {
				continue
			}
			if !slices.ContainsFunc(r.allowed, func(a string) bool { return matches(a, ours) }) {
				t.Errorf("%s imports %s, which its row (docs/ARCHITECTURE.md:%d) does not allow (%s): add it there, or remove the import",
					pkg, ours, r.line, strings.Join(r.allowed, ", "))
			}
		}
	}
	if checked < 40 {
		t.Fatalf("only %d packages checked: is go list reading the module?", checked)
	}
}
