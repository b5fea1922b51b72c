package hostile

import (
	"fmt"
	"strings"
)

// YAMLFile describes a kind of file moat decodes with its strict YAML
// decoder (internal/yamlstrict), for YAMLDocuments.
type YAMLFile struct {
	Head  string // the lines every file of the kind needs, each ending in \n
	Str   string // a top-level field holding a string
	List  string // a field holding a list of strings, as a one-line prefix ("capabilities: {db: " … "}" is written Open/Close)
	Open  string // what opens List's line, like "capabilities: {db: "
	Close string // what closes it, like "}"
}

// YAMLCase is one hostile document and the exact refusal the decoder owes
// it: the line, the field path ("" for a syntax error, "?" for "any") and
// a part of the message.
type YAMLCase struct {
	Name  string
	Doc   string
	Line  int
	Field string
	Msg   string
}

// YAMLDocuments are the hostile documents every strict YAML file kind must
// refuse the same way: aliases (one, and a "billion laughs" of nested
// ones), merge keys, explicit tags, repeated keys, unknown fields, a second
// document, tabs, a file past the size limit (maxSize bytes) and one
// holding more values than any real file (maxValues).
func YAMLDocuments(f YAMLFile, maxSize, maxValues int) []YAMLCase {
	h := strings.Count(f.Head, "\n")
	list := func(items string) string { return f.Open + "[" + items + "]" + f.Close + "\n" }
	// Nine levels of nine aliases: 9^9 strings if expanded.
	var laughs strings.Builder
	laughs.WriteString(f.Head + f.Open + "[&l0 [x, x, x, x, x, x, x, x, x]")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&laughs, ", &l%d [%s]", i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9), ", "))
	}
	laughs.WriteString("]" + f.Close + "\n")
	many := strings.TrimSuffix(strings.Repeat("x, ", maxValues+1), ", ")
	return []YAMLCase{
		{"alias", f.Head + list("&s x, *s"), h + 1, f.List + "[1]", "YAML aliases (*s) are not supported (the anchor &s is at line " + fmt.Sprint(h+1) + ")"},
		// The first list item is a list where a string belongs: refused for
		// that before any alias is followed.
		{"billion laughs", laughs.String(), h + 1, f.List + "[0]", "expected a string, got a list"},
		{"alias of a scalar", f.Head + f.Str + ": &s x\n" + list("*s"), h + 2, f.List + "[0]", "YAML aliases (*s) are not supported"},
		{"merge key", f.Head + "<<: {" + f.Str + ": x}\n", h + 1, "<<", "YAML merge keys are not supported"},
		{"binary tag", f.Head + f.Str + ": !!binary aGVsbG8=\n", h + 1, f.Str, "YAML tags (!!binary) are not supported"},
		{"custom tag", f.Head + f.Str + ": !shell x\n", h + 1, f.Str, "YAML tags (!shell) are not supported"},
		{"tag on a list item", f.Head + list("!!str x"), h + 1, f.List + "[0]", "YAML tags (!!str) are not supported"},
		{"duplicate key", f.Head + f.Str + ": a\n" + f.Str + ": b\n", h + 2, f.Str, fmt.Sprintf("defined twice (first at line %d); keep one", h+1)},
		{"unknown field", f.Head + "no_such_field: 1\n", h + 1, "no_such_field", "unknown field"},
		{"second document", f.Head + "---\n" + f.Str + ": x\n", h + 2, "", "a second YAML document starts here"},
		{"tabs", f.Head + f.Str + ":\n\t- x\n", h + 2, "", "indent with spaces; YAML does not allow tabs"},
		{"huge", f.Head + f.Str + ": " + strings.Repeat("x", maxSize) + "\n", 1, "", fmt.Sprintf("the limit is %d", maxSize)},
		{"too many values", f.Head + list(many), h + 1, "?", fmt.Sprintf("more than %d values", maxValues)},
	}
}
