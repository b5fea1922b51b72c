package host_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

// wasmSection appends section id with body to b.
func wasmSection(b []byte, id byte, body []byte) []byte {
	b = append(b, id)
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

func wasmName(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// pluginWithActions is a moat plugin (ABI v1) whose moat_actions returns
// list as it is: the action names a module registers are the module's
// own bytes, not the manifest's.
func pluginWithActions(list string) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	// types: ()->i32, ()->i64, (i32)->i32, (i32 i32 i32)->i64
	b = wasmSection(b, 1, []byte{4,
		0x60, 0, 1, 0x7f,
		0x60, 0, 1, 0x7e,
		0x60, 1, 0x7f, 1, 0x7f,
		0x60, 3, 0x7f, 0x7f, 0x7f, 1, 0x7e})
	b = wasmSection(b, 3, []byte{4, 0, 1, 2, 3})
	b = wasmSection(b, 5, []byte{1, 0, 2}) // one memory, min 2 pages
	exp := []byte{5}
	exp = append(wasmName(exp, "memory"), 2, 0)
	for i, n := range []string{abi.ExportVersion, abi.ExportActions, abi.ExportAlloc, abi.ExportInvoke} {
		exp = append(wasmName(exp, n), 0, byte(i))
	}
	b = wasmSection(b, 7, exp)
	body := func(code ...byte) []byte { return append(append([]byte{byte(len(code) + 2), 0}, code...), 0x0b) }
	code := []byte{4}
	code = append(code, body(0x41, 1)...)                                            // i32.const 1
	code = append(code, body(append([]byte{0x42}, sleb(int64(len(list)))...)...)...) // i64.const len (pointer 0)
	code = append(code, body(0x41, 0x80, 0x08)...)                                   // i32.const 1024
	code = append(code, body(0x42, 0)...)                                            // i64.const 0
	b = wasmSection(b, 10, code)
	data := []byte{1, 0, 0x41, 0, 0x0b}
	data = wasmName(data, list)
	return wasmSection(b, 11, data)
}

func sleb(v int64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

// TestHostileActionNames: action names a module registers itself reach
// audit rows, logs, metric labels and the operator's terminal, so each is
// checked at load like a manifest's; one bad name refuses the module with
// the name quoted (no raw control byte in the error either).
func TestHostileActionNames(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	long := strings.Repeat("a", 65)
	cases := []struct {
		name, list string
		manifest   string // a manifest mapping a valid name, when set
		reason     string // "" loads
	}{
		{name: "plain names load", list: "greet\ncount.v2\nA_b-c\n"},
		{name: "64 characters load", list: strings.Repeat("a", 64)},
		{name: "newline forging an audit row", list: "ok\r\n2024-01-01 00:00:00 invocation allow admin-mod", reason: `action name "ok\r": character '\r' at 2`},
		{name: "ANSI escape", list: "\x1b[2J\x1b[31mPWNED", reason: `action name "\x1b[2J\x1b[31mPWNED": character '\x1b' at 0`},
		{name: "escape after a valid start", list: "greet\x1b]0;title\x07", reason: `character '\x1b' at 5`},
		{name: "tab shifts table columns", list: "a\tb", reason: `character '\t' at 1`},
		{name: "NUL", list: "a\x00b", reason: `character '\x00' at 1`},
		{name: "DEL", list: "a\x7f", reason: `character '\x7f' at 1`},
		{name: "C1 control (CSI)", list: "a\u009b31m", reason: `character '\u009b' at 1`},
		{name: "right-to-left override", list: "evil\u202etxt.exe", reason: `character '\u202e' at 4`},
		{name: "zero-width space", list: "ad\u200bmin", reason: `character '\u200b' at 2`},
		{name: "space", list: "two words", reason: `character ' ' at 3`},
		{name: "slash (a URL path)", list: "../admin", reason: `character '.' at 0`},
		{name: "leading dash (a flag)", list: "-rf", reason: `character '-' at 0`},
		{name: "too long", list: long, reason: "must be 1 to 64 characters long"},
		{name: "huge", list: strings.Repeat("x", 100_000), reason: `(100000 bytes) must be 1 to 64 characters long`},
		{name: "invalid UTF-8", list: "a\xffb", reason: `action name "a\xffb": byte 0xff at 1 is not UTF-8`},
		{name: "hostile name beside a manifest's valid one", list: "greet\n\x1b[31m", manifest: "name: mapped\nversion: 1.0.0\nactions: [{name: greet}]\n",
			reason: `action name "\x1b[31m": character '\x1b' at 0`},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			opts := host.LoadOptions{Name: "names"}
			if tt.manifest != "" {
				mf, err := policy.ParseManifest("moat.yaml", []byte(tt.manifest))
				if err != nil {
					t.Fatal(err)
				}
				opts = host.LoadOptions{Manifest: mf}
			}
			m, err := h.Load(context.Background(), pluginWithActions(tt.list), opts)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(m.Actions()) == 0 {
					t.Fatal("no actions")
				}
				return
			}
			if err == nil {
				t.Fatalf("loaded with actions %q", m.Actions())
			}
			if abi.CodeOf(err) != abi.CodeBadModule {
				t.Fatalf("code %s, want %s: %v", abi.CodeOf(err), abi.CodeBadModule, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.reason) || !strings.Contains(msg, "the module registers (moat_actions) is refused") {
				t.Fatalf("error %q does not say %q", msg, tt.reason)
			}
			if strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' }) {
				t.Fatalf("the error carries a raw control character: %q", msg)
			}
		})
	}
}

// TestValidateActionName: the validator itself, with the module-name
// rules beside it (one alphabet, checkName).
func TestValidateActionName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		s      string
		action bool
		module bool
	}{
		{"greet", true, true}, {"Greet", true, false}, {"a.b_c-d", true, true}, {"9lives", true, true},
		{"", false, false}, {".hidden", false, false}, {"a b", false, false}, {"a\nb", false, false},
		{strings.Repeat("z", 64), true, true}, {strings.Repeat("z", 65), false, false}, {"é", false, false},
	} {
		if got := host.ValidateActionName(tt.s) == nil; got != tt.action {
			t.Errorf("ValidateActionName(%q) ok=%t, want %t", tt.s, got, tt.action)
		}
		if got := host.ValidateModuleName(tt.s) == nil; got != tt.module {
			t.Errorf("ValidateModuleName(%q) ok=%t, want %t", tt.s, got, tt.module)
		}
	}
}
