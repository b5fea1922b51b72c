package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// termSafe returns s fit for one cell of a table printed to a terminal:
// every character a terminal would act on rather than show is written as
// a Go escape, so "\x1b[2J" arrives as those six characters, not as a
// cleared screen. Escaped are the C0 and C1 controls and DEL (newline,
// carriage return and tab too: each would forge a row or shift the
// columns of a table), format characters such as U+202E (right-to-left
// override, which reorders what follows), other non-printing runes, and
// bytes that are not UTF-8. Everything moat prints from stored or
// untrusted data (audit rows, module names and exports, key names,
// errors a guest wrote) goes through it; --json output needs no help, as
// JSON escapes control characters itself.
func termSafe(s string) string {
	if !needsEscape(s, false) {
		return s
	}
	return escape(s, false)
}

// termSafeText is termSafe for text of several lines: newlines are kept,
// every other control character is escaped.
func termSafeText(s string) string {
	if !needsEscape(s, true) {
		return s
	}
	return escape(s, true)
}

func needsEscape(s string, lines bool) bool {
	for _, r := range s {
		if !safeRune(r, lines) {
			return true
		}
	}
	return false
}

// safeRune reports whether r prints as itself. utf8.RuneError is unsafe
// here, so a string with it takes the slow path, which tells a real
// U+FFFD from an invalid byte.
func safeRune(r rune, lines bool) bool {
	return r == ' ' || lines && r == '\n' || r != utf8.RuneError && unicode.IsPrint(r)
}

func escape(s string, lines bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case safeRune(r, lines) || r == utf8.RuneError:
			b.WriteString(s[i : i+size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// termSafeAll applies termSafe to each of ss.
func termSafeAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = termSafe(s)
	}
	return out
}
