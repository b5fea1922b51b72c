package policy

import (
	"maps"
	"reflect"

	"github.com/moat-sandbox/moat/internal/yamlstrict"
	"gopkg.in/yaml.v3"
)

// FileError is a problem in a manifest or a profile (or the server's
// config). It names the file, the line and (except for YAML syntax errors)
// the field path, and its message says how to fix the problem:
// the person reading it is editing that file, and should not have to guess
// which of three "timeout" lines is meant or what the parser wanted instead.
//
// Parsing stops at the first problem, so that the message can be precise
// rather than a cascade of consequences of one typo. Every file moat reads
// as configuration is decoded by the same strict rules (package
// internal/yamlstrict), so this is the one error type they all return.
type FileError = yamlstrict.Error

// MaxFileSize bounds a manifest or profile. Manifests come from module
// authors, who are not trusted, so parsing one must stay cheap.
const MaxFileSize = yamlstrict.MaxFileSize

// index remembers where each field path was written.
type index = yamlstrict.Index

// decode parses data strictly into v (a *Manifest or *Profile): exactly one
// document, no aliases, merge keys or tags, no unknown or repeated field,
// every value of its field's kind. what says what an empty file lacks.
func decode(file string, data []byte, what string, v any) (*index, error) {
	nouns := maps.Clone(fieldNoun)
	nouns[capsStruct(table())] = [2]string{"capability", "capabilities"}
	return yamlstrict.Decode(file, data, v, &yamlstrict.Options{Empty: what, Shapes: shapes, Nouns: nouns, Hints: hints()})
}

// shapes check the types whose YAML form is not their Go form.
var shapes = map[reflect.Type]yamlstrict.Shape{
	reflect.TypeFor[Duration](): yamlstrict.Scalar("a duration like 5s or 500ms", func(s string) error {
		_, err := ParseDuration(s)
		return err
	}),
	reflect.TypeFor[ByteSize](): yamlstrict.Scalar("a size like 64MiB", func(s string) error {
		_, err := ParseByteSize(s)
		return err
	}),
	reflect.TypeFor[HTTPCaps]():       httpCapsShape,
	reflect.TypeFor[httpTargetItem](): httpItemShape,
	reflect.TypeFor[Collections]():    collectionsShape,
	reflect.TypeFor[FileGrant]():      fileGrantShape,
	reflect.TypeFor[Command]():        commandShape,
	reflect.TypeFor[Capabilities]():   capsShape,
	// A schema is JSON values of any shape: ParseSchema checks it.
	reflect.TypeFor[Schema](): func(*index, *yaml.Node, string) error { return nil },
}

func httpCapsShape(ix *index, n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.SequenceNode:
		return ix.Walk(n, reflect.TypeFor[[]httpTargetItem](), path)
	case yaml.MappingNode:
		return ix.WalkStruct(n, reflect.TypeFor[httpCapsObject](), path)
	}
	return ix.Errorf(path, "expected a list of targets or a mapping {targets: [...], allow_any: true}, got %s; write it like http: [https://api.example.com:443]", yamlstrict.Describe(n))
}

func httpItemShape(ix *index, n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.ScalarNode:
		return ix.Walk(n, reflect.TypeFor[string](), path)
	case yaml.MappingNode:
		return ix.WalkStruct(n, reflect.TypeFor[httpTargetObject](), path)
	}
	return ix.Errorf(path, "expected a target like https://api.example.com:443, or {url: ..., headers: {...}}, got %s", yamlstrict.Describe(n))
}

func collectionsShape(ix *index, n *yaml.Node, path string) error {
	switch {
	case n.Kind == yaml.SequenceNode:
		return ix.Walk(n, reflect.TypeFor[[]string](), path)
	case n.Kind == yaml.ScalarNode && n.Tag == "!!bool":
		return nil
	}
	return ix.Errorf(path, "expected a list of collections like [docs, faq], or true for every collection, got %s", yamlstrict.Describe(n))
}

func fileGrantShape(ix *index, n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.ScalarNode:
		return ix.Walk(n, reflect.TypeFor[string](), path)
	case yaml.MappingNode:
		if err := ix.WalkStruct(n, reflect.TypeFor[fileGrantObject](), path); err != nil {
			return err
		}
		if !ix.Has(path + ".path") {
			return ix.Errorf(path, "names no path; write it like {path: /srv/out, rw: true}")
		}
		return nil
	}
	return ix.Errorf(path, "expected a path like /srv/data (read-only), /srv/out:rw, or {path: /srv/out, rw: true}, got %s", yamlstrict.Describe(n))
}

func commandShape(ix *index, n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.SequenceNode:
		return ix.Walk(n, reflect.TypeFor[[]string](), path)
	case yaml.ScalarNode:
		return ix.Walk(n, reflect.TypeFor[string](), path)
	}
	return ix.Errorf(path, "expected a command like python3 main.py, or a list like [python3, main.py], got %s", yamlstrict.Describe(n))
}

// nouns used in "unknown field" messages, by struct type: singular, plural.
var fieldNoun = map[reflect.Type][2]string{
	reflect.TypeFor[Limits](): {"limit", "limits"},
}

// fieldHints map common wrong field names to the right one when the edit
// distance is too large to find it; the capabilities' own come from the
// table (CapabilitySpec.Aliases).
var fieldHints = map[string]string{
	"mem": "memory", "ram": "memory", "cpm": "calls_per_minute", "rate": "calls_per_minute",
	"roles_permissions": "role_permissions", "permissions": "role_permissions",
}

// newNodeError is what an UnmarshalYAML method returns, so that the
// decoder reports it at n's line.
func newNodeError(n *yaml.Node, msg string) error { return yamlstrict.NodeError(n, msg) }

// suggest returns the name in names closest to s, when it is close enough
// to be a plausible typo or is a known synonym (network for http), else "".
func suggest(s string, names []string) string { return yamlstrict.Suggest(s, names, hints()) }

// hints are fieldHints and the capability table's aliases.
func hints() map[string]string {
	h := capabilityHints()
	maps.Copy(h, fieldHints)
	return h
}
