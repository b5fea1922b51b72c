package host_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestFixturesUpToDate: the committed .wasm fixtures are what their WAT
// sources compile to, so a test never runs a stale binary.
func TestFixturesUpToDate(t *testing.T) {
	t.Parallel()
	wat2wasm, err := exec.LookPath("wat2wasm")
	if err != nil {
		testenv.Require(t, "wat2wasm (apt package wabt) is not installed; `make tools` installs it")
	}
	sources, _ := filepath.Glob("../testdata/wat/*.wat")
	if len(sources) == 0 {
		t.Fatal("no WAT sources in testdata/wat")
	}
	for _, src := range sources {
		out := filepath.Join(t.TempDir(), "out.wasm")
		// A source's first line may give flags, as `make fixtures` reads it.
		args := []string{src, "-o", out}
		if text, err := os.ReadFile(src); err == nil {
			first, _, _ := strings.Cut(string(text), "\n")
			if flags, ok := strings.CutPrefix(first, ";; wat2wasm: "); ok {
				args = append(strings.Fields(flags), args...)
			}
		}
		if msg, err := exec.Command(wat2wasm, args...).CombinedOutput(); err != nil {
			t.Fatalf("wat2wasm %s: %v\n%s", src, err, msg)
		}
		want, _ := os.ReadFile(out)
		committed := "../testdata/" + strings.TrimSuffix(filepath.Base(src), ".wat") + ".wasm"
		got, err := os.ReadFile(committed)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale or missing: run `make fixtures`", committed)
		}
	}
}
