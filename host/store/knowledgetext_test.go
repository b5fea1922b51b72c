package store

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
)

func TestDocTerms(t *testing.T) {
	for _, tt := range []struct {
		text string
		want []string // decoded terms
	}{
		{"Hello, World!", []string{"hello", "world"}},
		{"RÉSUMÉ résumé Resume", []string{"resume", "resume", "resume"}},
		{"e\u0301te\u0301", []string{"ete"}},           // decomposed accents
		{"ＡＢＣ ﬁnal ½", []string{"abc", "final", "12"}}, // compatibility forms
		{"東京で", []string{"東", "京", "で"}},
		{"Straße İstanbul", []string{"straße", "istanbul"}},
		{"don't x-ray e-mail", []string{"don", "t", "x", "ray", "e", "mail"}},
		{`"a" NEAR(b) c:d e* ^f (g) 'h' & | ! :*`, []string{"a", "near", "b", "c", "d", "e", "f", "g", "h"}},
		{"a\x00b", []string{"a", "b"}},
		{strings.Repeat("x", abi.MaxKnowledgeTermBytes) + " " + strings.Repeat("y", abi.MaxKnowledgeTermBytes+1) + " z",
			[]string{strings.Repeat("x", abi.MaxKnowledgeTermBytes), "z"}},
		{"—…!!!", nil},
	} {
		var got []string
		forEachWord(tt.text, func(start, end int) {
			if term, ok := termOf(tt.text[start:end]); ok {
				got = append(got, term)
			}
		})
		if !slices.Equal(got, tt.want) {
			t.Errorf("terms of %q = %q, want %q", tt.text, got, tt.want)
		}
		if n := len(docTerms(tt.text)); n != len(tt.want) {
			t.Errorf("docTerms(%q) has %d terms, want %d", tt.text, n, len(tt.want))
		}
	}
}

func TestEncodeTerm(t *testing.T) {
	for term, want := range map[string]string{
		"zebra": "azebra", "42": "a42", "ß": "uc39f", "東": "ue69db1",
	} {
		if got := encodeTerm(term); got != want {
			t.Errorf("encodeTerm(%q) = %q, want %q", term, got, want)
		}
	}
}

func TestQueryTerms(t *testing.T) {
	got := queryTerms(`Zebra zebra "ZEBRA" lion* (lion) OR`)
	if want := []string{"zebra", "lion", "or"}; !slices.Equal(got, want) {
		t.Errorf("queryTerms = %q, want %q", got, want)
	}
}

func TestSnippet(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		terms      []string
		want       string
	}{
		{"whole short text", "a  short\n\ttext", []string{"short"}, "a short text"},
		{"cut both ends", strings.Repeat("lead ", 100) + "target " + strings.Repeat("tail ", 100), []string{"target"},
			"…lead lead lead target" + strings.Repeat(" tail", 59) + "…"},
		{"no words", strings.Repeat("!", 400), []string{"x"}, strings.Repeat("!", abi.MaxKnowledgeSnippetBytes) + "…"},
		{"multi-byte cut", strings.Repeat("é", 400), []string{"x"}, ""}, // checked below
	} {
		got := snippet(tt.text, tt.terms)
		if tt.want != "" && got != tt.want {
			t.Errorf("%s: snippet = %q\nwant %q", tt.name, got, tt.want)
		}
		body := strings.TrimSuffix(strings.TrimPrefix(got, "…"), "…")
		if !utf8.ValidString(got) || len(body) > abi.MaxKnowledgeSnippetBytes {
			t.Errorf("%s: snippet %q is not UTF-8 or over %d bytes", tt.name, got, abi.MaxKnowledgeSnippetBytes)
		}
	}
}

// FuzzKnowledgeText: any text splits into terms the backends can index
// (a-z 0-9, starting with a or u, at most 257 bytes), and its snippet for
// any query is UTF-8 within the bound.
func FuzzKnowledgeText(f *testing.F) {
	for _, s := range []string{"", "Hello, World!", "東京で会議", "e\u0301\u0301\u0301", "\xff\xfe", `"a" NEAR(b) c:d`, "a\x00b", "½ ﬁ İ ß"} {
		f.Add(s, "hello")
	}
	f.Fuzz(func(t *testing.T, text, query string) {
		if !utf8.ValidString(text) || !utf8.ValidString(query) {
			return // the front refuses these before they get here
		}
		for _, term := range docTerms(text) {
			if len(term) < 2 || len(term) > 1+2*abi.MaxKnowledgeTermBytes || term[0] != 'a' && term[0] != 'u' ||
				strings.IndexFunc(term, func(r rune) bool { return !('a' <= r && r <= 'z' || '0' <= r && r <= '9') }) >= 0 {
				t.Fatalf("term %q of %q cannot be indexed as one token", term, text)
			}
		}
		sn := snippet(text, queryTerms(query))
		body := strings.TrimSuffix(strings.TrimPrefix(sn, "…"), "…")
		if !utf8.ValidString(sn) || len(body) > abi.MaxKnowledgeSnippetBytes {
			t.Fatalf("snippet %q of %q", sn, text)
		}
	})
}
