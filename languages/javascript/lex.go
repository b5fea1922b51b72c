package javascript

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tokName   tokKind = iota // identifiers and keywords
	tokString                // string literals and the literal parts of templates
	tokPunct                 // operators and punctuation
)

type token struct {
	kind tokKind
	text string // a string's value (escapes kept), a name, a punctuator
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

// lex splits JavaScript into names, strings and punctuators, dropping
// comments, numbers, regular expressions and whitespace. It is not a full
// tokenizer: it knows exactly enough (comments, the three string forms,
// template substitutions, the regex-or-division ambiguity) that names
// inside comments and strings are not taken for code and code inside
// template substitutions is. It never fails: malformed input just ends the
// token stream early.
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

// regexAfter: after these punctuators and keywords a '/' starts a regular
// expression; after a name, a literal, ')' or ']' it divides.
var regexAfterKeyword = map[string]bool{"return": true, "typeof": true, "instanceof": true, "in": true, "of": true,
	"new": true, "delete": true, "void": true, "throw": true, "case": true, "do": true, "else": true, "yield": true, "await": true}

func (l *lexer) regexAllowed() bool {
	if len(l.toks) == 0 {
		return true
	}
	t := l.toks[len(l.toks)-1]
	switch t.kind {
	case tokName:
		return regexAfterKeyword[t.text]
	case tokString:
		return false
	}
	return t.text != ")" && t.text != "]" && t.text != "}"
}

var puncts = []string{"?.", "...", "=>", "===", "!==", "==", "!=", "<=", ">=", "&&", "||", "??", "++", "--", "**"}

// code lexes until the end, or (inTemplate) until the '}' closing a
// template substitution.
func (l *lexer) code(inTemplate bool) {
	depth := 0
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\n':
			l.line++
			l.pos++
		case c == ' ' || c == '\t' || c == '\r':
			l.pos++
		case strings.HasPrefix(l.src[l.pos:], "//"):
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
		case strings.HasPrefix(l.src[l.pos:], "/*"):
			end := strings.Index(l.src[l.pos+2:], "*/")
			if end < 0 {
				end = len(l.src) - l.pos - 2
			}
			l.line += strings.Count(l.src[l.pos:l.pos+2+end], "\n")
			l.pos += end + 4
		case c == '"' || c == '\'':
			l.quoted(c)
		case c == '`':
			l.pos++
			l.template()
		case c == '/' && l.regexAllowed():
			l.regex()
		case c == '{':
			depth++
			l.punct("{")
		case c == '}':
			if inTemplate && depth == 0 {
				l.pos++
				return
			}
			depth--
			l.punct("}")
		case c >= '0' && c <= '9':
			for l.pos < len(l.src) && (isIdent(rune(l.src[l.pos])) || l.src[l.pos] == '.') {
				l.pos++
			}
			l.toks = append(l.toks, token{kind: tokString, text: "", line: l.line}) // a literal: '/' after it divides
		default:
			r, size := utf8.DecodeRuneInString(l.src[l.pos:])
			if isIdentStart(r) {
				start := l.pos
				l.pos += size
				for l.pos < len(l.src) {
					r, size := utf8.DecodeRuneInString(l.src[l.pos:])
					if !isIdent(r) {
						break
					}
					l.pos += size
				}
				l.toks = append(l.toks, token{kind: tokName, text: l.src[start:l.pos], line: l.line})
				continue
			}
			p := string(c)
			for _, cand := range puncts {
				if strings.HasPrefix(l.src[l.pos:], cand) {
					p = cand
					break
				}
			}
			if p == "?." && l.pos+2 < len(l.src) && l.src[l.pos+2] >= '0' && l.src[l.pos+2] <= '9' {
				p = "?" // a ? .5 : b
			}
			l.pos += len(p) - 1
			l.pos += size
			l.toks = append(l.toks, token{kind: tokPunct, text: p, line: l.line})
		}
	}
}

func (l *lexer) punct(p string) {
	l.toks = append(l.toks, token{kind: tokPunct, text: p, line: l.line})
	l.pos++
}

func (l *lexer) quoted(q byte) {
	line := l.line
	l.pos++
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
		case c == q:
			l.pos++
			l.toks = append(l.toks, token{kind: tokString, text: b.String(), line: line})
			return
		case c == '\n':
			l.line++ // unterminated: keep going, as an engine would report
		}
		b.WriteByte(c)
		l.pos++
	}
	l.toks = append(l.toks, token{kind: tokString, text: b.String(), line: line})
}

// template lexes a template literal after its opening backquote: literal
// parts become strings, substitutions are code.
func (l *lexer) template() {
	line := l.line
	var b strings.Builder
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\\' && l.pos+1 < len(l.src):
			b.WriteByte(l.src[l.pos+1])
			l.pos += 2
			continue
		case c == '`':
			l.pos++
			l.toks = append(l.toks, token{kind: tokString, text: b.String(), line: line})
			return
		case c == '$' && l.pos+1 < len(l.src) && l.src[l.pos+1] == '{':
			l.toks = append(l.toks, token{kind: tokString, text: b.String(), line: line})
			b.Reset()
			l.pos += 2
			l.code(true)
			line = l.line
			continue
		case c == '\n':
			l.line++
		}
		b.WriteByte(c)
		l.pos++
	}
}

func (l *lexer) regex() {
	l.pos++ // the opening '/'
	inClass := false
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\\':
			l.pos++
		case c == '[':
			inClass = true
		case c == ']':
			inClass = false
		case c == '/' && !inClass:
			l.pos++
			for l.pos < len(l.src) && isIdent(rune(l.src[l.pos])) { // flags
				l.pos++
			}
			l.toks = append(l.toks, token{kind: tokString, line: l.line})
			return
		case c == '\n':
			return // not a regex after all; resync on the next line
		}
		l.pos++
	}
}

func isIdentStart(r rune) bool { return r == '_' || r == '$' || unicode.IsLetter(r) }
func isIdent(r rune) bool      { return isIdentStart(r) || unicode.IsDigit(r) }
