package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
)

// hostileStrings are what a module, a client or a stored row can put into
// a field the CLI prints: each must arrive as visible text, never as a
// control sequence or an extra row.
var hostileStrings = []struct{ in, want string }{
	{"plain name", "plain name"},
	{"ünïcödé ok", "ünïcödé ok"},
	{"row\n2025-01-01 forged", `row\n2025-01-01 forged`},
	{"cr\roverwrite", `cr\roverwrite`},
	{"tab\tcolumn", `tab\tcolumn`},
	{"\x1b[2J\x1b[31mred", `\x1b[2J\x1b[31mred`},
	{"osc\x1b]52;c;Zm9v\x07", `osc\x1b]52;c;Zm9v\x07`},
	{"nul\x00", `nul\x00`},
	{"del\x7f", `del\x7f`},
	{"c1\u009b2J", `c1\u009b2J`},
	{"bidi\u202eexe.txt", `bidi\u202eexe.txt`},
	{"zwsp\u200b", `zwsp\u200b`},
	{"bad\xffutf8", `bad\xffutf8`},
	{"real \ufffd stays", "real \ufffd stays"},
	{"tag\U000e0041", `tag\U000e0041`},
}

func TestTermSafe(t *testing.T) {
	for _, tt := range hostileStrings {
		if got := termSafe(tt.in); got != tt.want {
			t.Errorf("termSafe(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got, want := termSafeText("line one\nline\x1b[2K two\n"), "line one\nline\\x1b[2K two\n"; got != want {
		t.Errorf("termSafeText: %q, want %q", got, want)
	}
}

// clean fails when out holds a control character other than newline.
func clean(t *testing.T, what, out string) {
	t.Helper()
	for _, r := range out {
		if r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' || r == '\u200b') {
			t.Fatalf("%s printed a raw %U: %q", what, r, out)
		}
	}
}

// TestAuditTableHostile: `moat audit` prints one row per event whatever
// its stored fields hold (a forged row once came from an action name with
// a newline), and no escape sequence reaches the terminal.
func TestAuditTableHostile(t *testing.T) {
	var events []audit.Event
	for _, h := range hostileStrings {
		events = append(events, audit.Event{Time: time.Unix(0, 0), Kind: audit.KindInvocation, Decision: audit.Allow,
			Module: h.in, Action: h.in, Op: h.in, User: h.in, Org: h.in, CorrelationID: h.in, Code: h.in, Reason: h.in, Rule: h.in, MutationID: h.in})
	}
	var b bytes.Buffer
	printEvents(&b, events)
	out := b.String()
	clean(t, "moat audit", out)
	if lines := strings.Count(out, "\n"); lines != len(events)+1 {
		t.Fatalf("%d lines for %d events and a header:\n%s", lines, len(events), out)
	}
	for _, h := range hostileStrings {
		if !strings.Contains(out, h.want) {
			t.Errorf("the table does not show %q as %q", h.in, h.want)
		}
	}
}

// TestInspectHostile: `moat inspect` prints names, actions, imports and
// exports (the module's own bytes) escaped, one per line.
func TestInspectHostile(t *testing.T) {
	info := host.Info{Name: "m", Kind: host.KindExtism, Mode: "sandboxed", Signer: "k\x1b[0m"}
	for _, h := range hostileStrings {
		info.Actions = append(info.Actions, h.in)
		info.Imports = append(info.Imports, host.Signature{Module: h.in, Name: h.in})
		info.Exports = append(info.Exports, host.Signature{Name: h.in})
	}
	var b bytes.Buffer
	printInfo(&b, info)
	out := b.String()
	clean(t, "moat inspect", out)
	if want := 8 + 2 + 2*len(hostileStrings); strings.Count(out, "\n") != want {
		t.Fatalf("%d lines, want %d:\n%s", strings.Count(out, "\n"), want, out)
	}
	if !strings.Contains(out, `k\x1b[0m`) {
		t.Errorf("signer not escaped:\n%s", out)
	}
}

// TestErrorLineHostile: the error line moat prints (oneLine) may quote a
// guest's message; it is escaped too.
func TestErrorLineHostile(t *testing.T) {
	err := &host.Error{Module: "m", Code: "guest_error", Reason: "boom\x1b]0;owned\x07 \u202eok"}
	got := oneLine(err)
	clean(t, "the error line", got)
	if !strings.Contains(got, `boom\x1b]0;owned\x07 \u202eok`) {
		t.Fatalf("oneLine %q", got)
	}
}

// TestLogHostile: the server's and the CLI's text log (slog.TextHandler)
// quote a value or a message holding a control character, so a guest's
// log line or a name cannot forge a record or drive the terminal; the
// JSON handler escapes them. Checked here so a change of handler shows.
func TestLogHostile(t *testing.T) {
	for _, tt := range hostileStrings[2:] {
		for _, json := range []bool{false, true} {
			var b bytes.Buffer
			var h slog.Handler = slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: host.SafeLogAttr})
			if json {
				h = slog.NewJSONHandler(&b, &slog.HandlerOptions{ReplaceAttr: host.SafeLogAttr})
			}
			slog.New(h).Info(tt.in, "action", tt.in, tt.in, "v", "guest.fields", map[string]any{tt.in: []any{tt.in}})
			out := b.String()
			if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
				t.Fatalf("json=%t: %q is %d lines: %q", json, tt.in, strings.Count(out, "\n"), out)
			}
			for _, r := range strings.TrimSuffix(out, "\n") {
				if r < 0x20 || r == 0x7f || r >= 0x80 && r != utf8.RuneError && !unicode.IsPrint(r) {
					t.Fatalf("json=%t: raw %U in %q", json, r, out)
				}
			}
		}
	}
}
