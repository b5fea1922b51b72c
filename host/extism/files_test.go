package extism_test

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
)

// TestFileGrantsRefused: an Extism plug-in asking for a directory is
// refused at load, saying so, rather than loaded without it: its
// instances are the Extism SDK's, which would mount a granted directory
// with wazero's DirFS (which follows links out of it) and without the
// audit of its changes.
func TestFileGrantsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHost(t, profile(t, "name: files\ndefault:\n  capabilities:\n    filesystem: ["+dir+"]\n"), nil)
	_, err := h.Load(context.Background(), wasmFixture(t, "extism_noop.wasm"), host.LoadOptions{
		Manifest: manifest(t, "name: noop\nversion: 1.0.0\nkind: extism\nactions: [{name: noop}]\ncapabilities:\n  filesystem: ["+dir+"]\n")})
	if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "Extism plug-ins get no file grants") {
		t.Fatalf("load: %v, want denied: Extism plug-ins get no file grants", err)
	}
}
