package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Schema is an action's input_schema or output_schema: a JSON Schema in
// the subset moat enforces, checked when the manifest loads and applied
// to every call (host.Module.Invoke validates the input before the guest
// runs, and the output before the caller sees it), whichever door the
// call came in by: the HTTP API, a page, a route, a schedule, MCP.
//
// The subset is what an agent's tool call and a console form need and
// nothing a validator could spend unbounded time on:
//
//	type        "object" "array" "string" "number" "integer" "boolean" "null", or a list of them
//	properties  a map of name → schema   (objects)
//	required    a list of property names
//	additionalProperties  true or false (default true, as JSON Schema's)
//	items       a schema                 (arrays)
//	enum        a list of JSON values
//	minimum maximum, minLength maxLength, minItems maxItems
//	title description default examples $schema   (annotations: shown, not enforced)
//
// Any other keyword ($ref, pattern, oneOf, format...) is refused at load
// rather than silently ignored, so that an author never believes a rule is
// enforced that is not. A schema is at most MaxSchemaBytes as JSON and
// MaxSchemaDepth deep. Its titles and descriptions are shown to agents
// (MCP tools/list) and people (the console): markup and control bytes in
// them are refused, as in an action's description (CheckToolText).
type Schema struct {
	// JSON is the schema as JSON, as the manifest wrote it (key order
	// aside): what /v1/modules and MCP's tools/list show.
	JSON json.RawMessage
	root *schemaNode
}

// Schema bounds.
const (
	MaxSchemaBytes = 16 << 10
	MaxSchemaDepth = 8
	// maxSchemaNodes bounds the sub-schemas of one schema, so that
	// validating a value costs at most its size times this.
	maxSchemaNodes = 256
	// MaxToolText bounds an action's description and a schema's
	// titles and descriptions, in bytes.
	MaxToolText = 1024
)

type schemaNode struct {
	types      []string // empty: any
	properties map[string]*schemaNode
	required   []string
	closed     bool // additionalProperties: false
	items      *schemaNode
	enum       []any
	min, max   *float64
	minLen     int
	maxLen     int // -1: none
	minItems   int
	maxItems   int // -1: none
}

var schemaTypes = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

// UnmarshalYAML decodes the schema's YAML as JSON values; check (at load)
// compiles it.
func (s *Schema) UnmarshalYAML(n *yaml.Node) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return newNodeError(n, "a schema must be a mapping of JSON values: "+err.Error())
	}
	s.JSON = raw
	return nil
}

// MarshalYAML writes the schema back as its JSON values.
func (s Schema) MarshalYAML() (any, error) {
	var v any
	err := json.Unmarshal(s.JSON, &v)
	return v, err
}

// ParseSchema compiles a schema from its JSON, checking it against the
// subset and its bounds.
func ParseSchema(raw []byte) (*Schema, error) {
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("the schema is %d bytes as JSON; the limit is %d: describe less, or move detail into the description", len(raw), MaxSchemaBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the schema is not JSON: %w", err)
	}
	nodes := 0
	root, err := compileSchema(v, "", 1, &nodes)
	if err != nil {
		return nil, err
	}
	return &Schema{JSON: raw, root: root}, nil
}

func compileSchema(v any, at string, depth int, nodes *int) (*schemaNode, error) {
	where := func() string {
		if at == "" {
			return "the schema"
		}
		return at
	}
	if depth > MaxSchemaDepth {
		return nil, fmt.Errorf("%s is nested more than %d deep; flatten the schema", where(), MaxSchemaDepth)
	}
	if *nodes++; *nodes > maxSchemaNodes {
		return nil, fmt.Errorf("the schema has more than %d sub-schemas; describe less", maxSchemaNodes)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s must be a mapping like {type: string}", where())
	}
	n := &schemaNode{maxLen: -1, maxItems: -1}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := m[k]
		field := strings.TrimPrefix(at+"."+k, ".")
		switch k {
		case "$schema", "default", "examples":
		case "title", "description":
			s, ok := val.(string)
			if !ok {
				return nil, fmt.Errorf("%s must be a string", field)
			}
			if err := CheckToolText(s); err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
		case "type":
			switch t := val.(type) {
			case string:
				n.types = []string{t}
			case []any:
				for _, e := range t {
					s, ok := e.(string)
					if !ok {
						return nil, fmt.Errorf("%s must list type names like [string, null]", field)
					}
					n.types = append(n.types, s)
				}
			default:
				return nil, fmt.Errorf("%s must be a type name like object, or a list of them", field)
			}
			for _, t := range n.types {
				if !slices.Contains(schemaTypes, t) {
					return nil, fmt.Errorf("%s: %q is not a type; use one of %s", field, t, strings.Join(schemaTypes, ", "))
				}
			}
		case "properties":
			props, ok := val.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s must be a mapping of property name to schema", field)
			}
			n.properties = map[string]*schemaNode{}
			for name, sub := range props {
				c, err := compileSchema(sub, field+"."+name, depth+1, nodes)
				if err != nil {
					return nil, err
				}
				n.properties[name] = c
			}
		case "required":
			list, ok := val.([]any)
			if !ok {
				return nil, fmt.Errorf("%s must be a list of property names", field)
			}
			for _, e := range list {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("%s must be a list of property names", field)
				}
				n.required = append(n.required, s)
			}
		case "additionalProperties":
			b, ok := val.(bool)
			if !ok {
				return nil, fmt.Errorf("%s must be true or false (a schema there is not supported)", field)
			}
			n.closed = !b
		case "items":
			c, err := compileSchema(val, field, depth+1, nodes)
			if err != nil {
				return nil, err
			}
			n.items = c
		case "enum":
			list, ok := val.([]any)
			if !ok || len(list) == 0 {
				return nil, fmt.Errorf("%s must be a list of one or more values", field)
			}
			n.enum = list
		case "minimum", "maximum":
			f, err := schemaNumber(val)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			if k == "minimum" {
				n.min = &f
			} else {
				n.max = &f
			}
		case "minLength", "maxLength", "minItems", "maxItems":
			f, err := schemaNumber(val)
			if err != nil || f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
				return nil, fmt.Errorf("%s must be a whole number, 0 or more", field)
			}
			switch k {
			case "minLength":
				n.minLen = int(f)
			case "maxLength":
				n.maxLen = int(f)
			case "minItems":
				n.minItems = int(f)
			case "maxItems":
				n.maxItems = int(f)
			}
		default:
			return nil, fmt.Errorf("%s: moat does not enforce the keyword %q; use only type, properties, required, additionalProperties, items, enum, minimum, maximum, minLength, maxLength, minItems, maxItems, title, description (see docs/ARCHITECTURE.md, input_schema)", field, k)
		}
	}
	for _, r := range n.required {
		if n.properties != nil && n.properties[r] == nil && n.closed {
			return nil, fmt.Errorf("%s: %q is required but not among the properties, and additionalProperties is false: no value could pass", where(), r)
		}
	}
	return n, nil
}

func schemaNumber(v any) (float64, error) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, errors.New("must be a number")
	}
	return num.Float64()
}

// Validate checks a JSON document against the schema. The error names
// the first field that fails and what it needs, in the terms of the
// schema's author: it goes back to the caller as the reason of an
// invalid_argument.
func (s *Schema) Validate(doc []byte) error {
	if s == nil || s.root == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("the input is not JSON (%v), and the schema needs a JSON value", err)
	}
	if dec.More() {
		return errors.New("the input holds more than one JSON value")
	}
	return s.root.validate(v, "")
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		if f, err := x.Float64(); err == nil && f == math.Trunc(f) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}

func (n *schemaNode) validate(v any, at string) error {
	where := at
	if where == "" {
		where = "the input"
	}
	t := jsonType(v)
	if len(n.types) > 0 && !slices.Contains(n.types, t) && (t != "integer" || !slices.Contains(n.types, "number")) {
		return fmt.Errorf("%s is %s; the schema needs %s", where, article(t), strings.Join(n.types, " or "))
	}
	if n.enum != nil && !slices.ContainsFunc(n.enum, func(e any) bool { return jsonEqual(e, v) }) {
		return fmt.Errorf("%s is not one of the values the schema allows", where)
	}
	switch x := v.(type) {
	case json.Number:
		f, _ := x.Float64()
		if n.min != nil && f < *n.min {
			return fmt.Errorf("%s is %v; the minimum is %v", where, x, *n.min)
		}
		if n.max != nil && f > *n.max {
			return fmt.Errorf("%s is %v; the maximum is %v", where, x, *n.max)
		}
	case string:
		l := utf8.RuneCountInString(x)
		if l < n.minLen {
			return fmt.Errorf("%s has %d characters; the minimum is %d", where, l, n.minLen)
		}
		if n.maxLen >= 0 && l > n.maxLen {
			return fmt.Errorf("%s has %d characters; the maximum is %d", where, l, n.maxLen)
		}
	case []any:
		if len(x) < n.minItems {
			return fmt.Errorf("%s has %d items; the minimum is %d", where, len(x), n.minItems)
		}
		if n.maxItems >= 0 && len(x) > n.maxItems {
			return fmt.Errorf("%s has %d items; the maximum is %d", where, len(x), n.maxItems)
		}
		if n.items != nil {
			for i, e := range x {
				if err := n.items.validate(e, fmt.Sprintf("%s[%d]", strings.TrimPrefix(at, "."), i)); err != nil {
					return err
				}
			}
		}
	case map[string]any:
		for _, r := range n.required {
			if _, ok := x[r]; !ok {
				return fmt.Errorf("%s needs the field %q", where, r)
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			field := strings.TrimPrefix(at+"."+k, ".")
			sub := n.properties[k]
			if sub == nil {
				if n.closed {
					return fmt.Errorf("%s is not a field the schema allows", field)
				}
				continue
			}
			if err := sub.validate(x[k], field); err != nil {
				return err
			}
		}
	}
	return nil
}

func article(t string) string {
	switch t {
	case "null":
		return "null"
	case "array", "integer", "object":
		return "an " + t
	}
	return "a " + t
}

func jsonEqual(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// CheckToolText checks text an agent or a person is shown as a tool's
// description (an action's description, a schema's titles and
// descriptions): at most MaxToolText bytes of UTF-8, with no control
// bytes (a newline or tab aside) and no markup (< or >). A description
// is the injection surface of an MCP tool — text a model reads as its
// instructions, as "<IMPORTANT>ignore the user…</IMPORTANT>" — and a
// module's author is not the operator: the host refuses such text at
// load rather than showing it to every agent of the organization.
func CheckToolText(s string) error {
	if len(s) > MaxToolText {
		return fmt.Errorf("is %d bytes; the limit is %d", len(s), MaxToolText)
	}
	if !utf8.ValidString(s) {
		return errors.New("is not UTF-8")
	}
	for _, r := range s {
		switch {
		case r == '<' || r == '>':
			return fmt.Errorf("holds %q: markup is refused in text shown to agents; describe in words", r)
		case r == '\n' || r == '\t':
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			return fmt.Errorf("holds the control or format character %U; write plain text", r)
		}
	}
	return nil
}
