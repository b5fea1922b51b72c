package extism

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
)

// TestLoadRefuses: what an Extism plug-in may import is checked at load,
// with the import named.
func TestLoadRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	env := [2]string{EnvModule, "alloc"}
	tests := []struct {
		name   string
		wasm   []byte
		reason string
	}{
		{name: "another host function", wasm: module(env, [2]string{UserModule, "fetch_secrets"}),
			reason: "imports the host function extism:host/user.fetch_secrets, which moat does not provide"},
		{name: "another module", wasm: module(env, [2]string{"env", "system"}),
			reason: "imports env.system; an Extism plug-in in moat may import extism:host/env, extism:host/user.moat_call and WASI"},
		{name: "no function to call", wasm: module(env),
			reason: "exports no function of type () -> (i32) or () -> ()"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.Load(ctx, tt.wasm, host.LoadOptions{Name: "refused"})
			if abi.CodeOf(err) != abi.CodeBadModule || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("err %v, want bad_module containing %q", err, tt.reason)
			}
		})
	}
}
