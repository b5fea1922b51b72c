package python

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tokName   tokKind = iota // identifiers and keywords
	tokString                // string literals (their raw contents)
	tokOp                    // operators and punctuation
)

type token struct {
	kind tokKind
	text string
	line int
}

func isOp(t token, op string) bool { return t.kind == tokOp && t.text == op }

// lex splits Python into names, strings and operators, dropping comments,
// numbers and whitespace. It knows exactly enough (comments, string
// prefixes, triple quotes, f-string replacement fields) that names inside
// comments and strings are not taken for code and code inside f-strings
// is. It never fails: malformed input just ends the stream early.
func lex(src string) []token {
	l := &lexer{src: src, line: 1}
	l.code(false)
	return l.toks
}

type lexer struct {
	src  string
	pos  int
	line int
	toks []token
}

// code lexes until the end or, inField, the '}' closing an f-string
// replacement field.
func (l *lexer) code(inField bool) {
	depth := 0
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\n':
			l.line++
			l.pos++
		case c == ' ' || c == '\t' || c == '\r' || c == '\\' || c == '\f':
			l.pos++
		case c == '#':
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
		case c == '"' || c == '\'':
			l.str("")
		case c == '{' || c == '(' || c == '[':
			depth++
			l.op(string(c))
		case c == '}' || c == ')' || c == ']':
			if inField && depth == 0 {
				return // the caller consumes the '}'
			}
			depth--
			l.op(string(c))
		case inField && depth == 0 && (c == ':' || c == '!') && !strings.HasPrefix(l.src[l.pos:], "!="):
			return // a format spec or conversion follows; the caller skips it
		case c >= '0' && c <= '9':
			for l.pos < len(l.src) && (isIdent(rune(l.src[l.pos])) || l.src[l.pos] == '.') {
				l.pos++
			}
		default:
			r, size := utf8.DecodeRuneInString(l.src[l.pos:])
			if !isIdentStart(r) {
				l.op(l.src[l.pos : l.pos+size])
				continue
			}
			start := l.pos
			for l.pos < len(l.src) {
				r, size := utf8.DecodeRuneInString(l.src[l.pos:])
				if !isIdent(r) {
					break
				}
				l.pos += size
			}
			word := l.src[start:l.pos]
			if l.pos < len(l.src) && (l.src[l.pos] == '"' || l.src[l.pos] == '\'') && isPrefix(word) {
				l.str(strings.ToLower(word))
				continue
			}
			l.toks = append(l.toks, token{kind: tokName, text: word, line: l.line})
		}
	}
}

func (l *lexer) op(s string) {
	l.toks = append(l.toks, token{kind: tokOp, text: s, line: l.line})
	l.pos += len(s)
}

func isPrefix(w string) bool {
	switch strings.ToLower(w) {
	case "r", "u", "b", "f", "br", "rb", "fr", "rf":
		return true
	}
	return false
}

// str lexes a string literal at l.pos with the given (lower-case) prefix.
func (l *lexer) str(prefix string) {
	line := l.line
	q := l.src[l.pos : l.pos+1]
	if strings.HasPrefix(l.src[l.pos:], q+q+q) {
		q = q + q + q
	}
	l.pos += len(q)
	raw, fstr := strings.Contains(prefix, "r"), strings.Contains(prefix, "f")
	var b strings.Builder
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case strings.HasPrefix(l.src[l.pos:], q):
			l.pos += len(q)
			l.toks = append(l.toks, token{kind: tokString, text: b.String(), line: line})
			return
		case c == '\\' && l.pos+1 < len(l.src):
			if raw {
				b.WriteByte(c)
			}
			if l.src[l.pos+1] == '\n' {
				l.line++
			}
			b.WriteByte(l.src[l.pos+1])
			l.pos += 2
			continue
		case c == '\n':
			if len(q) == 1 {
				// unterminated single-quoted string: end it here
				l.toks = append(l.toks, token{kind: tokString, text: b.String(), line: line})
				return
			}
			l.line++
		case fstr && strings.HasPrefix(l.src[l.pos:], "{{"):
			b.WriteByte('{')
			l.pos += 2
			continue
		case fstr && c == '{':
			l.pos++
			l.code(true)
			// skip a format spec or conversion up to the closing brace
			for depth := 0; l.pos < len(l.src); l.pos++ {
				if l.src[l.pos] == '{' {
					depth++
				} else if l.src[l.pos] == '}' {
					if depth == 0 {
						break
					}
					depth--
				}
			}
			l.pos++
			continue
		}
		b.WriteByte(c)
		l.pos++
	}
	l.toks = append(l.toks, token{kind: tokString, text: b.String(), line: line})
}

func isIdentStart(r rune) bool { return r == '_' || unicode.IsLetter(r) }
func isIdent(r rune) bool      { return isIdentStart(r) || unicode.IsDigit(r) }
