package host

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/internal/wasmrewrite"
)

// instrument is what Load does to a module's bytes before compiling them.
func instrument(t testing.TB, wasm []byte) []byte {
	t.Helper()
	code, _, lay, err := wasmrewrite.LimitTables(wasm, wasmrewrite.DefaultMaxTableElements)
	if err != nil {
		t.Fatalf("LimitTables: %v", err)
	}
	out, err := wasmrewrite.InstrumentDeadline(code, lay, false)
	if err != nil {
		t.Fatalf("InstrumentDeadline: %v", err)
	}
	return out
}

// TestRewriteKept: the rewritten module is kept under the cache directory
// and read back on the next load; a damaged file is rewritten, never
// compiled, and another table cap is another file.
func TestRewriteKept(t *testing.T) {
	t.Parallel()
	wasm, err := os.ReadFile("../testdata/interrupt_ops.wasm")
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{cacheDir: t.TempDir()}
	bounded, _, lay, err := wasmrewrite.LimitTables(wasm, wasmrewrite.DefaultMaxTableElements)
	if err != nil {
		t.Fatal(err)
	}
	want, err := wasmrewrite.InstrumentDeadline(bounded, lay, false)
	if err != nil {
		t.Fatal(err)
	}
	digest := Digest(wasm)
	code, key, err := h.rewrite(digest, wasmrewrite.DefaultMaxTableElements, bounded, lay, false)
	if err != nil || !bytes.Equal(code, want) {
		t.Fatalf("first rewrite: %v", err)
	}
	path := filepath.Join(h.cacheDir, rewrittenDir, key+".wasm")
	if countFiles(h.cacheDir) != 0 {
		t.Error("the rewritten module counts as a file of wazero's (Compile.FromDiskCache would lie)")
	}
	// Read back: a file holding other bytes with their checksum is what
	// the next load compiles, so it is the file that is read.
	marked := append(slices.Clone(want), 0x00)
	marked = append(marked[:len(marked):len(marked)], byte(0), byte(0), byte(0), byte(0))
	binary.LittleEndian.PutUint32(marked[len(marked)-4:], crc32.Checksum(marked[:len(marked)-4], castagnoli))
	if err := os.WriteFile(path, marked, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := h.rewrite(digest, wasmrewrite.DefaultMaxTableElements, bounded, lay, false); !bytes.Equal(code, marked[:len(marked)-4]) {
		t.Fatal("the kept file was not read")
	}
	// Damaged: rewritten again, and the file repaired.
	marked[10] ^= 0xff
	if err := os.WriteFile(path, marked, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := h.rewrite(digest, wasmrewrite.DefaultMaxTableElements, bounded, lay, false); !bytes.Equal(code, want) {
		t.Fatal("a damaged file was used")
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b[:len(b)-4], want) {
		t.Error("the damaged file was not replaced")
	}
	if _, other, _ := h.rewrite(digest, 1000, bounded, lay, false); other == key {
		t.Error("another table cap has the same key")
	}
}
