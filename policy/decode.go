package policy

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/moat-sandbox/moat/internal/textdist"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// FileError is a problem in a manifest or a profile. It names the file, the
// line and (except for YAML syntax errors) the field path, and its message
// says how to fix the problem:
// the person reading it is editing that file, and should not have to guess
// which of three "timeout" lines is meant or what the parser wanted instead.
//
// Parsing stops at the first problem, so that the message can be precise
// rather than a cascade of consequences of one typo.
type FileError struct {
	File   string // the file name as given to the parser
	Line   int    // 1-based; 0 only when the YAML parser could not say
	Column int    // 1-based; 0 when unknown
	Field  string // the field path, like "actions[0].timeout"; "" for YAML syntax errors
	Msg    string // what is wrong and how to fix it
}

func (e *FileError) Error() string {
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

// document parses data as exactly one YAML document whose top level is a
// mapping, and returns that mapping. Syntax errors are located again by
// parsing prefixes of the file (see syntaxError), because yaml.v3 reports the
// line where the enclosing block started, or no line at all on line 1, which
// sends people to the wrong place.
func document(file string, data []byte, what string) (*yaml.Node, error) {
	if len(data) > MaxFileSize {
		return nil, &FileError{File: file, Line: 1, Msg: fmt.Sprintf("the file is %d bytes; the limit is %d, far above any real manifest or profile", len(data), MaxFileSize)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &FileError{File: file, Line: 1, Msg: fmt.Sprintf("the file is empty; %s", what)}
		}
		return nil, syntaxError(file, data, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return nil, &FileError{File: file, Line: line, Msg: "a second YAML document starts here; the file must hold exactly one, so remove the --- separator and merge the two"}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(file, data, err)
	}
	if len(doc.Content) == 0 {
		return nil, &FileError{File: file, Line: 1, Msg: fmt.Sprintf("the file holds no content; %s", what)}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &FileError{File: file, Line: root.Line, Column: root.Column, Msg: fmt.Sprintf("the top level is %s, not a mapping of field: value lines; %s", describe(root), what)}
	}
	return root, nil
}

// MaxFileSize bounds a manifest or profile. Manifests come from module
// authors, who are not trusted, so parsing one must stay cheap.
const MaxFileSize = 1 << 20

// maxNodes bounds the values a file may expand to through YAML aliases
// (a "billion laughs" document), checked before yaml.v3's own limits apply.
const maxNodes = 100_000

var yamlLine = regexp.MustCompile(`^line (\d+): `)

// syntaxError turns a yaml.v3 syntax error into a FileError on the line
// where the problem is.
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
	return &FileError{File: file, Line: line, Msg: "YAML syntax: " + msg + "; " + syntaxFix(msg, text)}
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
		return "define the anchor with &name before referring to it with *name"
	case strings.Contains(msg, "escape character"):
		return `in double quotes, write a backslash as \\, or use single quotes`
	}
	return "check the YAML syntax on this line"
}

// decodeStrict checks the node tree against the type of v (unknown fields,
// duplicate keys, wrong kinds of values, values that do not parse), then
// decodes data into v with yaml.v3's KnownFields(true) decoder. The check
// comes first because yaml.v3's own errors name neither the field path nor
// the fix; the decoder stays strict as a second line of defense. The
// returned index maps field paths to nodes, so that later validation can put
// its errors on the right line too.
func decodeStrict(file string, data []byte, root *yaml.Node, v any) (*index, error) {
	ix := &index{file: file, root: root, values: map[string]*yaml.Node{}, keys: map[string]*yaml.Node{}}
	if err := ix.walk(root, reflect.TypeOf(v).Elem(), ""); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return nil, decodeError(file, err)
	}
	return ix, nil
}

// decodeError converts an error from yaml.v3's decoder. It only happens when
// the check in walk missed something.
func decodeError(file string, err error) error {
	var ne *nodeError
	if errors.As(err, &ne) {
		return &FileError{File: file, Line: ne.line, Column: ne.column, Msg: ne.msg}
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
	return &FileError{File: file, Line: line, Msg: msg}
}

// nodeError is returned by UnmarshalYAML methods so that decodeError can
// recover the line.
type nodeError struct {
	line, column int
	msg          string
}

func (e *nodeError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

func newNodeError(n *yaml.Node, msg string) *nodeError {
	return &nodeError{line: n.Line, column: n.Column, msg: msg}
}

// index remembers where each field path was written.
type index struct {
	file   string
	nodes  int // values visited, against maxNodes
	root   *yaml.Node
	values map[string]*yaml.Node // path → value node
	keys   map[string]*yaml.Node // path → key node, for mapping entries
}

// node returns the node that best locates path: its key, its value, or the
// nearest enclosing field that was written.
func (ix *index) node(path string) *yaml.Node {
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

// has reports whether path was written in the file with a non-null value.
func (ix *index) has(path string) bool {
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

func (ix *index) errorf(path, format string, args ...any) *FileError {
	n := ix.node(path)
	return &FileError{File: ix.file, Line: n.Line, Column: n.Column, Field: path, Msg: fmt.Sprintf(format, args...)}
}

var (
	durationType = reflect.TypeFor[Duration]()
	byteSizeType = reflect.TypeFor[ByteSize]()
	httpCapsType = reflect.TypeFor[HTTPCaps]()
	httpItemType = reflect.TypeFor[httpTargetItem]()
	commandType  = reflect.TypeFor[Command]()
	collsType    = reflect.TypeFor[Collections]()
	fileType     = reflect.TypeFor[FileGrant]()
)

// nouns used in "unknown field" messages, by struct type: singular, plural.
var fieldNoun = map[reflect.Type][2]string{
	reflect.TypeFor[Capabilities](): {"capability", "capabilities"},
	reflect.TypeFor[Limits]():       {"limit", "limits"},
}

// hints map common wrong field names to the right one when the edit
// distance is too large to find it.
var fieldHints = map[string]string{
	"network": "http", "net": "http", "https": "http", "fetch": "http", "web": "http",
	"database": "db", "sql": "db", "store": "kv", "storage": "kv", "keyvalue": "kv",
	"fs": "filesystem", "files": "filesystem", "file": "filesystem", "disk_paths": "filesystem",
	"llm": "ai", "models": "ai", "model": "ai", "jobs": "tasks", "queue": "tasks", "task": "tasks",
	"mem": "memory", "ram": "memory", "cpm": "calls_per_minute", "rate": "calls_per_minute",
	"roles_permissions": "role_permissions", "permissions": "role_permissions",
}

// walk checks n against t at path.
func (ix *index) walk(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	ix.values[path] = n
	if ix.nodes++; ix.nodes > maxNodes {
		return ix.errorf(path, "the file expands to more than %d values (through YAML aliases?); write it out plainly", maxNodes)
	}
	if isNull(n) {
		return nil // absent: the zero value
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return ix.errorf(path, "expected a duration like 5s or 500ms, got %s", describe(n))
		}
		if _, err := ParseDuration(n.Value); err != nil {
			return ix.errorf(path, "%s", err.Error())
		}
		return nil
	case t == byteSizeType:
		if n.Kind != yaml.ScalarNode {
			return ix.errorf(path, "expected a size like 64MiB, got %s", describe(n))
		}
		if _, err := ParseByteSize(n.Value); err != nil {
			return ix.errorf(path, "%s", err.Error())
		}
		return nil
	case t == httpCapsType:
		switch n.Kind {
		case yaml.SequenceNode:
			return ix.walk(n, reflect.TypeFor[[]httpTargetItem](), path)
		case yaml.MappingNode:
			return ix.walkStruct(n, reflect.TypeFor[httpCapsObject](), path)
		}
		return ix.errorf(path, "expected a list of targets or a mapping {targets: [...], allow_any: true}, got %s; write it like http: [https://api.example.com:443]", describe(n))
	case t == httpItemType:
		switch n.Kind {
		case yaml.ScalarNode:
			return ix.walk(n, reflect.TypeFor[string](), path)
		case yaml.MappingNode:
			return ix.walkStruct(n, reflect.TypeFor[httpTargetObject](), path)
		}
		return ix.errorf(path, "expected a target like https://api.example.com:443, or {url: ..., headers: {...}}, got %s", describe(n))
	case t == collsType:
		switch {
		case n.Kind == yaml.SequenceNode:
			return ix.walk(n, reflect.TypeFor[[]string](), path)
		case n.Kind == yaml.ScalarNode && n.Tag == "!!bool":
			return nil
		}
		return ix.errorf(path, "expected a list of collections like [docs, faq], or true for every collection, got %s", describe(n))
	case t == fileType:
		switch n.Kind {
		case yaml.ScalarNode:
			return ix.walk(n, reflect.TypeFor[string](), path)
		case yaml.MappingNode:
			if err := ix.walkStruct(n, reflect.TypeFor[fileGrantObject](), path); err != nil {
				return err
			}
			if !ix.has(path + ".path") {
				return ix.errorf(path, "names no path; write it like {path: /srv/out, rw: true}")
			}
			return nil
		}
		return ix.errorf(path, "expected a path like /srv/data (read-only), /srv/out:rw, or {path: /srv/out, rw: true}, got %s", describe(n))
	case t == commandType:
		switch n.Kind {
		case yaml.SequenceNode:
			return ix.walk(n, reflect.TypeFor[[]string](), path)
		case yaml.ScalarNode:
			return ix.walk(n, reflect.TypeFor[string](), path)
		}
		return ix.errorf(path, "expected a command like python3 main.py, or a list like [python3, main.py], got %s", describe(n))
	}
	switch t.Kind() {
	case reflect.Pointer:
		return ix.walk(n, t.Elem(), path)
	case reflect.Struct:
		return ix.walkStruct(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if t.Elem().Kind() == reflect.Struct {
				return ix.errorf(path, "expected a list of mappings, got %s; start each item with \"- \" on its own line, like \"- name: ...\"", describe(n))
			}
			if n.Kind == yaml.ScalarNode {
				return ix.errorf(path, "expected a list, got %s; write it as [%s]", describe(n), n.Value)
			}
			return ix.errorf(path, "expected a list, got %s; write it like [a, b]", describe(n))
		}
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if isNull(item) {
				ix.values[p] = item
				return ix.errorf(p, "empty list item; remove the line or give it a value")
			}
			if err := ix.walk(item, t.Elem(), p); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return ix.errorf(path, "expected a mapping of name: value lines, got %s", describe(n))
		}
		seen := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := path + "." + k.Value
			ix.keys[p] = k
			if k.Kind != yaml.ScalarNode {
				return ix.errorf(path, "a key is %s; keys must be plain names", describe(k))
			}
			if first := seen[k.Value]; first != nil {
				return ix.errorf(p, "defined twice (first at line %d); keep one", first.Line)
			}
			seen[k.Value] = k
			if t.Elem().Kind() == reflect.String {
				// Only config has string values: they reach the module
				// verbatim, so YAML must not reinterpret them.
				if isNull(v) {
					ix.values[p] = v
					return ix.errorf(p, `has no value; write %s: "" for an empty string`, k.Value)
				}
				if v.Kind == yaml.ScalarNode && v.Tag != "!!str" {
					ix.values[p] = v
					return ix.errorf(p, "%s is %s, but values here are strings; quote it: %s: %q", v.Value, article(v), k.Value, v.Value)
				}
			}
			if err := ix.walk(v, t.Elem(), p); err != nil {
				return err
			}
		}
		return nil
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return ix.errorf(path, "expected a string, got %s", describe(n))
		}
		if n.Tag == "!!bool" {
			return ix.errorf(path, "%s is a boolean; quote it if you mean the text: %q", n.Value, n.Value)
		}
		return nil
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return ix.errorf(path, "%s is not a boolean; write true or false", describeValue(n))
		}
		return nil
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" && n.Tag != "!!float" {
			return ix.errorf(path, "%s is not a number; write it like 200 or 1.5", describeValue(n))
		}
		if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
			return ix.errorf(path, "%s is not a finite number; write it like 200 or 1.5", n.Value)
		}
		return nil
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return ix.errorf(path, "%s is not a whole number; write it like 4", describeValue(n))
		}
		if _, err := strconv.ParseInt(n.Value, 0, 32); err != nil {
			return ix.errorf(path, "%s is out of range; write a number below 2147483648", n.Value)
		}
		return nil
	}
	return ix.errorf(path, "internal error: no check for %s", t)
}

func (ix *index) walkStruct(n *yaml.Node, t reflect.Type, path string) error {
	fields := yamlFields(t)
	noun, ok := fieldNoun[t]
	if !ok {
		noun = [2]string{"field", "fields"}
	}
	if n.Kind != yaml.MappingNode {
		return ix.errorf(path, "expected a mapping of field: value lines, got %s; known %s are %s", describe(n), noun[1], strings.Join(fieldNames(fields), ", "))
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		ix.keys[p] = k
		if k.Kind != yaml.ScalarNode {
			ix.values[p] = v
			return ix.errorf(path, "a key is %s; keys must be plain names", describe(k))
		}
		f, ok := findField(fields, k.Value)
		if !ok && k.Value == "<<" {
			ix.values[p] = v
			return ix.errorf(p, "YAML merge keys are not supported; write the fields out, so that each file reads on its own")
		}
		if !ok {
			ix.values[p] = v
			names := fieldNames(fields)
			if s := suggest(k.Value, names); s != "" {
				return ix.errorf(p, "unknown %s; did you mean %s? Known %s are %s", noun[0], s, noun[1], strings.Join(names, ", "))
			}
			return ix.errorf(p, "unknown %s; known %s are %s", noun[0], noun[1], strings.Join(names, ", "))
		}
		if first := seen[k.Value]; first != nil {
			return ix.errorf(p, "defined twice (first at line %d); keep one", first.Line)
		}
		seen[k.Value] = k
		if err := ix.walk(v, f.typ, p); err != nil {
			return err
		}
	}
	return nil
}

type yamlField struct {
	name string
	typ  reflect.Type
}

func yamlFields(t reflect.Type) []yamlField {
	var out []yamlField
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
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

// describe names the kind of a node for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
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
	return describe(n)
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

// suggest returns the name in names closest to s, when it is close enough
// to be a plausible typo or is a known synonym (network for http), else "".
func suggest(s string, names []string) string {
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
	for _, k := range slices.Sorted(maps.Keys(fieldHints)) {
		h := fieldHints[k]
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
