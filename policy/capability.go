package policy

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// Capabilities are a table. Each one is a CapabilitySpec, registered once
// (the built-in ones below; an op family's own from the file that declares
// its ops), and each has one of four shapes. What a shape means (how it is
// written in YAML, validated, merged across profile layers, intersected
// with a request, checked on a call, reported and named in a denial) is
// written once, in the shape's code in this file; Evaluate, union,
// IsZero, CheckOp, Report and the decoder's hints loop over the table. So
// a new capability is one RegisterCapability call, and it cannot be half
// known: before the table, a capability added to the op table's list but
// missing from one of seven places was denied with a message telling the
// author to ask for what the manifest already asked for.

// Shape is how a capability is written and granted.
type Shape int

const (
	// Flag is granted as a whole: kv: true.
	Flag Shape = iota + 1
	// Named is a list of names, granted one by one (db collections, ai
	// models, knowledge collections): db: [orders]. A grant may write "*"
	// for every name. A call names the one it uses as its target.
	Named
	// Targets is a list of URL targets, scheme://host:port with an
	// optional path prefix (http): a call's target is a URL, covered by a
	// granted target. See HTTPCaps.
	Targets
	// Paths is a list of directories, read-only unless :rw (filesystem):
	// a call's target is a path, covered by a granted directory. See
	// FileGrant.
	Paths
)

var shapeNames = map[Shape]string{Flag: "flag", Named: "named", Targets: "targets", Paths: "paths"}

func (s Shape) String() string {
	if n, ok := shapeNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Shape(%d)", int(s))
}

// CapabilitySpec declares a capability: its name under capabilities: in
// moat.yaml and in a profile's grants, and its shape. The shape decides
// everything else; the few fields below only adjust messages and the names
// a Named capability accepts.
type CapabilitySpec struct {
	// Name is the key under capabilities:, like kv or email: 1-32
	// characters a-z 0-9 _.
	Name  string
	Shape Shape
	// Target says what one entry of a Named capability is, in messages
	// ("collection", "model"); "name" when empty. Targets and Paths
	// capabilities name a "url" and a "path".
	Target string
	// AskAll lets a manifest ask for "*" in a Named capability, and the
	// YAML value true stand for ["*"] (knowledge: true). Without it only a
	// profile may write "*": a module names what it uses, so that the
	// operator sees it.
	AskAll bool
	// Valid checks one name of a Named capability and says how to write it;
	// nil accepts collection-like names (1-64 characters a-z 0-9 _).
	Valid func(name string) error
	// Aliases are wrong names people write for it (network for http), for
	// "did you mean" when the edit distance does not find it.
	Aliases []string
}

// capability is a registered spec with its shape's code and the accessors
// of its value in a Capabilities: a built-in capability's typed field, or
// Capabilities.Extra for a registered one.
type capability struct {
	CapabilitySpec
	shape shape
	get   func(*Capabilities) any
	set   func(*Capabilities, any)
	// flag and names read a Flag's and a Named's value without boxing
	// it in an interface: CheckOp's allowed path allocates nothing.
	flag  func(*Capabilities) bool
	names func(*Capabilities) []string
}

// name is k's name, "" for no row (an op any module may call).
func (k *capability) name() string {
	if k == nil {
		return ""
	}
	return k.Name
}

var (
	capsMu    sync.RWMutex
	capTable  []*capability // in registration order: the order of refusals and reports
	capByName = map[string]*capability{}
)

// RegisterCapability adds a capability to the table. Call it once, from
// the init of the package that declares ops needing it (before
// DeclareOp names it), or from a test. It fails for a name already
// registered, a name that is not a plain key, or an unknown shape.
//
// A registered capability's value lives in Capabilities.Extra (Get and Set
// read and write it by name); the YAML form is the shape's: email: true,
// crm: [contacts], webhooks: [https://hooks.example.com:443], scratch:
// [/srv/scratch:rw].
func RegisterCapability(s CapabilitySpec) error {
	if s.Name == "" || len(s.Name) > 32 || strings.Trim(s.Name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		return fmt.Errorf("policy: capability name %q: use 1-32 characters a-z 0-9 _", s.Name)
	}
	c := &capability{CapabilitySpec: s}
	c.get = func(cs *Capabilities) any { return cs.Extra[s.Name] }
	c.flag = func(cs *Capabilities) bool { v, _ := cs.Extra[s.Name].(bool); return v }
	c.names = func(cs *Capabilities) []string { v, _ := cs.Extra[s.Name].([]string); return v }
	// set copies Extra before it writes: Capabilities is a value, and a
	// copy must not change with the original.
	c.set = func(cs *Capabilities, v any) {
		extra := maps.Clone(cs.Extra)
		if c.shape.zero(v) {
			delete(extra, s.Name)
		} else {
			if extra == nil {
				extra = map[string]any{}
			}
			extra[s.Name] = v
		}
		if len(extra) == 0 {
			extra = nil
		}
		cs.Extra = extra
	}
	return register(c)
}

func register(c *capability) error {
	switch c.Shape {
	case Flag:
		c.shape = flagShape{}
	case Named:
		c.shape = namedShape{}
		if c.Target == "" {
			c.Target = "name"
		}
	case Targets:
		c.shape = targetsShape{}
		c.Target = "url"
	case Paths:
		c.shape = pathsShape{}
		c.Target = "path"
	default:
		return fmt.Errorf("policy: capability %s: unknown shape %v", c.Name, c.Shape)
	}
	capsMu.Lock()
	defer capsMu.Unlock()
	if _, dup := capByName[c.Name]; dup {
		return fmt.Errorf("policy: capability %s is already registered", c.Name)
	}
	capTable = append(capTable, c)
	capByName[c.Name] = c
	return nil
}

// Capability returns the spec registered under name.
func Capability(name string) (CapabilitySpec, bool) {
	c := lookupCap(name)
	if c == nil {
		return CapabilitySpec{}, false
	}
	return c.CapabilitySpec, true
}

// CapabilitySpecs lists the table, in registration order (the built-in
// capabilities first).
func CapabilitySpecs() []CapabilitySpec {
	t := table()
	out := make([]CapabilitySpec, len(t))
	for i, c := range t {
		out[i] = c.CapabilitySpec
	}
	return out
}

func lookupCap(name string) *capability {
	capsMu.RLock()
	c := capByName[name]
	capsMu.RUnlock()
	return c
}

// table is a snapshot of the table: registration only appends, so the
// slice header read under the lock stays valid.
func table() []*capability {
	capsMu.RLock()
	t := capTable
	capsMu.RUnlock()
	return t
}

// The built-in capabilities, in the order of their fields in
// Capabilities.
func init() {
	builtin := func(s CapabilitySpec, get func(*Capabilities) any, set func(*Capabilities, any)) *capability {
		k := &capability{CapabilitySpec: s, get: get, set: set}
		k.flag = func(c *Capabilities) bool { v, _ := get(c).(bool); return v } // a bool boxes without allocating
		if err := register(k); err != nil {
			panic(err)
		}
		return k
	}
	token := func(name string) error {
		if !tokenRE.MatchString(name) {
			return fmt.Errorf("%q is not a model name; use letters, digits and . _ - : / @ +, like gpt-small", name)
		}
		return nil
	}
	_ = builtin(CapabilitySpec{Name: "kv", Shape: Flag, Aliases: []string{"store", "storage", "keyvalue"}},
		func(c *Capabilities) any { return c.KV }, func(c *Capabilities, v any) { c.KV = v.(bool) })
	collection := func(example string) func(string) error {
		return func(name string) error {
			if !collectionRE.MatchString(name) {
				return fmt.Errorf("%q is not a collection name; use 1-64 characters a-z 0-9 _, like %s", name, example)
			}
			return nil
		}
	}
	db := builtin(CapabilitySpec{Name: "db", Shape: Named, Target: "collection", Valid: collection("orders"), Aliases: []string{"database", "sql"}},
		func(c *Capabilities) any { return c.DB }, func(c *Capabilities, v any) { c.DB = v.([]string) })
	_ = builtin(CapabilitySpec{Name: "http", Shape: Targets, Aliases: []string{"network", "net", "https", "fetch", "web"}},
		func(c *Capabilities) any { return c.HTTP }, func(c *Capabilities, v any) { c.HTTP = v.(HTTPCaps) })
	_ = builtin(CapabilitySpec{Name: "media", Shape: Flag},
		func(c *Capabilities) any { return c.Media }, func(c *Capabilities, v any) { c.Media = v.(bool) })
	ai := builtin(CapabilitySpec{Name: "ai", Shape: Named, Target: "model", Valid: token, Aliases: []string{"llm", "models", "model"}},
		func(c *Capabilities) any { return c.AI }, func(c *Capabilities, v any) { c.AI = v.([]string) })
	knowledge := builtin(CapabilitySpec{Name: "knowledge", Shape: Named, Target: "collection", AskAll: true, Valid: collection("docs (or knowledge: true for every collection)")},
		func(c *Capabilities) any { return []string(c.Knowledge) }, func(c *Capabilities, v any) { c.Knowledge = Collections(v.([]string)) })
	_ = builtin(CapabilitySpec{Name: "tasks", Shape: Flag, Aliases: []string{"jobs", "queue", "task"}},
		func(c *Capabilities) any { return c.Tasks }, func(c *Capabilities, v any) { c.Tasks = v.(bool) })
	_ = builtin(CapabilitySpec{Name: "filesystem", Shape: Paths, Aliases: []string{"fs", "files", "file", "disk_paths"}},
		func(c *Capabilities) any { return c.Filesystem }, func(c *Capabilities, v any) { c.Filesystem = v.([]FileGrant) })
	db.names = func(c *Capabilities) []string { return c.DB }
	ai.names = func(c *Capabilities) []string { return c.AI }
	knowledge.names = func(c *Capabilities) []string { return c.Knowledge }
}

// Get returns the value of the capability named name in c: a bool (Flag),
// a []string (Named), an HTTPCaps (Targets) or a []FileGrant (Paths); nil
// for a name not in the table.
func (c Capabilities) Get(name string) any {
	k := lookupCap(name)
	if k == nil {
		return nil
	}
	return k.value(&c)
}

// Set sets the capability named name in c to v, of the type Get returns.
func (c *Capabilities) Set(name string, v any) error {
	k := lookupCap(name)
	if k == nil {
		return fmt.Errorf("policy: no capability is named %q (known: %s)", name, strings.Join(CapabilityNames(), ", "))
	}
	if reflect.TypeOf(v) != reflect.TypeOf(k.shape.empty()) {
		return fmt.Errorf("policy: capability %s is a %v capability, whose value is a %T, not a %T", name, k.Shape, k.shape.empty(), v)
	}
	k.set(c, v)
	return nil
}

// value is k's value in c, never nil: the shape's empty value when unset.
func (k *capability) value(c *Capabilities) any {
	if v := k.get(c); v != nil {
		return v
	}
	return k.shape.empty()
}

// yamlType is the Go type of k's YAML value.
func (k *capability) yamlType() reflect.Type {
	if k.Shape == Named && k.AskAll {
		return reflect.TypeFor[Collections]()
	}
	return reflect.TypeOf(k.shape.empty())
}

// capsStruct is a struct type with one field per capability, tagged with
// its name: the form the strict decoder checks and yaml.v3 decodes and
// encodes, built from the table so that the YAML format is the table's.
// reflect.StructOf returns the same type for the same fields, so the
// strict decoder's nouns find it.
func capsStruct(t []*capability) reflect.Type {
	fields := make([]reflect.StructField, len(t))
	for i, k := range t {
		fields[i] = reflect.StructField{
			Name: fmt.Sprintf("C%d", i),
			Type: k.yamlType(),
			Tag:  reflect.StructTag(`yaml:"` + k.Name + `,omitempty"`),
		}
	}
	return reflect.StructOf(fields)
}

// capsShape is the strict decoder's check of a capabilities mapping.
func capsShape(ix *index, n *yaml.Node, path string) error {
	return ix.WalkStruct(n, capsStruct(table()), path)
}

// UnmarshalYAML decodes a capabilities mapping by the table.
func (c *Capabilities) UnmarshalYAML(n *yaml.Node) error {
	t := table()
	v := reflect.New(capsStruct(t))
	if err := n.Decode(v.Interface()); err != nil {
		return err
	}
	*c = Capabilities{}
	for i, k := range t {
		f := v.Elem().Field(i)
		if f.Type() == reflect.TypeFor[Collections]() {
			f = f.Convert(reflect.TypeFor[[]string]())
		}
		if !k.shape.zero(f.Interface()) {
			k.set(c, f.Interface())
		}
	}
	return nil
}

// MarshalYAML encodes c by the table, in its order, omitting what is
// unset.
func (c Capabilities) MarshalYAML() (any, error) {
	t := table()
	v := reflect.New(capsStruct(t)).Elem()
	for i, k := range t {
		x := reflect.ValueOf(k.value(&c))
		v.Field(i).Set(x.Convert(v.Field(i).Type()))
	}
	return v.Interface(), nil
}

// IsZero reports whether c holds no capability.
func (c Capabilities) IsZero() bool {
	for _, k := range table() {
		if !k.shape.zero(k.value(&c)) {
			return false
		}
	}
	return true
}

// union adds b to a. Lists keep a's order, then b's new entries.
func union(a, b Capabilities) Capabilities {
	var out Capabilities
	for _, k := range table() {
		k.set(&out, k.shape.union(k.value(&a), k.value(&b)))
	}
	return out
}

// capabilityHints are the table's aliases, for "did you mean".
func capabilityHints() map[string]string {
	h := map[string]string{}
	for _, k := range table() {
		for _, a := range k.Aliases {
			h[a] = k.Name
		}
	}
	return h
}

// checkCaps validates capabilities at path. In a grant, "*" may stand for
// any name of a Named capability; a manifest must name what it uses
// (unless the capability is AskAll), so that the operator sees it.
func checkCaps(ix *index, base string, c *Capabilities, grant bool) error {
	for _, k := range table() {
		if err := k.shape.check(ix, base+"."+k.Name, k, k.value(c), grant); err != nil {
			return err
		}
	}
	return nil
}

// checkDuplicates refuses a name listed twice at path.
func checkDuplicates(ix *index, path string, l []string) error {
	for i, s := range l {
		if j := slices.Index(l, s); j < i {
			return ix.Errorf(fmt.Sprintf("%s[%d]", path, i), "%q is listed twice (also at [%d]); remove one", s, j)
		}
	}
	return nil
}
