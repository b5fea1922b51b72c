package archtest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestHostLinksEveryFamily: an op family registers itself from an init
// function of its package (host/ops' own files, or its service's package:
// host/ai, host/media), so a host offers it only if that package is
// linked. host/families.go imports those outside host/ops; this holds
// that every package whose production code calls ops.RegisterFamily is
// among host's own dependencies (tests not counted), so a family moved
// out of host/ops cannot silently vanish from an embedder's host, whose
// guests would then read "unknown op" for ops the docs promise.
func TestHostLinksEveryFamily(t *testing.T) {
	root := testwasm.RepoRoot(t)
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./host")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./host: %v", err)
	}
	deps := strings.Fields(string(out))

	cmd = exec.Command("go", "list", "-json=ImportPath,Dir,GoFiles", "./...")
	cmd.Dir = root
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var registering []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(p.ImportPath, module)
		if strings.HasPrefix(pkg, "testdata/") || strings.HasPrefix(pkg, "examples/") {
			continue
		}
		for _, name := range p.GoFiles {
			if callsRegisterFamily(t, filepath.Join(p.Dir, name)) {
				registering = append(registering, p.ImportPath)
				break
			}
		}
	}
	if !slices.Contains(registering, module+"host/media") || !slices.Contains(registering, module+"host/ai") {
		t.Fatalf("packages registering a family: %v; want host/ai and host/media among them (is the scan reading the files?)", registering)
	}
	for _, p := range registering {
		if !slices.Contains(deps, p) {
			t.Errorf("%s registers an op family but host does not import it: its ops are missing from every host whose embedder does not import it too; add it to host/families.go", strings.TrimPrefix(p, module))
		}
	}
}

// callsRegisterFamily reports whether a file calls ops.RegisterFamily.
func callsRegisterFamily(t *testing.T, file string) bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		if strings.Contains(s.Text(), "ops.RegisterFamily(") {
			return true
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return false
}
