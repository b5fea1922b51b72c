package policy

import (
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/moat-sandbox/moat/internal/plugintree"
)

// ManifestFile is the name of a module's manifest, kept beside the module.
const ManifestFile = "moat.yaml"

// Manifest is what a module says about itself in moat.yaml: its name and
// version, how to run it, the actions it offers and who may call them, and
// the capabilities and limits it asks for.
//
// A manifest only asks. What a module actually gets is decided by the
// operator's Profile (see Profile.Evaluate): the author of a module is not
// the person who decides what it may touch on someone else's host.
type Manifest struct {
	Name         string            `yaml:"name"`
	Version      string            `yaml:"version"`
	Language     string            `yaml:"language,omitempty"`
	Module       string            `yaml:"module,omitempty"`  // default Name + ".wasm"
	Kind         Kind              `yaml:"kind,omitempty"`    // default KindMoat
	Command      Command           `yaml:"command,omitempty"` // kind native: the worker's argv
	Actions      []Action          `yaml:"actions,omitempty"`
	Capabilities Capabilities      `yaml:"capabilities,omitempty"`
	Limits       Limits            `yaml:"limits,omitempty"`
	Config       map[string]string `yaml:"config,omitempty"`
	// Models declares the document models of the db ops (db.insert,
	// db.query, ...): their fields, scope and indexes. See models.go.
	Models map[string]Model `yaml:"models,omitempty"`
	// Knowledge declares the scope of the knowledge collections the
	// module asks for (capabilities.knowledge): org (the default) or user.
	// See knowledge.go.
	Knowledge map[string]KnowledgeCollection `yaml:"knowledge,omitempty"`
	// Schedules run actions on a cron schedule, as background tasks of
	// the organization's service principal (see Schedule).
	Schedules []Schedule `yaml:"schedules,omitempty"`
	// Routes bind HTTP methods and paths to actions (see routes.go).
	Routes []Route `yaml:"routes,omitempty"`
	// Pages are the module's own pages, shown in moat serve's console to
	// those their access requirements admit (see Page, pages.go).
	Pages []Page `yaml:"pages,omitempty"`

	// File is the path the manifest was read from, for messages.
	File string `yaml:"-"`
}

// Kind says how the host runs a module.
type Kind string

const (
	// KindMoat is a moat plugin: it exports moat_invoke and calls the host
	// through the moat.call import.
	KindMoat Kind = "moat"
	// KindWASICommand is a WASI program run from _start, with stdin, stdout
	// and arguments. It has no actions.
	KindWASICommand Kind = "wasi-command"
	// KindExtism is an Extism plug-in: each action is an exported function.
	KindExtism Kind = "extism"
	// KindNative is a native plugin: a long-lived worker process started
	// from Command in the module's directory, run under every kernel layer
	// (no WebAssembly), speaking the op table over the pipe transport.
	KindNative Kind = "native"
)

var kinds = []string{string(KindMoat), string(KindWASICommand), string(KindExtism), string(KindNative)}

// Command is a native worker's argv: the program, then its arguments. No
// shell reads it. In YAML it is a list, or one string split at spaces
// (command: python3 main.py).
type Command []string

// UnmarshalYAML accepts the list form and the string form.
func (c *Command) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		*c = l
		return nil
	case yaml.ScalarNode:
		*c = strings.Fields(n.Value)
		return nil
	}
	return newNodeError(n, "expected a command like python3 main.py, or a list like [python3, main.py]")
}

// Native command limits: the arguments, and the bytes of each.
const (
	maxCommandArgs   = 64
	maxCommandArgLen = 4096
)

// Action is one entry point of a module, and who may call it.
//
// Roles and Permissions combine differently on purpose: Roles name who the
// action is for (any one suffices), while Permissions name what it does (each
// is needed), so that an operator can withdraw one permission from a role
// without editing every manifest.
type Action struct {
	Name        string   `yaml:"name"`
	Export      string   `yaml:"export,omitempty"`      // default Name
	Roles       []string `yaml:"roles,omitempty"`       // the caller needs at least one
	Permissions []string `yaml:"permissions,omitempty"` // the caller's roles must grant all
	Confirm     bool     `yaml:"confirm,omitempty"`     // a confirmation must precede the call
	Timeout     Duration `yaml:"timeout,omitempty"`
	MaxInput    ByteSize `yaml:"max_input,omitempty"`
	MaxOutput   ByteSize `yaml:"max_output,omitempty"`
	// Description says what the action does, for the agents that see it
	// as an MCP tool and the people who see it in the console: plain text
	// (CheckToolText).
	Description string `yaml:"description,omitempty"`
	// InputSchema and OutputSchema describe the action's input and output
	// JSON (schema.go): checked at load, enforced on every call.
	InputSchema  *Schema `yaml:"input_schema,omitempty"`
	OutputSchema *Schema `yaml:"output_schema,omitempty"`
}

// Capabilities is a set of things a module may use beyond its own memory.
// In a manifest it is a request; in a profile, a grant; in an Evaluation,
// their intersection. The zero value is nothing: log.write and config.get
// are always available and need no capability.
//
// Which capabilities exist is the table of capability.go: the fields
// below are the built-in rows' values, kept typed for the host that reads
// them (Effective.Filesystem, Effective.Tasks); a capability an op family
// registers lives in Extra. Everything that walks capabilities (YAML,
// validation, Evaluate, CheckOp, Report) walks the table, never these
// fields by name.
type Capabilities struct {
	KV         bool        `yaml:"kv,omitempty"`         // the module's key-value store
	DB         []string    `yaml:"db,omitempty"`         // document collections; "*" in a grant for any
	HTTP       HTTPCaps    `yaml:"http,omitempty"`       // outgoing HTTP targets
	Media      bool        `yaml:"media,omitempty"`      // media storage and processing
	AI         []string    `yaml:"ai,omitempty"`         // model names; "*" in a grant for any
	Knowledge  Collections `yaml:"knowledge,omitempty"`  // knowledge collections; "*" (or true) for any
	Tasks      bool        `yaml:"tasks,omitempty"`      // background tasks
	Filesystem []FileGrant `yaml:"filesystem,omitempty"` // directories, read-only unless rw (files.go)

	// Extra holds the values of the capabilities registered beyond these
	// fields (RegisterCapability), by name; Get and Set read and write
	// any capability by name.
	Extra map[string]any `yaml:"-" json:",omitempty"`
}

// Collections names knowledge collections, like db's. In YAML it is a
// list of names, or true for every collection (the same as ["*"]), which
// is what knowledge: true meant when the capability was granted as a
// whole; false is none.
//
// Unlike db, a manifest may ask for "*": a module that asks for every
// collection still gets only what the profile grants, and a grant of named
// collections does not cover "*", so only a profile that grants true (or
// "*") gives it; naming the collections is what lets a profile grant
// fewer.
type Collections []string

// AllCollections is the one entry of Collections that stands for every
// collection.
const AllCollections = "*"

// UnmarshalYAML accepts a list, or true or false.
func (c *Collections) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		*c = l
		return nil
	case yaml.ScalarNode:
		var all bool
		if err := n.Decode(&all); err == nil {
			*c = nil
			if all {
				*c = Collections{AllCollections}
			}
			return nil
		}
	}
	return newNodeError(n, "expected a list of collections like [docs, faq], or true for every collection")
}

// MarshalYAML writes true for every collection, else the list.
func (c Collections) MarshalYAML() (any, error) {
	if len(c) == 1 && c[0] == AllCollections {
		return true, nil
	}
	return []string(c), nil
}

// HTTPCaps lists HTTP targets as "scheme://host:port", optionally with a
// path prefix ("https://api.example.com:443/v1/": that path and those
// below it, on whole segments). A host may be a wildcard like
// "*.example.com"; a host of "*", or the target "*", matches any server
// and is accepted only with AllowAny set, so that "everything" is never
// written by accident.
//
// In YAML it is either a list of targets or a mapping
// {targets: [...], allow_any: true}. In a profile, an entry of either
// list may be a mapping {url: TARGET, headers: {NAME: VALUE}}: the host
// adds those headers to every request the target covers, and a value may
// hold ${secret:NAME}, the operator's secret NAME of the calling
// organization (see HeaderInjection). The mapping may also say
// propagate_trace: true: the host then sends the trace context
// (traceparent, tracestate) of the op's span to that target, when traces
// are on; to no other target, ever. A manifest asks for URLs only.
type HTTPCaps struct {
	Targets  []string
	AllowAny bool
	// Headers are the headers a profile's grant injects, by target (as
	// written in Targets), then by header name. Profiles only.
	Headers map[string]map[string]string
	// PropagateTrace lists the targets (as written in Targets) whose
	// grant opted in to receive the trace context. Profiles only.
	PropagateTrace []string
}

// httpCapsObject is the mapping form of HTTPCaps.
type httpCapsObject struct {
	Targets  []httpTargetItem `yaml:"targets,omitempty"`
	AllowAny bool             `yaml:"allow_any,omitempty"`
}

// httpTargetItem is one entry of a list of targets: a target, or the
// mapping form httpTargetObject.
type httpTargetItem httpTargetObject

// httpTargetObject is a target with the headers a grant injects.
type httpTargetObject struct {
	URL            string            `yaml:"url"`
	Headers        map[string]string `yaml:"headers,omitempty"`
	PropagateTrace bool              `yaml:"propagate_trace,omitempty"`
}

// UnmarshalYAML accepts a target or {url, headers}.
func (i *httpTargetItem) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*i = httpTargetItem{URL: n.Value}
		return nil
	case yaml.MappingNode:
		var o httpTargetObject
		if err := n.Decode(&o); err != nil {
			return err
		}
		*i = httpTargetItem(o)
		return nil
	}
	return newNodeError(n, "expected a target like https://api.example.com:443, or {url: https://api.example.com:443/, headers: {Authorization: \"Bearer ${secret:NAME}\"}, propagate_trace: true}")
}

// MarshalYAML writes a target alone, or the mapping when it has headers.
func (i httpTargetItem) MarshalYAML() (any, error) {
	if len(i.Headers) == 0 && !i.PropagateTrace {
		return i.URL, nil
	}
	return httpTargetObject(i), nil
}

func (h *HTTPCaps) fromItems(items []httpTargetItem, allowAny bool) {
	*h = HTTPCaps{AllowAny: allowAny}
	for _, it := range items {
		h.Targets = append(h.Targets, it.URL)
		if len(it.Headers) > 0 {
			if h.Headers == nil {
				h.Headers = map[string]map[string]string{}
			}
			h.Headers[it.URL] = it.Headers
		}
		if it.PropagateTrace {
			h.PropagateTrace = append(h.PropagateTrace, it.URL)
		}
	}
}

func (h HTTPCaps) items() []httpTargetItem {
	out := make([]httpTargetItem, len(h.Targets))
	for i, t := range h.Targets {
		out[i] = httpTargetItem{URL: t, Headers: h.Headers[t], PropagateTrace: slices.Contains(h.PropagateTrace, t)}
	}
	return out
}

// UnmarshalYAML accepts the list form and the mapping form.
func (h *HTTPCaps) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.SequenceNode:
		var items []httpTargetItem
		if err := n.Decode(&items); err != nil {
			return err
		}
		h.fromItems(items, false)
		return nil
	case yaml.MappingNode:
		var o httpCapsObject
		if err := n.Decode(&o); err != nil {
			return err
		}
		h.fromItems(o.Targets, o.AllowAny)
		return nil
	}
	return newNodeError(n, "expected a list of targets or {targets: [...], allow_any: true}")
}

// MarshalYAML writes the list form unless AllowAny is set.
func (h HTTPCaps) MarshalYAML() (any, error) {
	if h.AllowAny {
		return httpCapsObject{Targets: h.items(), AllowAny: true}, nil
	}
	return h.items(), nil
}

// IsZero lets yaml omit an empty HTTPCaps.
func (h HTTPCaps) IsZero() bool { return len(h.Targets) == 0 && !h.AllowAny }

// Limits bounds a module's resources. A zero field is unset. In a manifest
// the fields are what the module asks for; in a profile they are maximums;
// in an Evaluation they are what the host enforces, zero meaning the host's
// own default.
type Limits struct {
	Memory         ByteSize `yaml:"memory,omitempty"`           // linear memory per instance
	Timeout        Duration `yaml:"timeout,omitempty"`          // wall clock per invocation
	Disk           ByteSize `yaml:"disk,omitempty"`             // storage quota
	Concurrency    int      `yaml:"concurrency,omitempty"`      // invocations at once
	CallsPerMinute int      `yaml:"calls_per_minute,omitempty"` // invocations per minute
	DBRows         int      `yaml:"db_rows,omitempty"`          // db documents per organization and module
	DBBytes        ByteSize `yaml:"db_bytes,omitempty"`         // db document bytes per organization and module
}

// ParseManifest parses and validates a manifest. file names the source in
// errors and is stored in Manifest.File. Defaults are filled in: Module,
// Kind and each action's Export.
//
// Every error is a *FileError naming the file, line and field, and saying how
// to fix it.
func ParseManifest(file string, data []byte) (*Manifest, error) {
	var m Manifest
	ix, err := decode(file, data, "a manifest needs at least name: and version:", &m)
	if err != nil {
		return nil, err
	}
	if err := m.check(ix); err != nil {
		return nil, err
	}
	m.File = file
	return &m, nil
}

// LoadManifest reads and parses the manifest at path. When path is a
// directory, it reads the moat.yaml inside it. The manifest is a file of
// its plugin's tree, read by the tree's rule (package plugintree): a
// link or a special file (a FIFO would block the read) is refused.
func LoadManifest(path string) (*Manifest, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, ManifestFile)
	}
	data, err := plugintree.ReadFile(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	return ParseManifest(path, data)
}

// Action returns the action named name.
func (m *Manifest) Action(name string) (*Action, bool) {
	for i := range m.Actions {
		if m.Actions[i].Name == name {
			return &m.Actions[i], true
		}
	}
	return nil, false
}

// actionIndex returns the index of the action named name, or -1.
func (m *Manifest) actionIndex(name string) int {
	return slices.IndexFunc(m.Actions, func(a Action) bool { return a.Name == name })
}

var (
	// Module and profile names end up in file names, URLs, log fields and
	// storage scopes, so they are kept to a small portable alphabet.
	moduleNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	// Action names travel newline-separated through moat_actions and are
	// typed on command lines; Extism exports are often camelCase.
	actionNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	// Roles, permissions, config keys, model names: printable tokens.
	tokenRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$`)
	versionRE    = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
	collectionRE = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
)

const (
	nameChars      = "1-64 characters a-z 0-9 . _ - starting with a letter or digit"
	moduleNameRule = "use " + nameChars + ", like hello-go"
)

// check validates m and fills in defaults.
func (m *Manifest) check(ix *index) error {
	switch {
	case m.Name == "":
		return ix.Errorf("name", "required; add a line like name: hello-go (%s)", nameChars)
	case !moduleNameRE.MatchString(m.Name):
		return ix.Errorf("name", "%q is not a valid module name; %s", m.Name, moduleNameRule)
	case m.Version == "":
		return ix.Errorf("version", "required; add a line like version: 1.0.0")
	case !versionRE.MatchString(m.Version):
		return ix.Errorf("version", "%q is not a version; write MAJOR.MINOR.PATCH with an optional -suffix, like 1.2.0 or 1.2.0-rc.1", m.Version)
	}
	if m.Module == "" {
		m.Module = m.Name + ".wasm"
	} else if strings.ContainsAny(m.Module, `/\`) || strings.Contains(m.Module, "..") || m.Module == "." || strings.TrimSpace(m.Module) != m.Module {
		return ix.Errorf("module", "%q must be a plain file name beside moat.yaml, like %s.wasm (no directories, no ..)", m.Module, m.Name)
	}
	if m.Kind == "" {
		m.Kind = KindMoat
	} else if !slices.Contains(kinds, string(m.Kind)) {
		return ix.Errorf("kind", "%q is not a module kind%s; write one of %s", m.Kind, didYouMean(string(m.Kind), kinds), strings.Join(kinds, ", "))
	}
	if m.Kind == KindWASICommand && len(m.Actions) > 0 {
		return ix.Errorf("actions", "a wasi-command module has no actions (it runs from _start); remove actions, or set kind: moat")
	}
	if err := checkCommand(ix, m); err != nil {
		return err
	}
	seen := map[string]int{}
	for i := range m.Actions {
		a := &m.Actions[i]
		p := fmt.Sprintf("actions[%d]", i)
		switch {
		case a.Name == "":
			return ix.Errorf(p+".name", "an action needs a name; add name: greet")
		case !actionNameRE.MatchString(a.Name):
			return ix.Errorf(p+".name", "%q is not a valid action name; use 1-64 characters A-Z a-z 0-9 . _ - starting with a letter or digit", a.Name)
		}
		if j, dup := seen[a.Name]; dup {
			return ix.Errorf(p+".name", "action %q is already declared as actions[%d]; action names must be unique", a.Name, j)
		}
		seen[a.Name] = i
		if a.Export == "" {
			a.Export = a.Name
		} else if strings.ContainsFunc(a.Export, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return ix.Errorf(p+".export", "%q contains spaces or control characters; write the exported function name exactly", a.Export)
		}
		if err := checkTokens(ix, p+".roles", "role", a.Roles); err != nil {
			return err
		}
		if err := checkTokens(ix, p+".permissions", "permission", a.Permissions); err != nil {
			return err
		}
		if ix.Has(p+".timeout") && a.Timeout == 0 {
			return ix.Errorf(p+".timeout", "must be more than 0; remove the line to use the module's limit")
		}
		if ix.Has(p+".max_input") && a.MaxInput == 0 {
			return ix.Errorf(p+".max_input", "must be more than 0; remove the line to use the host's default")
		}
		if ix.Has(p+".max_output") && a.MaxOutput == 0 {
			return ix.Errorf(p+".max_output", "must be more than 0; remove the line to use the host's default")
		}
		if err := CheckToolText(a.Description); err != nil {
			return ix.Errorf(p+".description", "%v", err)
		}
		for _, sc := range []struct {
			field string
			s     **Schema
		}{{p + ".input_schema", &a.InputSchema}, {p + ".output_schema", &a.OutputSchema}} {
			if *sc.s == nil {
				continue
			}
			c, err := ParseSchema((*sc.s).JSON)
			if err != nil {
				return ix.Errorf(sc.field, "%v", err)
			}
			*sc.s = c
		}
	}
	if err := checkCaps(ix, "capabilities", &m.Capabilities, false); err != nil {
		return err
	}
	if err := checkLimits(ix, "limits", m.Limits); err != nil {
		return err
	}
	if err := checkModels(ix, m); err != nil {
		return err
	}
	if err := checkKnowledge(ix, m); err != nil {
		return err
	}
	if err := checkSchedules(ix, m); err != nil {
		return err
	}
	if err := checkRoutes(ix, m); err != nil {
		return err
	}
	if err := checkPages(ix, m); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(m.Config)) {
		if !tokenRE.MatchString(k) {
			return ix.Errorf("config."+k, "%q is not a valid config key; use letters, digits and . _ - : / @ +", k)
		}
	}
	return nil
}

// checkCommand validates a native plugin's command: present for kind
// native and only there, bounded, and naming its program either by a bare
// name (found on the worker's PATH), an absolute path, or a path inside the
// module's directory (./worker, bin/worker; never ..).
func checkCommand(ix *index, m *Manifest) error {
	if m.Kind != KindNative {
		if len(m.Command) > 0 {
			return ix.Errorf("command", "only a native plugin has a command; remove it, or write kind: native")
		}
		return nil
	}
	switch {
	case len(m.Command) == 0:
		return ix.Errorf("command", "a native plugin needs the command that starts its worker; add a line like command: python3 main.py")
	case len(m.Command) > maxCommandArgs:
		return ix.Errorf("command", "has %d arguments; the most is %d", len(m.Command), maxCommandArgs)
	case len(m.Actions) == 0:
		return ix.Errorf("actions", "a native plugin declares the actions its worker serves; add actions: [{name: greet}]")
	}
	for i, a := range m.Command {
		p := fmt.Sprintf("command[%d]", i)
		switch {
		case a == "":
			return ix.Errorf(p, "is empty; remove it")
		case len(a) > maxCommandArgLen:
			return ix.Errorf(p, "is %d bytes; the most is %d", len(a), maxCommandArgLen)
		case strings.ContainsFunc(a, func(r rune) bool { return r < ' ' || r == 0x7f }):
			return ix.Errorf(p, "%q contains control characters", a)
		}
	}
	prog := m.Command[0]
	if !strings.HasPrefix(prog, "/") && strings.Contains(prog, "/") {
		clean := path.Clean(prog)
		if clean == ".." || strings.HasPrefix(clean, "../") {
			return ix.Errorf("command[0]", "%q leaves the module's directory; name a program inside it (./worker), on the PATH (python3), or by its absolute path", prog)
		}
	}
	return nil
}

// checkTokens validates a list of roles, permissions or similar names.
func checkTokens(ix *index, path, what string, list []string) error {
	for i, s := range list {
		if !tokenRE.MatchString(s) {
			return ix.Errorf(fmt.Sprintf("%s[%d]", path, i), "%q is not a valid %s name; use letters, digits and . _ - : / @ + (no spaces)", s, what)
		}
	}
	return nil
}

func cleanAbs(p string) string {
	return path.Clean("/" + p)
}

// checkLimits requires set limits to be positive (a negative count reads
// as 0 through limitFields, so it is caught too) and memory to fit a 32-bit
// WebAssembly memory.
func checkLimits(ix *index, base string, l Limits) error {
	for _, f := range limitFields {
		p := base + "." + f.name
		if ix.Has(p) && f.get(l) == 0 {
			return ix.Errorf(p, "must be more than 0; remove the line to leave it unset")
		}
	}
	if l.Memory > 4<<30 {
		return ix.Errorf(base+".memory", "%s is more than 4 GiB, the most a 32-bit WebAssembly memory can address", l.Memory)
	}
	return nil
}

// limitFields lets evaluation and reports treat the limits uniformly.
var limitFields = []struct {
	name   string
	get    func(Limits) uint64
	set    func(*Limits, uint64)
	format func(uint64) string
}{
	{"memory", func(l Limits) uint64 { return uint64(l.Memory) }, func(l *Limits, v uint64) { l.Memory = ByteSize(v) }, func(v uint64) string { return ByteSize(v).String() }},
	{"timeout", func(l Limits) uint64 { return uint64(max(l.Timeout, 0)) }, func(l *Limits, v uint64) { l.Timeout = Duration(v) }, func(v uint64) string { return Duration(v).String() }},
	{"disk", func(l Limits) uint64 { return uint64(l.Disk) }, func(l *Limits, v uint64) { l.Disk = ByteSize(v) }, func(v uint64) string { return ByteSize(v).String() }},
	{"concurrency", func(l Limits) uint64 { return uint64(max(l.Concurrency, 0)) }, func(l *Limits, v uint64) { l.Concurrency = int(v) }, func(v uint64) string { return fmt.Sprint(v) }},
	{"calls_per_minute", func(l Limits) uint64 { return uint64(max(l.CallsPerMinute, 0)) }, func(l *Limits, v uint64) { l.CallsPerMinute = int(v) }, func(v uint64) string { return fmt.Sprint(v) }},
	{"db_rows", func(l Limits) uint64 { return uint64(max(l.DBRows, 0)) }, func(l *Limits, v uint64) { l.DBRows = int(v) }, func(v uint64) string { return fmt.Sprint(v) }},
	{"db_bytes", func(l Limits) uint64 { return uint64(l.DBBytes) }, func(l *Limits, v uint64) { l.DBBytes = ByteSize(v) }, func(v uint64) string { return ByteSize(v).String() }},
}

// didYouMean returns " (did you mean X?)" or "".
func didYouMean(s string, names []string) string {
	if m := suggest(s, names); m != "" {
		return " (did you mean " + m + "?)"
	}
	return ""
}
