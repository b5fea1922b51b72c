package policy_test

import (
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

const modelsHead = "name: a\nversion: 1.0.0\nmodels:\n"

// The example parses, with its defaults filled in.
func TestParseModels(t *testing.T) {
	m, err := policy.ParseManifest("moat.yaml", []byte(modelsHead+`  notes:
    scope: user
    fields:
      title: {type: string, required: true, max: 200}
      body:  {type: string}
      tags:  {type: "[string]"}
      due:   {type: time}
      done:  {type: bool}
    indexes: [[done, due], [tags]]
  board:
    fields: {text: {type: string}, n: {type: int, max: 1.0e3}, w: {type: number, max: -0.5}}
  free:
    additional: true
`))
	if err != nil {
		t.Fatal(err)
	}
	notes := m.Models["notes"]
	if notes.Scope != "user" || len(notes.Fields) != 5 || *notes.Fields["title"].Max != 200 || !notes.Fields["title"].Required ||
		notes.Fields["tags"].Type != "[string]" || len(notes.Indexes) != 2 || notes.Indexes[0][1] != "due" {
		t.Errorf("notes = %+v", notes)
	}
	if b := m.Models["board"]; b.Scope != "org" || *b.Fields["n"].Max != 1000 || *b.Fields["w"].Max != -0.5 {
		t.Errorf("board = %+v (scope defaults to org)", b)
	}
	if f := m.Models["free"]; !f.Additional || len(f.Fields) != 0 {
		t.Errorf("free = %+v", f)
	}
}

func TestParseModelErrors(t *testing.T) {
	many := func(n int, item func(i int) string) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(item(i))
		}
		return b.String()
	}
	for _, tt := range []struct {
		name, yaml  string
		line        int
		field, says string
	}{
		{"bad model name", "  Notes: {fields: {a: {type: int}}}\n", 4, "models.Notes", "not a model name"},
		{"injection as a model name", "  \"n'; DROP TABLE x--\": {fields: {a: {type: int}}}\n", 4, "models.n'; DROP TABLE x--", "not a model name"},
		{"bad scope", "  n:\n    scope: everyone\n    fields: {a: {type: int}}\n", 5, "models.n.scope", "write org"},
		{"no fields", "  n: {scope: user}\n", 4, "models.n", "declares no fields"},
		{"bad field name", "  n: {fields: {\"$.x\": {type: int}}}\n", 4, "models.n.fields.$.x", "not a field name"},
		{"field name with a quote", "  n: {fields: {\"a'b\": {type: int}}}\n", 4, "models.n.fields.a'b", "not a field name"},
		{"digit first", "  n: {fields: {\"1a\": {type: int}}}\n", 4, "models.n.fields.1a", "not a field name"},
		{"no type", "  n: {fields: {a: {required: true}}}\n", 4, "models.n.fields.a.type", "needs a type"},
		{"unknown type", "  n: {fields: {a: {type: strng}}}\n", 4, "models.n.fields.a.type", "did you mean string?"},
		{"array of objects", "  n: {fields: {a: {type: \"[object]\"}}}\n", 4, "models.n.fields.a.type", "not a field type"},
		{"unquoted array type", "  n: {fields: {a: {type: [string]}}}\n", 4, "models.n.fields.a.type", "expected a string"},
		{"max on bool", "  n: {fields: {a: {type: bool, max: 1}}}\n", 4, "models.n.fields.a.max", "takes no max"},
		{"fractional max on string", "  n: {fields: {a: {type: string, max: 1.5}}}\n", 4, "models.n.fields.a.max", "count of characters"},
		{"zero max on array", "  n: {fields: {a: {type: \"[int]\", max: 0}}}\n", 4, "models.n.fields.a.max", "count of items"},
		{"unsafe int max", "  n: {fields: {a: {type: int, max: 1e300}}}\n", 4, "models.n.fields.a.max", "whole number"},
		{"max not a number", "  n: {fields: {a: {type: int, max: lots}}}\n", 4, "models.n.fields.a.max", "not a number"},
		{"max infinite", "  n: {fields: {a: {type: number, max: .inf}}}\n", 4, "models.n.fields.a.max", "not a finite number"},
		{"unknown field key", "  n: {fields: {a: {type: int, unique: true}}}\n", 4, "models.n.fields.a.unique", "unknown field"},
		{"index of an undeclared field", "  n:\n    fields: {a: {type: int}}\n    indexes: [[b]]\n", 6, "models.n.indexes[0][0]", `"b" is not a field of this model`},
		{"index of an object", "  n:\n    fields: {a: {type: object}}\n    indexes: [[a]]\n", 6, "models.n.indexes[0][0]", "cannot be indexed"},
		{"array in a compound index", "  n:\n    fields: {a: {type: \"[string]\"}, b: {type: int}}\n    indexes: [[b, a]]\n", 6, "models.n.indexes[0][1]", "index it on its own"},
		{"field twice in an index", "  n:\n    fields: {a: {type: int}}\n    indexes: [[a, a]]\n", 6, "models.n.indexes[0][1]", "named twice"},
		{"index twice", "  n:\n    fields: {a: {type: int}}\n    indexes: [[a], [a]]\n", 6, "models.n.indexes[1]", "the same index"},
		{"empty index", "  n:\n    fields: {a: {type: int}}\n    indexes: [[]]\n", 6, "models.n.indexes[0]", "1 to 4 fields"},
		{"too many index fields", "  n:\n    fields: {a: {type: int}, b: {type: int}, c: {type: int}, d: {type: int}, e: {type: int}}\n    indexes: [[a, b, c, d, e]]\n", 6, "models.n.indexes[0]", "1 to 4 fields"},
		{"too many fields", "  n:\n    fields:\n" + many(129, func(i int) string { return "      f" + itoa(i) + ": {type: int}\n" }), 5, "models.n.fields", "129 fields"},
		{"too many models", many(65, func(i int) string { return "  m" + itoa(i) + ": {fields: {a: {type: int}}}\n" }), 3, "models", "65 models"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.ParseManifest("moat.yaml", []byte(modelsHead+tt.yaml))
			checkFileError(t, err, "moat.yaml", tt.line, tt.field, tt.says)
		})
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
