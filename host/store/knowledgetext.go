package store

import (
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/moat-sandbox/moat/abi"
)

// Words and terms of knowledge text (the rules are abi's, in
// abi/knowledge.go).
//
// The front splits every document and every query into terms itself, and
// hands the backends terms in one encoding: "a" + the term when it is
// ASCII, "u" + its UTF-8 in hex otherwise, so each is 2 to 257 bytes of
// a-z 0-9 starting with a letter. No backend's own parser ever reads guest
// text, so nothing in it is syntax (FTS5's quotes, NEAR, col: and *,
// tsquery's & | ! and :*), and both backends index exactly the same terms,
// whatever their tokenizers, locales or versions would have made of the
// text. docs/RATIONALE.md says why moat has a tokenizer of its own.

// isWordRune reports whether r belongs to a word: letters, digits and
// marks (which carry accents and the vowels of many scripts).
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r)
}

// isSoloRune reports whether r is a word on its own: Han, Hiragana and
// Katakana are written without spaces, so each character is a term and a
// query of several finds them all.
func isSoloRune(r rune) bool {
	return r >= 0x2E80 && unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana)
}

// forEachWord calls f with the byte span of every word of text, in order.
// text must be valid UTF-8.
func forEachWord(text string, f func(start, end int)) {
	start := -1
	for i, r := range text {
		switch {
		case isSoloRune(r):
			if start >= 0 {
				f(start, i)
				start = -1
			}
			f(i, i+utf8.RuneLen(r))
		case isWordRune(r):
			if start < 0 {
				start = i
			}
		default:
			if start >= 0 {
				f(start, i)
				start = -1
			}
		}
	}
	if start >= 0 {
		f(start, len(text))
	}
}

// isDiacritic reports whether r is one of the combining diacritical marks
// that accent Latin, Greek and Cyrillic letters (the Combining Diacritical
// Marks blocks): the marks a search ignores. Other scripts' marks (the
// dakuten that tells で from て, Indic vowel signs) are part of the word.
func isDiacritic(r rune) bool {
	return 0x0300 <= r && r <= 0x036F || 0x1AB0 <= r && r <= 0x1AFF || 0x1DC0 <= r && r <= 0x1DFF ||
		0x20D0 <= r && r <= 0x20FF || 0xFE20 <= r && r <= 0xFE2F
}

// termOf returns the term of word: NFKD, diacritics dropped (and whatever
// the decomposition made that is not a word rune, like the fraction slash
// of ½), lower case, NFC. ok is false when nothing is left or the term is
// longer than abi.MaxKnowledgeTermBytes.
func termOf(word string) (term string, ok bool) {
	ascii := true
	for i := 0; i < len(word); i++ {
		if word[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii { // letters and digits only: forEachWord split off the rest
		if len(word) > abi.MaxKnowledgeTermBytes {
			return "", false
		}
		return strings.ToLower(word), true
	}
	if len(word) > 4*abi.MaxKnowledgeTermBytes {
		// NFKD of a word this long cannot come back under the limit
		// unless it is mostly marks; bounding the work matters more.
		return "", false
	}
	var b strings.Builder
	for _, r := range norm.NFKD.String(word) {
		if isDiacritic(r) || !isWordRune(r) {
			continue
		}
		b.WriteRune(unicode.ToLower(r))
		if b.Len() > abi.MaxKnowledgeTermBytes {
			return "", false
		}
	}
	// Composed again, so that what stays of a decomposition (で, the
	// syllables of Hangul) is one character, as it is usually written.
	return norm.NFC.String(b.String()), b.Len() > 0
}

// encodeTerm writes term as the backends index it.
func encodeTerm(term string) string {
	for i := 0; i < len(term); i++ {
		if c := term[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return "u" + hex.EncodeToString([]byte(term))
		}
	}
	return "a" + term
}

// docTerms returns the encoded terms of text in order, repeats included.
func docTerms(text string) []string {
	var terms []string
	forEachWord(text, func(start, end int) {
		if t, ok := termOf(text[start:end]); ok {
			terms = append(terms, encodeTerm(t))
		}
	})
	return terms
}

// queryTerms returns the distinct terms of query (normalized, not yet
// encoded), in the order they first occur.
func queryTerms(query string) []string {
	var terms []string
	forEachWord(query, func(start, end int) {
		t, ok := termOf(query[start:end])
		if !ok {
			return
		}
		for _, seen := range terms {
			if seen == t {
				return
			}
		}
		terms = append(terms, t)
	})
	return terms
}

// snippetWindow is how many words a snippet is chosen over: the window
// holding the most distinct query terms wins.
const snippetWindow = 12

// snippet returns the part of text around the best cluster of the query's
// terms: at most abi.MaxKnowledgeSnippetBytes of it, a few words of context
// before the first term found, whole words where they fit, runs of white
// space as one space, and "…" where text was cut.
func snippet(text string, terms []string) string {
	type hit struct{ word, term int }
	var spans [][2]int
	var hits []hit
	forEachWord(text, func(start, end int) {
		if t, ok := termOf(text[start:end]); ok {
			for i, q := range terms {
				if q == t {
					hits = append(hits, hit{len(spans), i})
					break
				}
			}
		}
		spans = append(spans, [2]int{start, end})
	})
	first := 0 // the word the snippet is built around
	best := 0
	seen := make([]bool, len(terms))
	for i, h := range hits {
		clear(seen)
		n := 0
		for _, g := range hits[i:] {
			if g.word >= h.word+snippetWindow {
				break
			}
			if !seen[g.term] {
				seen[g.term] = true
				n++
			}
		}
		if n > best {
			best, first = n, h.word
		}
	}
	const lead = 3 // words of context before the first term found
	start, end := 0, len(text)
	if len(spans) > 0 {
		start = spans[max(first-lead, 0)][0]
		if spans[first][0]-start > abi.MaxKnowledgeSnippetBytes/3 {
			start = spans[first][0]
		}
		if end-start > abi.MaxKnowledgeSnippetBytes {
			end = start + abi.MaxKnowledgeSnippetBytes
			// End after the last whole word that fits, if one after the
			// first term found does; else cut inside a character's bounds.
			cut := -1
			for _, s := range spans[first:] {
				if s[1] > end {
					break
				}
				cut = s[1]
			}
			if cut > spans[first][0] {
				end = cut
			} else {
				for end > start && !utf8.RuneStart(text[end]) {
					end--
				}
			}
		}
	} else if end > abi.MaxKnowledgeSnippetBytes {
		end = abi.MaxKnowledgeSnippetBytes
		for end > 0 && !utf8.RuneStart(text[end]) {
			end--
		}
	}
	s := strings.Join(strings.Fields(text[start:end]), " ")
	if strings.TrimSpace(text[:start]) != "" {
		s = "…" + s
	}
	if strings.TrimSpace(text[end:]) != "" {
		s += "…"
	}
	return s
}
