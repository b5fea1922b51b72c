package policy

import (
	"bytes"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// Profile is the operator's side of policy: what modules may have on this
// host. A manifest asks; the profile grants; Evaluate intersects the two.
//
// Grants are layered, and layers only add: Default applies to every module,
// Modules[name] adds to it for one module, Keys[key] adds for modules signed
// by that trusted key, and each layer's Trusted part adds only when the
// module is signed by any trusted key. Nothing subtracts, so reading a
// profile top to bottom tells the whole story for a module.
type Profile struct {
	Name string `yaml:"name"`

	// RequireSignature refuses every module not signed by one of
	// TrustedKeys.
	RequireSignature bool `yaml:"require_signature,omitempty"`

	// OnUngranted says what happens when a manifest asks for more than the
	// profile grants: OnUngrantedRefuse (the default) refuses the module at
	// load, so that the gap is found when deploying rather than in
	// production; OnUngrantedDenyAtCall loads it and denies the ungranted
	// ops when they are called, for modules that degrade gracefully.
	OnUngranted string `yaml:"on_ungranted,omitempty"`

	// ConfirmTTL is how long a confirmation token stays valid (default
	// 10m).
	ConfirmTTL Duration `yaml:"confirm_ttl,omitempty"`

	// ConfirmSelfApprove lets an approver (a holder of the server's
	// confirm.approve permission) approve or deny its own confirmations
	// through the approvers' path. Off by default: four-eyes approval
	// means a second person looks at what the first asked for.
	ConfirmSelfApprove bool `yaml:"confirm_self_approve,omitempty"`

	// SensitiveOps are ops that may run only within a confirmed
	// invocation, whatever the action says.
	SensitiveOps []string `yaml:"sensitive_ops,omitempty"`

	// TrustedKeys are the minisign public keys whose signatures make a
	// module trusted. Names are what Keys, Evaluation.Signer and reports
	// use.
	TrustedKeys []TrustedKey `yaml:"trusted_keys,omitempty"`

	// ManifestAddresses lets a loopback or private address (127.0.0.0/8,
	// ::1, 10/8, 172.16/12, 192.168/16, fc00::/7) that a module's manifest
	// writes literally as an http target, like http://127.0.0.1:8080, be
	// reached when a grant of this profile covers the target, a wildcard
	// included, as if the grant named the address. It is for a
	// developer's own machine (the dev profile), where the manifest's
	// author and the machine's owner are one person; elsewhere the
	// operator's grant must name such an address itself, so that a
	// wildcard grant for the internet never reaches the host's own
	// services. A manifest's http://localhost:PORT stands for 127.0.0.1
	// and ::1 at PORT. Link-local, cloud-metadata and other special addresses
	// are never reached this way, nor is a host name that resolves to a
	// special address, nor a target the manifest writes with a wildcard.
	ManifestAddresses bool `yaml:"manifest_addresses,omitempty"`

	// RolePermissions maps a role to the permissions it holds, for actions
	// that require permissions.
	RolePermissions map[string][]string `yaml:"role_permissions,omitempty"`

	Default *Grant           `yaml:"default,omitempty"` // for every module
	Modules map[string]Grant `yaml:"modules,omitempty"` // by module name
	Keys    map[string]Grant `yaml:"keys,omitempty"`    // by trusted key name

	// Exec bounds the code-execution jobs (moat serve's POST /v1/runs and
	// the Piston-compatible execute) of the organizations the profile
	// applies to: each limit is the most a job may ask for, and what a
	// job asking for none gets. A limit left out takes
	// DefaultExecLimits'. See ExecMaxima.
	Exec ExecLimits `yaml:"exec,omitempty"`

	// ExecRoles are the roles whose keys may run code of their own: POST
	// /v1/runs, sessions (and E2B's sandboxes on them), and MCP's run_code
	// and session tools, which AuthorizeExec decides alike. Empty: every
	// key of the organization may, as before the setting existed.
	ExecRoles []string `yaml:"exec_roles,omitempty"`

	// File is the path the profile was read from, for messages.
	File string `yaml:"-"`
}

// Values of Profile.OnUngranted.
const (
	OnUngrantedRefuse     = "refuse"
	OnUngrantedDenyAtCall = "deny_at_call"
)

// DefaultConfirmTTL is the lifetime of a confirmation token when the profile
// does not set confirm_ttl: long enough to read a prompt, short enough that a
// forgotten token is useless.
const DefaultConfirmTTL = Duration(10 * time.Minute)

// ExecLimits are the limits of one code-execution job: the run stage's
// wall clock and memory, the build stage's wall clock, the bytes kept of
// each of stdout and stderr, and what the run may keep in its scratch
// directory (its working directory): bytes and files.
type ExecLimits struct {
	Timeout        Duration `yaml:"timeout,omitempty"`
	CompileTimeout Duration `yaml:"compile_timeout,omitempty"`
	Memory         ByteSize `yaml:"memory,omitempty"`
	Output         ByteSize `yaml:"output,omitempty"` // per stream
	Scratch        ByteSize `yaml:"scratch,omitempty"`
	ScratchFiles   int      `yaml:"scratch_files,omitempty"`
}

// DefaultExecLimits are a profile's exec limits where it sets none: those
// of the languages executor (a 10 s run, a 60 s build, 256 MiB, 1 MiB of
// each output stream). A client may ask for less, never for more.
var DefaultExecLimits = ExecLimits{
	Timeout:        Duration(10 * time.Second),
	CompileTimeout: Duration(60 * time.Second),
	Memory:         256 << 20,
	Output:         1 << 20,
	Scratch:        64 << 20, // host.DefaultScratchBytes
	ScratchFiles:   1024,     // host.DefaultScratchFiles
}

// MaxExecOutput bounds exec.output: a server holds a job's output in
// memory to answer with it.
const MaxExecOutput = ByteSize(256 << 20)

// ExecMaxima returns the profile's exec limits with DefaultExecLimits for
// those it leaves out; a nil profile has the defaults.
func (p *Profile) ExecMaxima() ExecLimits {
	l := DefaultExecLimits
	if p == nil {
		return l
	}
	if p.Exec.Timeout > 0 {
		l.Timeout = p.Exec.Timeout
	}
	if p.Exec.CompileTimeout > 0 {
		l.CompileTimeout = p.Exec.CompileTimeout
	}
	if p.Exec.Memory > 0 {
		l.Memory = p.Exec.Memory
	}
	if p.Exec.Output > 0 {
		l.Output = p.Exec.Output
	}
	if p.Exec.Scratch > 0 {
		l.Scratch = p.Exec.Scratch
	}
	if p.Exec.ScratchFiles > 0 {
		l.ScratchFiles = p.Exec.ScratchFiles
	}
	return l
}

// TrustedKey is a named minisign public key: Key is the base64 line
// starting with "RW" from a minisign .pub file.
type TrustedKey struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

// Grant is what a profile layer gives: capabilities, and the maximum of each
// limit. Trusted is given on top only to modules signed by a trusted key.
type Grant struct {
	Capabilities Capabilities `yaml:"capabilities,omitempty"`
	Limits       Limits       `yaml:"limits,omitempty"`
	Trusted      *Grant       `yaml:"trusted,omitempty"`
}

//go:embed profiles/*.yaml
var builtinFS embed.FS

// BuiltinProfiles returns the names of the profiles compiled into moat, in
// order.
func BuiltinProfiles() []string {
	entries, _ := fs.ReadDir(builtinFS, "profiles")
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// LoadProfile loads a built-in profile by name ("minimal", "dev") or a
// profile file by path. Anything containing a path separator or ending in
// .yaml or .yml is a path, so "./minimal.yaml" reads the local file even
// though a built-in of that name exists.
func LoadProfile(nameOrPath string) (*Profile, error) {
	if strings.ContainsAny(nameOrPath, `/\`) || strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml") {
		data, err := os.ReadFile(nameOrPath)
		if err != nil {
			return nil, fmt.Errorf("reading profile: %w", err)
		}
		return ParseProfile(nameOrPath, data)
	}
	data, err := builtinFS.ReadFile("profiles/" + nameOrPath + ".yaml")
	if err != nil {
		names := BuiltinProfiles()
		return nil, fmt.Errorf("no built-in profile %q%s; built-in profiles are %s, or give the path of a profile file (like ./%s.yaml)",
			nameOrPath, didYouMean(nameOrPath, names), strings.Join(names, ", "), nameOrPath)
	}
	return ParseProfile("builtin/"+nameOrPath+".yaml", data)
}

// ParseProfile parses and validates a profile. file names the source in
// errors and is stored in Profile.File. Defaults are filled in: OnUngranted
// and ConfirmTTL.
//
// Every error is a *FileError naming the file, line and field, and saying how
// to fix it.
func ParseProfile(file string, data []byte) (*Profile, error) {
	var p Profile
	ix, err := decode(file, data, "a profile needs at least name:", &p)
	if err != nil {
		return nil, err
	}
	if err := p.check(ix); err != nil {
		return nil, err
	}
	p.File = file
	return &p, nil
}

var onUngrantedValues = []string{OnUngrantedRefuse, OnUngrantedDenyAtCall}

func (p *Profile) check(ix *index) error {
	switch {
	case p.Name == "":
		return ix.Errorf("name", "required; add a line like name: production (%s)", nameChars)
	case !moduleNameRE.MatchString(p.Name):
		return ix.Errorf("name", "%q is not a valid profile name; %s", p.Name, strings.Replace(moduleNameRule, "hello-go", "production", 1))
	}
	if p.OnUngranted == "" {
		p.OnUngranted = OnUngrantedRefuse
	} else if !slices.Contains(onUngrantedValues, p.OnUngranted) {
		return ix.Errorf("on_ungranted", "%q is not a choice%s; write refuse (refuse the module at load) or deny_at_call (load it, deny the op when called)", p.OnUngranted, didYouMean(p.OnUngranted, onUngrantedValues))
	}
	if ix.Has("confirm_ttl") && p.ConfirmTTL == 0 {
		return ix.Errorf("confirm_ttl", "must be more than 0; remove the line for the default 10m")
	}
	if p.ConfirmTTL == 0 {
		p.ConfirmTTL = DefaultConfirmTTL
	}
	ops := KnownOps()
	for i, op := range p.SensitiveOps {
		if _, ok := OpCapability(op); !ok {
			return ix.Errorf(fmt.Sprintf("sensitive_ops[%d]", i), "%q is not an op of this host's op table%s; known ops are %s", op, didYouMean(op, ops), strings.Join(ops, ", "))
		}
	}
	names := map[string]int{}
	keys := map[string]int{}
	for i, k := range p.TrustedKeys {
		path := fmt.Sprintf("trusted_keys[%d]", i)
		switch {
		case k.Name == "":
			return ix.Errorf(path+".name", "a trusted key needs a name; add name: acme-release")
		case !moduleNameRE.MatchString(k.Name):
			return ix.Errorf(path+".name", "%q is not a valid key name; %s", k.Name, strings.Replace(moduleNameRule, "hello-go", "acme-release", 1))
		}
		if j, dup := names[k.Name]; dup {
			return ix.Errorf(path+".name", "%q is already the name of trusted_keys[%d]; key names must be unique", k.Name, j)
		}
		names[k.Name] = i
		if k.Key == "" {
			return ix.Errorf(path+".key", "required; paste the base64 line starting with RW from the key's minisign .pub file")
		}
		if !isMinisignPublicKey(k.Key) {
			return ix.Errorf(path+".key", "not a minisign public key (expected the base64 line starting with RW from a .pub file)")
		}
		if j, dup := keys[k.Key]; dup {
			return ix.Errorf(path+".key", "the same key as trusted_keys[%d]; list each key once", j)
		}
		keys[k.Key] = i
	}
	if p.RequireSignature && len(p.TrustedKeys) == 0 {
		return ix.Errorf("require_signature", "true, but trusted_keys is empty, so no module could load; add a trusted key or set require_signature: false")
	}
	if err := checkTokens(ix, "exec_roles", "role", p.ExecRoles); err != nil {
		return err
	}
	for _, role := range slices.Sorted(maps.Keys(p.RolePermissions)) {
		path := "role_permissions." + role
		if !tokenRE.MatchString(role) {
			return ix.Errorf(path, "%q is not a valid role name; use letters, digits and . _ - : / @ + (no spaces)", role)
		}
		if err := checkTokens(ix, path, "permission", p.RolePermissions[role]); err != nil {
			return err
		}
	}
	if p.Default != nil {
		if err := checkGrant(ix, "default", p.Default, false); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.Modules)) {
		path := "modules." + name
		if !moduleNameRE.MatchString(name) {
			return ix.Errorf(path, "%q is not a valid module name; %s", name, moduleNameRule)
		}
		g := p.Modules[name]
		if err := checkGrant(ix, path, &g, false); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"timeout", p.Exec.Timeout > 0}, {"compile_timeout", p.Exec.CompileTimeout > 0}, {"memory", p.Exec.Memory > 0}, {"output", p.Exec.Output > 0},
		{"scratch", p.Exec.Scratch > 0}, {"scratch_files", p.Exec.ScratchFiles > 0}} {
		if ix.Has("exec."+f.name) && !f.set {
			return ix.Errorf("exec."+f.name, "must be more than 0; remove the line for the default")
		}
	}
	if p.Exec.Output > MaxExecOutput {
		return ix.Errorf("exec.output", "%s is more than %s: the server holds a job's output in memory", p.Exec.Output, MaxExecOutput)
	}
	keyNames := make([]string, len(p.TrustedKeys))
	for i, k := range p.TrustedKeys {
		keyNames[i] = k.Name
	}
	for _, name := range slices.Sorted(maps.Keys(p.Keys)) {
		path := "keys." + name
		if _, ok := names[name]; !ok {
			if len(keyNames) == 0 {
				return ix.Errorf(path, "no trusted key is named %s, and trusted_keys is empty; add it to trusted_keys first", name)
			}
			return ix.Errorf(path, "no trusted key is named %s%s; trusted keys are %s", name, didYouMean(name, keyNames), strings.Join(keyNames, ", "))
		}
		g := p.Keys[name]
		if err := checkGrant(ix, path, &g, false); err != nil {
			return err
		}
	}
	return nil
}

func checkGrant(ix *index, path string, g *Grant, inTrusted bool) error {
	if err := checkCaps(ix, path+".capabilities", &g.Capabilities, true); err != nil {
		return err
	}
	if err := checkLimits(ix, path+".limits", g.Limits); err != nil {
		return err
	}
	if g.Trusted != nil {
		if inTrusted {
			return ix.Errorf(path+".trusted", "trusted cannot be nested inside trusted; move these lines up one level")
		}
		return checkGrant(ix, path+".trusted", g.Trusted, true)
	}
	return nil
}

// isMinisignPublicKey checks the layout of a minisign public key: base64 of
// the algorithm "Ed", an 8-byte key id and a 32-byte Ed25519 key. Checking
// the layout here catches a pasted secret key, signature or comment line
// when the profile is loaded, not when the first signed module arrives.
func isMinisignPublicKey(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && len(b) == 42 && bytes.HasPrefix(b, []byte("Ed"))
}

// IsSensitive reports whether op needs a confirmed invocation.
func (p *Profile) IsSensitive(op string) bool {
	return p != nil && slices.Contains(p.SensitiveOps, op)
}

// AuthorizeExec decides whether who may run code of its own (jobs and
// sessions): one of ExecRoles, or anyone when the profile lists none. It
// is the one rule behind the code-execution routes and behind whether an
// MCP client is shown run_code and the session tools.
func (p *Profile) AuthorizeExec(who Principal) error {
	d := &DeniedError{Principal: who.User + "@" + who.Org}
	if err := who.Validate(); err != nil {
		d.Rule, d.Reason = "principal", err.Error()
		return d
	}
	if p == nil || len(p.ExecRoles) == 0 || slices.ContainsFunc(p.ExecRoles, who.HasRole) {
		return nil
	}
	has := "has no roles"
	if len(who.Roles) > 0 {
		has = fmt.Sprintf("has %v", who.Roles)
	}
	d.Rule = "profile " + p.Name + " exec_roles"
	d.Reason = fmt.Sprintf("running code requires one of roles %v; %s %s", p.ExecRoles, d.Principal, has)
	return d
}

// Permissions returns the permissions the roles hold together, sorted and
// without duplicates. Roles the profile does not mention hold none.
func (p *Profile) Permissions(roles []string) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, r := range roles {
		out = append(out, p.RolePermissions[r]...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// trustedKey reports whether name is one of the profile's trusted keys.
func (p *Profile) trustedKey(name string) bool {
	return slices.ContainsFunc(p.TrustedKeys, func(k TrustedKey) bool { return k.Name == name })
}

// eachGrant calls visit for every grant of p, wherever it applies: the
// default, each module's and each key's, and the trusted part of each.
// What a host serving modules under p may ever have to reach
// (FileGrants, HTTPTargets) is a walk over them.
func (p *Profile) eachGrant(visit func(*Grant)) {
	var walk func(g *Grant)
	walk = func(g *Grant) {
		if g == nil {
			return
		}
		visit(g)
		walk(g.Trusted)
	}
	walk(p.Default)
	for _, g := range p.Modules {
		walk(&g)
	}
	for _, g := range p.Keys {
		walk(&g)
	}
}
