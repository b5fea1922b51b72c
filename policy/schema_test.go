package policy_test

import (
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

func TestParseSchemaRefuses(t *testing.T) {
	deep := `{"type":"object"}`
	for range policy.MaxSchemaDepth + 1 {
		deep = `{"type":"object","properties":{"a":` + deep + `}}`
	}
	for _, tc := range []struct{ name, schema, want string }{
		{"not JSON", `{`, "not JSON"},
		{"not a mapping", `[1]`, "mapping"},
		{"unknown keyword", `{"type":"string","pattern":"a+"}`, `keyword "pattern"`},
		{"ref", `{"$ref":"#/x"}`, `"$ref"`},
		{"bad type", `{"type":"text"}`, "not a type"},
		{"markup in description", `{"type":"string","description":"<IMPORTANT>do this</IMPORTANT>"}`, "markup"},
		{"control byte in title", "{\"title\":\"a\\u0007\"}", "control"},
		{"zero-width in nested description", `{"properties":{"x":{"description":"a\u200bb"}}}`, "format"},
		{"negative maxLength", `{"maxLength":-1}`, "whole number"},
		{"schema additionalProperties", `{"additionalProperties":{"type":"string"}}`, "true or false"},
		{"too deep", deep, "nested more than"},
		{"too big", `{"description":"` + strings.Repeat("a", policy.MaxSchemaBytes) + `"}`, "limit"},
		{"unsatisfiable", `{"type":"object","properties":{},"required":["a"],"additionalProperties":false}`, "no value could pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.ParseSchema([]byte(tc.schema))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseSchema = %v; want an error with %q", err, tc.want)
			}
		})
	}
}

func TestSchemaValidate(t *testing.T) {
	s, err := policy.ParseSchema([]byte(`{"type":"object","required":["name"],"additionalProperties":false,"properties":{
		"name":{"type":"string","minLength":1,"maxLength":5},
		"n":{"type":"integer","minimum":0,"maximum":10},
		"x":{"type":"number"},
		"tags":{"type":"array","maxItems":2,"items":{"enum":["a","b"]}},
		"opt":{"type":["string","null"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ doc, want string }{
		{`{"name":"ann"}`, ""},
		{`{"name":"ann","n":3,"x":1.5,"tags":["a","b"],"opt":null}`, ""},
		{`{"name":"ann","x":2}`, ""}, // an integer is a number
		{`{}`, `needs the field "name"`},
		{`{"name":""}`, "minimum is 1"},
		{`{"name":"abcdef"}`, "maximum is 5"},
		{`{"name":"a","n":1.5}`, "needs integer"},
		{`{"name":"a","n":11}`, "maximum is 10"},
		{`{"name":"a","tags":["c"]}`, "tags[0] is not one of"},
		{`{"name":"a","tags":["a","a","a"]}`, "maximum is 2"},
		{`{"name":"a","other":1}`, "not a field"},
		{`"ann"`, "needs object"},
		{`{"name":"a"} {}`, "more than one"},
		{`nope`, "not JSON"},
	} {
		err := s.Validate([]byte(tc.doc))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%s) = %v; want %q", tc.doc, err, tc.want)
		}
	}
}

func TestManifestActionSchema(t *testing.T) {
	ok := "name: m\nversion: 1.0.0\nactions:\n  - name: a\n    description: Adds.\n    input_schema:\n      type: object\n      properties:\n        n: {type: integer}\n"
	m, err := policy.ParseManifest("moat.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := m.Action("a"); a.InputSchema == nil || a.InputSchema.Validate([]byte(`{"n":"x"}`)) == nil {
		t.Errorf("the input schema is not enforced: %+v", a.InputSchema)
	}
	for _, tc := range []struct{ yaml, want string }{
		{strings.Replace(ok, "Adds.", "'<script>x</script>'", 1), "actions[0].description"},
		{strings.Replace(ok, "integer", "int", 1), "actions[0].input_schema"},
		{ok + "    output_schema: {type: object, oneOf: []}\n", "actions[0].output_schema"},
	} {
		if _, err := policy.ParseManifest("moat.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseManifest = %v; want an error at %s", err, tc.want)
		}
	}
}
