package ruby

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tokName   tokKind = iota // identifiers, constants, keywords
	tokString                // string and symbol literals
	tokShell                 // `cmd` and %x(cmd)
	tokPunct                 // operators and punctuation
)

type token struct {
	kind tokKind
	text string
	line int
}

func isPunct(t token, ps ...string) bool {
	if t.kind != tokPunct {
		return false
	}
	for _, p := range ps {
		if t.text == p {
			return true
		}
	}
	return false
}

// lex splits Ruby into names, strings, command substitutions and
// punctuation, dropping comments (# and =begin/=end), numbers and
// whitespace. It knows enough of Ruby's literals (quotes, %-literals,
// heredocs, regexps, #{} interpolation) that names inside comments and
// strings are not taken for code and code inside interpolation is. It
// never fails: malformed input just ends the stream early.
func lex(src string) []token {
	l := &lexer{src: src, line: 1}
	l.code(false)
	return l.toks
}

type lexer struct {
	src      string
	pos      int
	line     int
	toks     []token
	heredocs []string // terminators of heredocs whose bodies start on the next line
}

var regexAfterName = map[string]bool{"if": true, "unless": true, "when": true, "and": true, "or": true, "not": true,
	"return": true, "puts": true, "print": true, "p": true, "while": true, "until": true, "in": true}

// valueBefore reports whether the last token ends a value, so that '/',
// '%' and '<<' are operators rather than literal openers.
func (l *lexer) valueBefore() bool {
	if len(l.toks) == 0 {
		return false
	}
	t := l.toks[len(l.toks)-1]
	switch t.kind {
	case tokName:
		return !regexAfterName[t.text]
	case tokString, tokShell:
		return true
	}
	return t.text == ")" || t.text == "]" || t.text == "}"
}

// code lexes until the end or, inInterp, the '}' closing a #{}.
func (l *lexer) code(inInterp bool) {
	depth := 0
	atLineStart := true
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		if atLineStart && strings.HasPrefix(l.src[l.pos:], "=begin") {
			end := strings.Index(l.src[l.pos:], "\n=end")
			if end < 0 {
				return
			}
			l.line += strings.Count(l.src[l.pos:l.pos+end+1], "\n")
			l.pos += end + 5
			continue
		}
		atLineStart = false
		switch {
		case c == '\n':
			l.line++
			l.pos++
			atLineStart = true
			l.skipHeredocs()
		case c == ' ' || c == '\t' || c == '\r' || c == '\\':
			l.pos++
		case c == '#':
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
		case c == '\'':
			l.pos++
			l.literal(tokString, '\'', '\'', false)
		case c == '"':
			l.pos++
			l.literal(tokString, '"', '"', true)
		case c == '`':
			l.pos++
			l.literal(tokShell, '`', '`', true)
		case c == '%' && !l.valueBefore() && l.pos+1 < len(l.src):
			l.percent()
		case c == '/' && !l.valueBefore():
			l.pos++
			l.literal(tokString, '/', '/', true)
		case c == '<' && strings.HasPrefix(l.src[l.pos:], "<<") && !l.valueBefore() && l.heredocStart():
		case c == ':' && l.pos+1 < len(l.src) && (l.src[l.pos+1] == '"' || isIdentStart(rune(l.src[l.pos+1]))):
			l.pos++ // a symbol: :name or :"name"
			if l.src[l.pos] == '"' {
				l.pos++
				l.literal(tokString, '"', '"', true)
				continue
			}
			start := l.pos
			for l.pos < len(l.src) && isIdent(rune(l.src[l.pos])) {
				l.pos++
			}
			l.toks = append(l.toks, token{kind: tokString, text: l.src[start:l.pos], line: l.line})
		case c == '{':
			depth++
			l.punct("{")
		case c == '}':
			if inInterp && depth == 0 {
				l.pos++
				return
			}
			depth--
			l.punct("}")
		case c >= '0' && c <= '9':
			for l.pos < len(l.src) && isIdent(rune(l.src[l.pos])) {
				l.pos++
			}
			l.toks = append(l.toks, token{kind: tokString, line: l.line})
		case c == '?' && l.pos+1 < len(l.src) && !l.valueBefore() && l.src[l.pos+1] != ' ':
			l.pos += 2 // a character literal: ?a
			l.toks = append(l.toks, token{kind: tokString, line: l.line})
		default:
			r, size := utf8.DecodeRuneInString(l.src[l.pos:])
			if isIdentStart(r) || c == '@' || c == '$' {
				start := l.pos
				l.pos += size
				for l.pos < len(l.src) {
					r, size := utf8.DecodeRuneInString(l.src[l.pos:])
					if !isIdent(r) {
						break
					}
					l.pos += size
				}
				if l.pos < len(l.src) && (l.src[l.pos] == '?' || l.src[l.pos] == '!') && !strings.HasPrefix(l.src[l.pos:], "!=") {
					l.pos++
				}
				l.toks = append(l.toks, token{kind: tokName, text: l.src[start:l.pos], line: l.line})
				continue
			}
			p := l.src[l.pos : l.pos+size]
			for _, cand := range []string{"::", "&.", "=>", "==", "!="} {
				if strings.HasPrefix(l.src[l.pos:], cand) {
					p = cand
					break
				}
			}
			l.toks = append(l.toks, token{kind: tokPunct, text: p, line: l.line})
			l.pos += len(p)
		}
	}
}

func (l *lexer) punct(p string) {
	l.toks = append(l.toks, token{kind: tokPunct, text: p, line: l.line})
	l.pos++
}

var closing = map[byte]byte{'(': ')', '[': ']', '{': '}', '<': '>'}

// percent lexes a %-literal: %q() %Q() %w[] %i[] %r{} %x() %s() %().
func (l *lexer) percent() {
	kind, interp := tokString, true
	p := l.pos + 1
	switch l.src[p] {
	case 'q', 'w', 'i', 's':
		interp = false
		p++
	case 'Q', 'W', 'I', 'r':
		p++
	case 'x':
		kind = tokShell
		p++
	}
	if p >= len(l.src) {
		l.pos = p
		return
	}
	open := l.src[p]
	if isIdent(rune(open)) || open == ' ' || open == '\n' || open == '=' {
		l.punct("%") // the modulo operator after all
		return
	}
	close, ok := closing[open]
	if !ok {
		close = open
	}
	l.pos = p + 1
	l.literal(kind, open, close, interp)
}

// literal lexes a literal's body after its opener, up to close, with
// nesting of paired delimiters and, if interp, #{} code.
func (l *lexer) literal(kind tokKind, open, close byte, interp bool) {
	line := l.line
	depth := 0
	var b strings.Builder
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\\' && l.pos+1 < len(l.src):
			if l.src[l.pos+1] == '\n' {
				l.line++
			}
			b.WriteByte(l.src[l.pos+1])
			l.pos += 2
			continue
		case c == close && depth == 0:
			l.pos++
			if kind == tokString && open == '/' { // regexp flags
				for l.pos < len(l.src) && isIdent(rune(l.src[l.pos])) {
					l.pos++
				}
			}
			l.toks = append(l.toks, token{kind: kind, text: b.String(), line: line})
			return
		case c == close:
			depth--
		case c == open && open != close:
			depth++
		case c == '\n':
			l.line++
		case interp && c == '#' && l.pos+1 < len(l.src) && l.src[l.pos+1] == '{':
			l.pos += 2
			l.code(true)
			continue
		}
		b.WriteByte(c)
		l.pos++
	}
	l.toks = append(l.toks, token{kind: kind, text: b.String(), line: line})
}

// heredocStart lexes <<ID, <<-ID, <<~ID (quoted or not) and remembers the
// terminator; the body is skipped at the next newline. It reports false
// when this '<<' is not a heredoc.
func (l *lexer) heredocStart() bool {
	p := l.pos + 2
	if p < len(l.src) && (l.src[p] == '-' || l.src[p] == '~') {
		p++
	}
	quote := byte(0)
	if p < len(l.src) && (l.src[p] == '\'' || l.src[p] == '"' || l.src[p] == '`') {
		quote = l.src[p]
		p++
	}
	start := p
	for p < len(l.src) && isIdent(rune(l.src[p])) {
		p++
	}
	if p == start || start < len(l.src) && !isIdentStart(rune(l.src[start])) {
		return false
	}
	id := l.src[start:p]
	if quote != 0 {
		if p >= len(l.src) || l.src[p] != quote {
			return false
		}
		p++
	}
	l.heredocs = append(l.heredocs, id)
	kind := tokString
	if quote == '`' {
		kind = tokShell
	}
	l.toks = append(l.toks, token{kind: kind, text: "", line: l.line})
	l.pos = p
	return true
}

// skipHeredocs skips the bodies of pending heredocs, which start at l.pos.
func (l *lexer) skipHeredocs() {
	for _, id := range l.heredocs {
		for l.pos < len(l.src) {
			end := strings.IndexByte(l.src[l.pos:], '\n')
			lineText := l.src[l.pos:]
			if end >= 0 {
				lineText = l.src[l.pos : l.pos+end]
				l.pos += end + 1
			} else {
				l.pos = len(l.src)
			}
			l.line++
			if strings.TrimSpace(lineText) == id {
				break
			}
		}
	}
	l.heredocs = l.heredocs[:0]
}

func isIdentStart(r rune) bool { return r == '_' || unicode.IsLetter(r) }
func isIdent(r rune) bool      { return isIdentStart(r) || unicode.IsDigit(r) }
