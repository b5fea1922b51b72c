// Package yamlstrict is the one strict YAML decoder behind every file moat
// reads as configuration: manifests (moat.yaml) and profiles (package
// policy) and the server's config (moat-server.yaml). One decoder means one
// rule for each thing YAML allows that moat does not, so a file that one
// reader refuses is not quietly accepted by another:
//
//   - exactly one document, whose top level is a mapping, at most
//     MaxFileSize bytes;
//   - no aliases (*name), no merge keys (<<) and no explicit tags (!!binary,
//     !custom): each value is written where it is used, as what it is, so a
//     file reads on its own and cannot expand past its size (a "billion
//     laughs" document);
//   - no unknown fields (with a "did you mean"), no key written twice, no
//     value of the wrong kind (a boolean where text is meant, a fraction
//     where a count is).
//
// Every refusal is an *Error naming the file, the line and the field path,
// and saying how to fix it: the person reading it is editing that file.
// docs/RATIONALE.md ("One strict YAML decoder") says why aliases are
// refused rather than expanded under a bound.
package yamlstrict

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/internal/textdist"
	"gopkg.in/yaml.v3"
)

// MaxFileSize bounds a file. Manifests come from module authors, who are
// not trusted, so parsing one must stay cheap; no real file comes near it.
const MaxFileSize = 1 << 20

// MaxValues bounds the values a file may hold. Without aliases a file of
// MaxFileSize bytes holds at most about half a million; no real file holds
// a tenth of this.
const MaxValues = 100_000

// Error is a problem in a file. It names the file, the line and (except for
// YAML syntax errors) the field path, and its message says how to fix the
// problem. Decoding stops at the first problem, so that the message can be
// precise rather than a cascade of consequences of one typo.
type Error struct {
	File   string // the file name as given to the decoder
	Line   int    // 1-based; 0 only when the YAML parser could not say
	Column int    // 1-based; 0 when unknown
	Field  string // the field path, like "actions[0].timeout"; "" for YAML syntax errors
	Msg    string // what is wrong and how to fix it
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Shape checks a type whose YAML form is not its Go form: a duration
// written 5s, a value that may be a list or a mapping. It reports problems
// with ix.Errorf and checks the parts it holds with ix.Walk.
type Shape func(ix *Index, n *yaml.Node, path string) error

// Scalar is the Shape of a type written as one scalar that parse
// accepts, like a duration (5s): want describes it for the message
// refusing anything else ("a duration like 5s"), and parse's error is
// the message for a scalar it refuses.
func Scalar(want string, parse func(string) error) Shape {
	return func(ix *Index, n *yaml.Node, path string) error {
		if n.Kind != yaml.ScalarNode {
			return ix.Errorf(path, "expected %s, got %s", want, Describe(n))
		}
		if err := parse(n.Value); err != nil {
			return ix.Errorf(path, "%s", err.Error())
		}
		return nil
	}
}

// Options are what differs between the files: never the rules.
type Options struct {
	// Empty says what the file needs, for the message refusing an empty
	// file ("a manifest needs at least name: and version:"). "" accepts an
	// empty file: Decode leaves v as it was and returns an empty Index.
	Empty string
	// Shapes check the types whose YAML form is not their Go form.
	Shapes map[reflect.Type]Shape
	// Nouns name the fields of a struct type in "unknown field" messages
	// (singular, plural), like capability/capabilities; default field.
	Nouns map[reflect.Type][2]string
	// Hints map common wrong field names to the right one, when the edit
	// distance is too large to find it (network → http).
	Hints map[string]string
	// Sections, when set, is asked for each top-level key the type has no
	// field for: a non-nil pointer it returns takes that section instead,
	// checked by the same rules under the key's path (an op family's
	// configuration, found by its name: moat-server.yaml). Index.Sections
	// returns them. nil: such a key is an unknown field.
	Sections func(key string) any
}

// Decode parses data as exactly one YAML document whose top level is a
// mapping, checks it against the type of v (which must be a pointer to a
// struct) and decodes it into v. The check comes first because yaml.v3's
// own errors name neither the field path nor the fix; its decoder stays
// strict (KnownFields) as a second line of defense. The returned Index maps
// field paths to where they were written, so that later validation can put
// its errors on the right line too.
func Decode(file string, data []byte, v any, o *Options) (*Index, error) {
	if o == nil {
		o = &Options{}
	}
	ix := &Index{file: file, o: o, values: map[string]*yaml.Node{}, keys: map[string]*yaml.Node{}}
	if len(data) > MaxFileSize {
		return nil, &Error{File: file, Line: 1, Msg: fmt.Sprintf("the file is %d bytes; the limit is %d, far above any real file", len(data), MaxFileSize)}
	}
	root, err := document(file, data, o.Empty)
	if err != nil || root == nil {
		return ix, err
	}
	ix.root = root
	if err := ix.Walk(root, reflect.TypeOf(v).Elem(), ""); err != nil {
		return nil, err
	}
	if len(ix.sections) > 0 {
		return ix, ix.decodeSections(root, v)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return nil, decodeError(file, err)
	}
	return ix, nil
}

// decodeSections decodes the sections Options.Sections took into what it
// gave, and the rest of root into v. yaml.v3 decodes a node without its
// KnownFields check; the walk above has made it already, by the same rules.
func (ix *Index) decodeSections(root *yaml.Node, v any) error {
	rest := *root
	rest.Content = nil
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, val := root.Content[i], root.Content[i+1]
		if into, ok := ix.sections[k.Value]; ok {
			if err := val.Decode(into); err != nil {
				return decodeError(ix.file, err)
			}
			continue
		}
		rest.Content = append(rest.Content, k, val)
	}
	if err := rest.Decode(v); err != nil {
		return decodeError(ix.file, err)
	}
	return nil
}

// document parses data as exactly one YAML document whose top level is a
// mapping, and returns that mapping (nil for an empty file that empty
// allows).
func document(file string, data []byte, empty string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			if empty == "" {
				return nil, nil
			}
			return nil, &Error{File: file, Line: 1, Msg: "the file is empty; " + empty}
		}
		return nil, syntaxError(file, data, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return nil, &Error{File: file, Line: line, Msg: "a second YAML document starts here; the file must hold exactly one, so remove the --- separator and merge the two"}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(file, data, err)
	}
	if len(doc.Content) == 0 {
		if empty == "" {
			return nil, nil
		}
		return nil, &Error{File: file, Line: 1, Msg: "the file holds no content; " + empty}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		what := "write field: value lines"
		if empty != "" {
			what = empty
		}
		return nil, &Error{File: file, Line: root.Line, Column: root.Column, Msg: fmt.Sprintf("the top level is %s, not a mapping of field: value lines; %s", Describe(root), what)}
	}
	return root, nil
}

var yamlLine = regexp.MustCompile(`^line (\d+): `)

// syntaxError turns a yaml.v3 syntax error into an Error on the line where
// the problem is. yaml.v3 reports the line where the enclosing block
// started, or no line at all on line 1, which sends people to the wrong
// place, so the line is found again by parsing prefixes of the file.
func syntaxError(file string, data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	// The parser stops at the first problem, so every prefix that reaches
	// the problem fails with the same message and shorter ones (almost
	// always) do not: binary search for the shortest such prefix.
	lines := strings.SplitAfter(string(data), "\n")
	sameError := func(k int) bool {
		var n yaml.Node
		err := yaml.Unmarshal([]byte(strings.Join(lines[:k], "")), &n)
		return err != nil && yamlLine.ReplaceAllString(strings.TrimPrefix(err.Error(), "yaml: "), "") == msg
	}
	if sameError(len(lines)) {
		lo, hi := 0, len(lines) // sameError(hi) holds; lo is 0 or fails it
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if sameError(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		line = hi
	}
	text := ""
	if line > 0 && line <= len(lines) {
		text = lines[line-1]
	}
	return &Error{File: file, Line: line, Msg: "YAML syntax: " + msg + "; " + syntaxFix(msg, text)}
}

func syntaxFix(msg, text string) string {
	switch {
	case strings.Contains(msg, "cannot start any token") && strings.Contains(text, "\t"):
		return "indent with spaces; YAML does not allow tabs"
	case strings.Contains(msg, "cannot start any token"):
		return `quote the value (a value cannot start with characters like @ or ` + "`" + `)`
	case strings.Contains(msg, "mapping values are not allowed"):
		return `quote a value that contains ": ", or check the indentation of this line`
	case strings.Contains(msg, "did not find expected key"):
		return "check the indentation of this line against the lines above it"
	case strings.Contains(msg, "'-' indicator"):
		return `list items ("- ") and "key: value" lines are mixed at the same indentation; check the indentation`
	case strings.Contains(msg, "',' or ']'"):
		return "a [ list opened here is not closed with ]"
	case strings.Contains(msg, "',' or '}'"):
		return "a { mapping opened here is not closed with }"
	case strings.Contains(msg, "end of stream"):
		return "a quote or bracket opened here is never closed"
	case strings.Contains(msg, "unknown anchor"):
		return "aliases (*name) are not supported; write the value out"
	case strings.Contains(msg, "escape character"):
		return `in double quotes, write a backslash as \\, or use single quotes`
	}
	return "check the YAML syntax on this line"
}

// decodeError converts an error from yaml.v3's decoder. It only happens when
// the check in Walk missed something.
func decodeError(file string, err error) error {
	var ne *nodeError
	if errors.As(err, &ne) {
		return &Error{File: file, Line: ne.line, Column: ne.column, Msg: ne.msg}
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return &Error{File: file, Line: line, Msg: msg}
}

// nodeError is what an UnmarshalYAML method returns (NodeError), so that
// decodeError can recover the line.
type nodeError struct {
	line, column int
	msg          string
}

func (e *nodeError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// NodeError is the error an UnmarshalYAML method returns for n, so that
// Decode reports it at n's line.
func NodeError(n *yaml.Node, msg string) error {
	return &nodeError{line: n.Line, column: n.Column, msg: msg}
}

// Index remembers where each field path was written.
type Index struct {
	file   string
	o      *Options
	nodes  int // values visited, against MaxValues
	root   *yaml.Node
	values map[string]*yaml.Node // path → value node
	keys   map[string]*yaml.Node // path → key node, for mapping entries

	sections map[string]any // top-level key → what Options.Sections gave for it
}

// Sections are the top-level sections Options.Sections took, decoded, by
// key (nil when none).
func (ix *Index) Sections() map[string]any { return ix.sections }

// Node returns the node that best locates path: its key, its value, or the
// nearest enclosing field that was written (nil when none was, as in an
// empty file).
func (ix *Index) Node(path string) *yaml.Node {
	for {
		if n := ix.keys[path]; n != nil {
			return n
		}
		if n := ix.values[path]; n != nil {
			return n
		}
		if path == "" {
			return ix.root
		}
		path = parentPath(path)
	}
}

// Value returns the value node written at path, or nil.
func (ix *Index) Value(path string) *yaml.Node { return ix.values[path] }

// Has reports whether path was written in the file with a non-null value.
func (ix *Index) Has(path string) bool {
	n := ix.values[path]
	return n != nil && !isNull(n)
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// Errorf returns the Error at path, located on the line path was written
// (or its nearest enclosing field).
func (ix *Index) Errorf(path, format string, args ...any) *Error {
	e := &Error{File: ix.file, Field: path, Msg: fmt.Sprintf(format, args...)}
	if n := ix.Node(path); n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// Walk checks n against t at path.
func (ix *Index) Walk(n *yaml.Node, t reflect.Type, path string) error {
	ix.values[path] = n
	if ix.nodes++; ix.nodes > MaxValues {
		return ix.Errorf(path, "the file holds more than %d values; no real file does", MaxValues)
	}
	switch {
	case n.Kind == yaml.AliasNode:
		anchor := ""
		if n.Alias != nil {
			anchor = fmt.Sprintf(" (the anchor &%s is at line %d)", n.Value, n.Alias.Line)
		}
		return ix.Errorf(path, "YAML aliases (*%s) are not supported%s; write the value out where it is used, so that the file reads on its own", n.Value, anchor)
	case n.Style&yaml.TaggedStyle != 0:
		return ix.Errorf(path, "YAML tags (%s) are not supported; write the value plainly (quote it if it is text)", n.Tag)
	}
	if isNull(n) {
		return nil // absent: the zero value
	}
	if s := ix.o.Shapes[t]; s != nil {
		return s(ix, n, path)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return ix.Walk(n, t.Elem(), path)
	case reflect.Struct:
		return ix.WalkStruct(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if t.Elem().Kind() == reflect.Struct {
				return ix.Errorf(path, "expected a list of mappings, got %s; start each item with \"- \" on its own line, like \"- name: ...\"", Describe(n))
			}
			if n.Kind == yaml.ScalarNode {
				return ix.Errorf(path, "expected a list, got %s; write it as [%s]", Describe(n), n.Value)
			}
			return ix.Errorf(path, "expected a list, got %s; write it like [a, b]", Describe(n))
		}
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if isNull(item) && item.Style&yaml.TaggedStyle == 0 {
				ix.values[p] = item
				return ix.Errorf(p, "empty list item; remove the line or give it a value")
			}
			if err := ix.Walk(item, t.Elem(), p); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		return ix.walkMap(n, t, path)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return ix.Errorf(path, "expected a string, got %s", Describe(n))
		}
		if n.Tag == "!!bool" {
			return ix.Errorf(path, "%s is a boolean; quote it if you mean the text: %q", n.Value, n.Value)
		}
		return nil
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return ix.Errorf(path, "%s is not a boolean; write true or false", describeValue(n))
		}
		return nil
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" && n.Tag != "!!float" {
			return ix.Errorf(path, "%s is not a number; write it like 200 or 1.5", describeValue(n))
		}
		if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
			return ix.Errorf(path, "%s is not a finite number; write it like 200 or 1.5", n.Value)
		}
		return nil
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return ix.Errorf(path, "%s is not a whole number; write it like 4", describeValue(n))
		}
		if _, err := strconv.ParseInt(n.Value, 0, 32); err != nil {
			return ix.Errorf(path, "%s is out of range; write a number below 2147483648", n.Value)
		}
		return nil
	}
	return ix.Errorf(path, "internal error: no check for %s", t)
}

func (ix *Index) walkMap(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind != yaml.MappingNode {
		return ix.Errorf(path, "expected a mapping of name: value lines, got %s", Describe(n))
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := path + "." + k.Value
		if path == "" {
			p = k.Value
		}
		ix.keys[p] = k
		if err := ix.checkKey(k, v, path, p); err != nil {
			return err
		}
		if first := seen[k.Value]; first != nil {
			return ix.Errorf(p, "defined twice (first at line %d); keep one", first.Line)
		}
		seen[k.Value] = k
		if t.Elem().Kind() == reflect.String && v.Kind != yaml.AliasNode && v.Style&yaml.TaggedStyle == 0 {
			// Strings by name (a manifest's config, the server's profiles
			// by organization) are taken verbatim, so YAML must not
			// reinterpret them: 1.10 is not the number 1.1, yes is not
			// true.
			if isNull(v) {
				ix.values[p] = v
				return ix.Errorf(p, `has no value; write %s: "" for an empty string`, k.Value)
			}
			if v.Kind == yaml.ScalarNode && v.Tag != "!!str" {
				ix.values[p] = v
				return ix.Errorf(p, "%s is %s, but values here are strings; quote it: %s: %q", v.Value, article(v), k.Value, v.Value)
			}
		}
		if err := ix.Walk(v, t.Elem(), p); err != nil {
			return err
		}
	}
	return nil
}

// checkKey refuses a key that is not a plain name: a merge key (<<), an
// alias or a collection.
func (ix *Index) checkKey(k, v *yaml.Node, path, p string) error {
	switch {
	case k.Kind == yaml.AliasNode:
		ix.values[p] = v
		return ix.Errorf(path, "a key is the YAML alias *%s; aliases are not supported, write the key out", k.Value)
	case k.Kind != yaml.ScalarNode:
		ix.values[p] = v
		return ix.Errorf(path, "a key is %s; keys must be plain names", Describe(k))
	case k.Tag == "!!merge":
		ix.values[p] = v
		return ix.Errorf(p, "YAML merge keys are not supported; write the fields out, so that each file reads on its own")
	case k.Style&yaml.TaggedStyle != 0:
		ix.values[p] = v
		return ix.Errorf(p, "YAML tags (%s) are not supported on keys; write the key plainly", k.Tag)
	}
	return nil
}

// WalkStruct checks n as a mapping of t's fields at path.
func (ix *Index) WalkStruct(n *yaml.Node, t reflect.Type, path string) error {
	fields := yamlFields(t)
	noun, ok := ix.o.Nouns[t]
	if !ok {
		noun = [2]string{"field", "fields"}
	}
	if n.Kind != yaml.MappingNode {
		return ix.Errorf(path, "expected a mapping of field: value lines, got %s; known %s are %s", Describe(n), noun[1], strings.Join(fieldNames(fields), ", "))
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		ix.keys[p] = k
		if err := ix.checkKey(k, v, path, p); err != nil {
			return err
		}
		f, ok := findField(fields, k.Value)
		if !ok && path == "" && ix.o.Sections != nil {
			if first := seen[k.Value]; first != nil {
				return ix.Errorf(p, "defined twice (first at line %d); keep one", first.Line)
			}
			if into := ix.o.Sections(k.Value); into != nil {
				seen[k.Value] = k
				if err := ix.Walk(v, reflect.TypeOf(into).Elem(), p); err != nil {
					return err
				}
				if ix.sections == nil {
					ix.sections = map[string]any{}
				}
				ix.sections[k.Value] = into
				continue
			}
		}
		if !ok {
			ix.values[p] = v
			names := fieldNames(fields)
			if s := Suggest(k.Value, names, ix.o.Hints); s != "" {
				return ix.Errorf(p, "unknown %s; did you mean %s? Known %s are %s", noun[0], s, noun[1], strings.Join(names, ", "))
			}
			return ix.Errorf(p, "unknown %s; known %s are %s", noun[0], noun[1], strings.Join(names, ", "))
		}
		if first := seen[k.Value]; first != nil {
			return ix.Errorf(p, "defined twice (first at line %d); keep one", first.Line)
		}
		seen[k.Value] = k
		if err := ix.Walk(v, f.typ, p); err != nil {
			return err
		}
	}
	return nil
}

type yamlField struct {
	name string
	typ  reflect.Type
}

// yamlFields are t's fields as yaml.v3 names them: the tag's name, or the
// lowercased Go name; an embedded struct tagged ",inline" gives its own
// fields, as yaml.v3 decodes them (an op family's configuration inside
// a section that holds more, such as the server's media:).
func yamlFields(t reflect.Type) []yamlField {
	var out []yamlField
	for i := range t.NumField() {
		sf := t.Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if sf.Anonymous && name == "" && opts == "inline" && sf.Type.Kind() == reflect.Struct {
			out = append(out, yamlFields(sf.Type)...)
			continue
		}
		if name == "-" || !sf.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		out = append(out, yamlField{name, sf.Type})
	}
	return out
}

func findField(fields []yamlField, name string) (yamlField, bool) {
	for _, f := range fields {
		if f.name == name {
			return f, true
		}
	}
	return yamlField{}, false
}

func fieldNames(fields []yamlField) []string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	return names
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// Describe names the kind of a node for "expected X, got Y" messages.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "the alias *" + n.Value
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "nothing"
		case "!!bool":
			return "the boolean " + n.Value
		case "!!int", "!!float":
			return "the number " + n.Value
		}
		return strconv.Quote(n.Value)
	}
	return "an unexpected YAML node"
}

// describeValue quotes a scalar or names a collection.
func describeValue(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!str" {
			return strconv.Quote(n.Value)
		}
		return n.Value
	}
	return Describe(n)
}

func article(n *yaml.Node) string {
	switch n.Tag {
	case "!!bool":
		return "a boolean"
	case "!!int", "!!float":
		return "a number"
	case "!!timestamp":
		return "a date"
	}
	return "not a plain string"
}

// Suggest returns the name in names closest to s, when it is close enough
// to be a plausible typo or is a known synonym in hints (network for
// http), else "".
func Suggest(s string, names []string, hints map[string]string) string {
	if len(s) > 64 { // a key from an uploaded manifest: nothing that long is a typo of a field
		return ""
	}
	ls := strings.ToLower(s)
	best, bestD := "", 1<<30
	for _, n := range names {
		if d := textdist.Distance(ls, n); d < bestD {
			best, bestD = n, d
		}
	}
	if bestD <= max(1, len(s)/3) {
		return best
	}
	for _, k := range slices.Sorted(maps.Keys(hints)) {
		h := hints[k]
		if slices.Contains(names, h) && (ls == k || len(k) >= 4 && textdist.Distance(ls, k) <= 1) {
			return h
		}
	}
	for _, n := range names {
		if len(s) >= 3 && (strings.HasPrefix(n, ls) || strings.HasPrefix(ls, n)) {
			return n
		}
	}
	return ""
}
