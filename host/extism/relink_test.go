package extism

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// module assembles a module with one function type, the given function
// imports and a custom section after them.
func module(imports ...[2]string) []byte {
	name := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, 1, 7, 1, 0x60, 2, 0x7e, 0x7e, 1, 0x7e) // type 0: (i64, i64) -> i64
	body := binary.AppendUvarint(nil, uint64(len(imports)))
	for _, imp := range imports {
		body = append(name(name(body, imp[0]), imp[1]), 0, 0) // a function of type 0
	}
	b = append(binary.AppendUvarint(append(b, 2), uint64(len(body))), body...)
	custom := append(name(nil, "note"), "kept"...)
	return append(binary.AppendUvarint(append(b, 0), uint64(len(custom))), custom...)
}

func TestRelink(t *testing.T) {
	t.Parallel()
	moves := map[string]string{EnvModule + "\x00http_request": httpModule}
	many := [][2]string{{EnvModule, "http_request"}}
	for i := range 20 { // an import section longer than 127 bytes: a two-byte size
		many = append(many, [2]string{EnvModule, fmt.Sprintf("function_number_%d", i)})
	}
	tests := []struct {
		name    string
		wasm    []byte
		want    []string // module.name of each import after relinking
		same    bool     // relink returns the input unchanged
		errText string
	}{
		{name: "moves the import", wasm: module([2]string{EnvModule, "alloc"}, [2]string{EnvModule, "http_request"}),
			want: []string{EnvModule + ".alloc", httpModule + ".http_request"}},
		{name: "nothing to move", wasm: module([2]string{EnvModule, "alloc"}), want: []string{EnvModule + ".alloc"}, same: true},
		{name: "same name in another module", wasm: module([2]string{UserModule, "http_request"}), want: []string{UserModule + ".http_request"}, same: true},
		{name: "a long import section", wasm: module(many...), want: func() []string {
			out := []string{httpModule + ".http_request"}
			for _, imp := range many[1:] {
				out = append(out, imp[0]+"."+imp[1])
			}
			return out
		}()},
		{name: "truncated", wasm: module([2]string{EnvModule, "http_request"})[:20], errText: "runs past the end"},
		{name: "not WebAssembly", wasm: []byte("(module)"), errText: "not a WebAssembly binary"},
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := relink(tt.wasm, moves)
			if tt.errText != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err %v, want one containing %q", err, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.same != (&out[0] == &tt.wasm[0]) {
				t.Fatalf("returned the input unchanged: %v, want %v", &out[0] == &tt.wasm[0], tt.same)
			}
			cm, err := r.CompileModule(ctx, out)
			if err != nil {
				t.Fatalf("the relinked module does not compile: %v", err)
			}
			var got []string
			for _, f := range cm.ImportedFunctions() {
				mod, name, _ := f.Import()
				got = append(got, mod+"."+name)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("imports %v, want %v", got, tt.want)
			}
			if !bytes.HasSuffix(out, []byte("notekept")) {
				t.Fatal("the sections after the import section were not kept")
			}
		})
	}
}
