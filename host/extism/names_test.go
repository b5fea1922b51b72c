package extism_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
)

// extismWithExports is an Extism plug-in importing extism:host/env
// input_length (which makes it one without a manifest) and exporting one
// () -> i32 function under each name.
func extismWithExports(names ...string) []byte {
	sec := func(b []byte, id byte, body []byte) []byte {
		b = append(b, id)
		b = binary.AppendUvarint(b, uint64(len(body)))
		return append(b, body...)
	}
	name := func(b []byte, s string) []byte {
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = sec(b, 1, []byte{2, 0x60, 0, 1, 0x7f, 0x60, 0, 1, 0x7e}) // ()->i32, ()->i64
	imp := name(name([]byte{1}, "extism:host/env"), "input_length")
	b = sec(b, 2, append(imp, 0, 1))
	fn := binary.AppendUvarint(nil, uint64(len(names)))
	for range names {
		fn = append(fn, 0)
	}
	b = sec(b, 3, fn)
	b = sec(b, 5, []byte{1, 0, 1})
	exp := binary.AppendUvarint(nil, uint64(len(names)+1))
	exp = append(name(exp, "memory"), 2, 0)
	for i, n := range names {
		exp = append(name(exp, n), 0)
		exp = binary.AppendUvarint(exp, uint64(i+1)) // after the import
	}
	b = sec(b, 7, exp)
	code := binary.AppendUvarint(nil, uint64(len(names)))
	for range names {
		code = append(code, 4, 0, 0x41, 0, 0x0b) // i32.const 0
	}
	return sec(b, 10, code)
}

// TestHostileExportNames: an Extism plug-in's exported functions become
// its actions, so their names are checked at load like a manifest's
// (host.ValidateActionName); a newline once forged a `moat audit` row for
// another organization, and escape sequences reached the operator's
// terminal. One bad export refuses the plug-in, with or without a
// manifest that maps only valid names.
func TestHostileExportNames(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil, nil)
	cases := []struct {
		name     string
		exports  []string
		manifest string
		reason   string // "" loads
	}{
		{name: "camelCase and dots load", exports: []string{"greet", "countVowels", "v1.run"}},
		{name: "newline and a forged row", exports: []string{"greet", "x\n2025-01-01 invocation allow pay root@other"},
			reason: `action name "x\n2025-01-01 invocation allow pay root@other": character '\n' at 1`},
		{name: "carriage return", exports: []string{"ok\rfake"}, reason: `character '\r' at 2`},
		{name: "clear screen", exports: []string{"a\x1b[2J"}, reason: `action name "a\x1b[2J": character '\x1b' at 1`},
		{name: "OSC 52 clipboard write", exports: []string{"a\x1b]52;c;cm0gLXJmIH4=\x07"}, reason: `character '\x1b' at 1`},
		{name: "bell", exports: []string{"a\x07"}, reason: `character '\a' at 1`},
		{name: "C1 CSI", exports: []string{"a\u009b2J"}, reason: `character '\u009b' at 1`},
		{name: "bidi override", exports: []string{"a\u202e"}, reason: `character '\u202e' at 1`},
		{name: "space", exports: []string{"a b"}, reason: `character ' ' at 1`},
		{name: "leading underscore", exports: []string{"_private"}, reason: `character '_' at 0`},
		{name: "65 characters", exports: []string{strings.Repeat("f", 65)}, reason: "must be 1 to 64 characters long"},
		{name: "hostile export beside a manifest's valid action", exports: []string{"greet", "evil\x1b[0m"},
			manifest: "name: ext\nversion: 1.0.0\nkind: extism\nactions: [{name: greet}]\n", reason: `action name "evil\x1b[0m": character '\x1b' at 4`},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			opts := host.LoadOptions{Name: "ext"}
			if tt.manifest != "" {
				opts = host.LoadOptions{Manifest: manifest(t, tt.manifest)}
			}
			m, err := h.Load(context.Background(), extismWithExports(tt.exports...), opts)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if m.Kind() != host.KindExtism || len(m.Actions()) != len(tt.exports) {
					t.Fatalf("kind %s, actions %q", m.Kind(), m.Actions())
				}
				m.Close(context.Background())
				return
			}
			if err == nil {
				m.Close(context.Background())
				t.Fatalf("loaded with actions %q", m.Actions())
			}
			if abi.CodeOf(err) != abi.CodeBadModule {
				t.Fatalf("code %s, want %s: %v", abi.CodeOf(err), abi.CodeBadModule, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.reason) || !strings.Contains(msg, "the plug-in exports as a function is refused") {
				t.Fatalf("error %q does not say %q", msg, tt.reason)
			}
			if strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 }) {
				t.Fatalf("the error carries a raw control character: %q", msg)
			}
		})
	}
}
