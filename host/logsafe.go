package host

import (
	"fmt"
	"log/slog"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SafeLogAttr is a slog.HandlerOptions.ReplaceAttr for the logs of moat
// run and moat serve. slog's handlers take care of the ASCII controls (the
// TextHandler quotes a key or value holding a newline or an escape, the
// JSONHandler escapes them), so a guest's log.write (message, field
// names and values) or a module's name cannot forge a record that way.
// They leave raw what JSON and Go's quoting allow: DEL (0x7f) in both,
// and in JSON the C1 controls (U+009B is CSI to many terminals), bidi
// overrides and other non-printing characters. SafeLogAttr writes those
// as Go escapes (\x7f, \u009b) in keys, strings and values printed with
// fmt (a guest's JSON fields); a record without them is left as it was.
// It also writes every duration with its unit ("took":"1.5ms", not the
// JSON handler's bare nanoseconds).
func SafeLogAttr(_ []string, a slog.Attr) slog.Attr {
	if unsafeForLog(a.Key) {
		a.Key = escapeForLog(a.Key)
	}
	switch a.Value.Kind() {
	case slog.KindDuration:
		// JSON handlers write a duration as integer nanoseconds: a
		// reader (or an alert rule) of "took":1234567 must know the unit.
		// As Go writes it ("1.234567ms"), every handler says it.
		a.Value = slog.StringValue(a.Value.Duration().String())
	case slog.KindString:
		if s := a.Value.String(); unsafeForLog(s) {
			a.Value = slog.StringValue(escapeForLog(s))
		}
	case slog.KindAny:
		if s := fmt.Sprintf("%+v", a.Value.Any()); unsafeForLog(s) {
			a.Value = slog.StringValue(escapeForLog(s))
		}
	}
	return a
}

// rawInLog reports whether r is a character the handlers pass through
// unescaped although it does not print as itself.
func rawInLog(r rune) bool {
	return r == 0x7f || r >= utf8.RuneSelf && r != utf8.RuneError && !unicode.IsPrint(r)
}

func unsafeForLog(s string) bool { return strings.ContainsFunc(s, rawInLog) }

func escapeForLog(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == 0x7f:
			b.WriteString(`\x7f`)
		case rawInLog(r) && r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		case rawInLog(r):
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
