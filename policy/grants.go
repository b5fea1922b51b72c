package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/policy/egress"
)

// Mode is how much a module is trusted.
type Mode string

const (
	// ModeTrusted: the module is signed by one of the profile's trusted
	// keys, so the trusted parts of the grants apply.
	ModeTrusted Mode = "trusted"
	// ModeSandboxed: unsigned, or signed by a key the profile does not
	// trust. Only the ordinary grants apply.
	ModeSandboxed Mode = "sandboxed"
)

// Evaluation is what a module gets under a profile: the decision made once
// at load, and consulted by CheckOp on every op.
type Evaluation struct {
	Module     string
	Profile    string
	Mode       Mode
	Signer     string // the trusted key name; "" when unsigned or not trusted
	ModeReason string // why the mode, in words: "signed by trusted key acme-release"

	Requested Capabilities // what the manifest asks for
	Effective Capabilities // requested ∩ granted: what ops may use

	// Limits are the limits to enforce: each requested limit clamped to the
	// granted maximum, an unset one being the maximum itself. Zero means
	// neither side set it, and the host's default applies.
	Limits Limits

	// Refusals lists each requested thing not granted: the signature when
	// one is required, then capabilities in the order of the capability
	// table (the built-in ones in the order of the Capabilities fields,
	// then those registered), then limits.
	Refusals []Refusal

	// Refused is true when the module must not load: something was refused
	// and the profile's on_ungranted is refuse, or the profile requires a
	// signature and the module has no trusted one.
	Refused bool

	targets        map[string][]httpTarget // the effective targets of each Targets capability, parsed once
	addressTargets []string                // see AddressTargets
	injections     []injecting             // the granted targets that inject headers (HTTPInjections)
	propagating    []httpTarget            // the granted targets that opted in to the trace context (PropagatesTrace)
	maxLimits      Limits                  // the granted maximums, for Report
}

// Refusal is one requested thing that was not granted.
type Refusal struct {
	Capability string // what was asked for: "kv", "http https://evil.com:443", "limits.memory 512 MiB"
	Rule       string // which part of the profile decided: "profile minimal: default grant"
	Reason     string // why, and what would change it
}

func (r Refusal) String() string {
	return r.Capability + ": " + r.Reason + " (" + r.Rule + ")"
}

// grantPart is one layer of a profile that applies to a module.
type grantPart struct {
	name string // "default", "modules.hello-go.trusted", ...
	g    *Grant
}

// Evaluate decides what m gets under p. signer is the name of the trusted
// key whose signature over the module verified, or "" when there is none;
// verifying signatures is not Evaluate's job, and a name that is not one of
// the profile's trusted keys counts as unsigned.
//
// Evaluate never fails: a manifest asking for too much yields Refusals, and
// Refused tells whether the module may load at all.
func (p *Profile) Evaluate(m *Manifest, signer string) *Evaluation {
	e := &Evaluation{Module: m.Name, Profile: p.Name, Mode: ModeSandboxed, Requested: union(Capabilities{}, m.Capabilities)}
	trusted := signer != "" && p.trustedKey(signer)
	switch {
	case trusted:
		e.Mode, e.Signer, e.ModeReason = ModeTrusted, signer, "signed by trusted key "+signer
	case signer != "":
		e.ModeReason = fmt.Sprintf("signer %q is not a trusted key of profile %s", signer, p.Name)
	default:
		e.ModeReason = "not signed by a trusted key"
	}

	var base, extra []grantPart // extra: the trusted parts
	add := func(name string, g *Grant) {
		base = append(base, grantPart{name, g})
		if g.Trusted != nil {
			extra = append(extra, grantPart{name + ".trusted", g.Trusted})
		}
	}
	if p.Default != nil {
		add("default", p.Default)
	}
	if g, ok := p.Modules[m.Name]; ok {
		add("modules."+m.Name, &g)
	}
	if g, ok := p.Keys[signer]; ok && trusted {
		add("keys."+signer, &g)
	}
	applied := base
	if trusted {
		applied = append(applied, extra...)
	}
	var granted Capabilities
	for _, part := range applied {
		granted = union(granted, part.g.Capabilities)
	}
	rule := e.rule(applied)

	if p.RequireSignature && !trusted {
		e.Refusals = append(e.Refusals, Refusal{
			Capability: "signature",
			Rule:       "profile " + p.Name + ": require_signature",
			Reason:     e.ModeReason + "; sign the module with one of " + strings.Join(keyNames(p), ", "),
		})
	}

	// check records a refusal when the request is not covered by granted,
	// naming a trusted part that would have covered it.
	check := func(what string, covered func(*Capabilities) bool, reason string) bool {
		if covered(&granted) {
			return true
		}
		r := Refusal{Capability: what, Rule: rule, Reason: reason}
		if !trusted {
			for _, part := range extra {
				if covered(&part.g.Capabilities) {
					r.Rule = "profile " + p.Name + ": " + part.name + " grant"
					r.Reason = "granted only to modules signed by a trusted key"
					if signer != "" {
						r.Reason += "; " + e.ModeReason
					}
					break
				}
			}
		}
		e.Refusals = append(e.Refusals, r)
		return false
	}
	// Each capability of the table, by its shape (shapes.go).
	ev := &evaluator{e: e, p: p, rule: rule, granted: granted, check: check}
	for _, k := range table() {
		k.set(&e.Effective, k.shape.evaluate(ev, k, k.value(&m.Capabilities)))
	}

	for _, f := range limitFields {
		asked := f.get(m.Limits)
		var most uint64
		from := ""
		for _, part := range applied {
			if v := f.get(part.g.Limits); v > most {
				most, from = v, part.name
			}
		}
		v := asked
		switch {
		case asked == 0:
			v = most
		case most != 0 && asked > most:
			v = most
			r := Refusal{
				Capability: "limits." + f.name + " " + f.format(asked),
				Rule:       "profile " + p.Name + ": " + from + " grant",
				Reason:     "exceeds the profile's maximum " + f.format(most),
			}
			if !trusted {
				for _, part := range extra {
					if t := f.get(part.g.Limits); t >= asked {
						r.Reason += "; " + part.name + " allows it for modules signed by a trusted key"
						break
					}
				}
			}
			e.Refusals = append(e.Refusals, r)
		}
		f.set(&e.Limits, v)
		f.set(&e.maxLimits, most)
	}

	for _, r := range e.Refusals {
		if r.Capability == "signature" || p.OnUngranted != OnUngrantedDenyAtCall {
			e.Refused = true
		}
	}
	return e
}

// rule names the profile layers that made up the grant.
func (e *Evaluation) rule(parts []grantPart) string {
	if len(parts) == 0 {
		return "profile " + e.Profile + ": no grant applies to this module"
	}
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.name
	}
	return "profile " + e.Profile + ": " + strings.Join(names, " + ") + " grant"
}

func keyNames(p *Profile) []string {
	var names []string
	for _, k := range p.TrustedKeys {
		names = append(names, k.Name)
	}
	return names
}

// mergeHeaders adds b's injected headers to a's, target by target; where
// both name a header of one target, b's value wins (b is the later layer).
func mergeHeaders(a, b map[string]map[string]string) map[string]map[string]string {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := map[string]map[string]string{}
	for _, m := range []map[string]map[string]string{a, b} {
		for target, hs := range m {
			if out[target] == nil {
				out[target] = map[string]string{}
			}
			for k, v := range hs {
				for old := range out[target] {
					if strings.EqualFold(old, k) {
						delete(out[target], old)
					}
				}
				out[target][k] = v
			}
		}
	}
	return out
}

// mergeFiles adds b's file grants to a's: a path granted read-only and
// read-write is kept read-write.
func mergeFiles(a, b []FileGrant) []FileGrant {
	out := slices.Clone(a)
	for _, g := range b {
		i := slices.IndexFunc(out, func(o FileGrant) bool { return o.Path == g.Path })
		switch {
		case i < 0:
			out = append(out, g)
		case g.RW:
			out[i].RW = true
		}
	}
	return out
}

// uncoveredReason says why no granted target covers the requested r: none
// reaches its server, or those that do grant only narrower paths.
func uncoveredReason(granted []string, r httpTarget) string {
	var narrower []string
	for _, s := range granted {
		if g, err := parseTarget(s); err == nil && g.coversServer(r) && !g.coversPath(r) {
			narrower = append(narrower, s)
		}
	}
	if len(narrower) > 0 {
		return fmt.Sprintf("the profile grants only the paths under %s; ask for one of them (or a path below it) in %s", list(narrower), ManifestFile)
	}
	return fmt.Sprintf("no granted target covers it (granted: %s)", list(granted))
}

// AddressTargets are the effective HTTP targets, as scheme://host:port
// (without a path prefix), whose host is an IP address that a granted
// target names itself: the only targets through
// which a request may reach a loopback, private, link-local, metadata or
// other special address (package egress). The manifest asking for
// http://127.0.0.1:8080 is not enough, nor is a grant of "*",
// "http://*:8080" or a host name that resolves there: the operator's
// grant must write the address, like http://127.0.0.1:8080 (that port) or
// http://127.0.0.1:* (any port).
func (e *Evaluation) AddressTargets() []string { return e.addressTargets }

// addressClass is egress.Classify of a canonical target host that is an
// IP address: "" for a public unicast address, else its class.
func addressClass(h string) string {
	a, err := netip.ParseAddr(h)
	if err != nil {
		return ""
	}
	return egress.Classify(a)
}

// manifestAddressClass reports whether an address of class may be reached
// because the manifest names it, under Profile.ManifestAddresses: the
// developer's own machine and network, never link-local or metadata
// addresses (egress's classes are exact strings: "unique-local (cloud
// metadata)" is not "unique-local").
func manifestAddressClass(class string) bool {
	return class == "loopback" || class == "private" || class == "unique-local"
}

// addressReason says why a special address the profile covers without
// naming it is refused, and the fix: a grant that names it.
func addressReason(p *Profile, r httpTarget, class string) string {
	reason := fmt.Sprintf("%s is %s %s address; a grant reaches such an address only by naming it, and no grant of profile %s does (it covers the target with a wildcard or name); grant %s in the profile",
		r.host, indefinite(class), class, p.Name, r.origin())
	if manifestAddressClass(class) && !p.ManifestAddresses {
		reason += ", or, on a developer's own machine, set manifest_addresses: true in it (the dev profile does)"
	}
	return reason
}

func indefinite(s string) string {
	if s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an"
	}
	return "a"
}

// addressNamed reports whether r's host is an IP address that a granted
// target covering r writes literally.
func addressNamed(granted []string, r httpTarget) bool {
	if r.any || !isAddress(r.host) {
		return false
	}
	for _, s := range granted {
		if g, err := parseTarget(s); err == nil && !g.any && g.host == r.host && g.covers(r) {
			return true
		}
	}
	return false
}

func targetCovered(granted []string, r httpTarget) bool {
	for _, s := range granted {
		if g, err := parseTarget(s); err == nil && g.covers(r) {
			return true
		}
	}
	return false
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	if len(s) > 4 {
		return strings.Join(s[:4], ", ") + ", …"
	}
	return strings.Join(s, ", ")
}

// CheckOp decides whether the module may perform op now. op is a name of
// the op table (DeclareOp); target is what the op acts on where its
// capability is granted per target (CapabilityTarget): the collection for
// db.*, the URL for http.fetch, the model for ai.*; other ops ignore it.
//
// It returns nil or a *DeniedError whose Rule says whether the manifest did
// not ask (fix: request it in moat.yaml) or the profile did not grant (fix:
// grant it, or accept the denial). The host fills in Action and Principal.
//
// CheckOp runs on every op, so the allowed path does no more than a map
// lookup and a comparison (plus parsing the URL for http.fetch). It does not
// modify e, so one Evaluation may serve concurrent invocations.
func (e *Evaluation) CheckOp(op, target string) error {
	k, ok := opRow(op)
	if !ok {
		known := KnownOps()
		reason := fmt.Sprintf("no op is named %q; known ops are %s", op, strings.Join(known, ", "))
		if m := suggest(op, known); m != "" {
			reason = fmt.Sprintf("no op is named %q; did you mean %s?", op, m)
		}
		return &DeniedError{Module: e.Module, Op: op, Rule: "unknown op", Reason: reason}
	}
	if k == nil {
		return nil
	}
	c := k.shape.checkOp(e, k, op, target)
	switch {
	case c.denied != nil:
		return c.denied
	case c.allowed:
		return nil
	case !c.asked:
		return &DeniedError{Module: e.Module, Op: op, Rule: "manifest capabilities",
			Reason: fmt.Sprintf("%s is not among the capabilities the module requests; add %s under capabilities in %s", c.what, c.ask, ManifestFile)}
	}
	d := &DeniedError{Module: e.Module, Op: op, Rule: "profile " + e.Profile,
		Reason: c.what + " was requested but the profile does not grant it"}
	for _, r := range e.Refusals {
		if r.Capability == c.what || c.refused != nil && c.refused(r.Capability) {
			d.Rule, d.Reason = r.Rule, c.what+" was requested but not granted: "+r.Reason
			break
		}
	}
	return d
}

// Authorize decides whether who may invoke action of module m: the action
// must be declared in the manifest, who must hold at least one of its roles
// (when it lists any), and who's roles must together hold every permission
// it lists, according to p's role_permissions. A WASI command has no
// actions; it is authorized with action "".
//
// Confirmation (Action.Confirm, Profile.SensitiveOps) is checked by the
// host, which holds the tokens. Authorize returns nil or a *DeniedError.
func (p *Profile) Authorize(m *Manifest, action string, who Principal) error {
	user := who.User + "@" + who.Org
	d := &DeniedError{Module: m.Name, Action: action, Principal: user}
	if err := who.Validate(); err != nil {
		d.Rule, d.Reason = "principal", err.Error()
		return d
	}
	if action == "" && m.Kind == KindWASICommand {
		return nil
	}
	i := m.actionIndex(action)
	if i < 0 {
		names := make([]string, len(m.Actions))
		for j, a := range m.Actions {
			names[j] = a.Name
		}
		d.Rule = "manifest actions"
		if len(names) == 0 {
			d.Reason = fmt.Sprintf("action %q is not declared: %s declares no actions", action, manifestName(m))
		} else {
			d.Reason = fmt.Sprintf("action %q is not declared in %s%s; declared actions are %s", action, manifestName(m), didYouMean(action, names), strings.Join(names, ", "))
		}
		return d
	}
	a := &m.Actions[i]
	return p.checkAccess(d, fmt.Sprintf("manifest actions[%d]", i), "", a.Roles, a.Permissions, who)
}

// checkAccess is the one rule of access requirements, an action's and a
// page's alike: who must hold at least one of roles (when there are any),
// and who's roles must together hold every one of perms by p's
// role_permissions. rule names the manifest's entry ("manifest
// actions[0]"); what, when not empty, starts the reason ("page notes").
// It returns nil or d, completed.
func (p *Profile) checkAccess(d *DeniedError, rule, what string, roles, perms []string, who Principal) error {
	user := who.User + "@" + who.Org
	prefix := ""
	if what != "" {
		prefix = what + " "
	}
	if len(roles) > 0 && !slices.ContainsFunc(roles, who.HasRole) {
		d.Rule = rule + ".roles"
		has := "has no roles"
		if len(who.Roles) > 0 {
			has = fmt.Sprintf("has %v", who.Roles)
		}
		d.Reason = fmt.Sprintf("%srequires one of roles %v; %s %s", prefix, roles, user, has)
		return d
	}
	if len(perms) > 0 {
		held := p.Permissions(who.Roles)
		for _, perm := range perms {
			if !slices.Contains(held, perm) {
				name := "(none)"
				if p != nil {
					name = p.Name
				}
				d.Rule = rule + ".permissions"
				if len(who.Roles) == 0 {
					d.Reason = fmt.Sprintf("%srequires permission %s; %s has no roles, so no permissions in profile %s", prefix, perm, user, name)
				} else {
					d.Reason = fmt.Sprintf("%srequires permission %s, which none of %s's roles %v grants in profile %s", prefix, perm, user, who.Roles, name)
				}
				return d
			}
		}
	}
	return nil
}

func manifestName(m *Manifest) string {
	if m.File != "" {
		return m.File
	}
	return ManifestFile
}

// DeniedError is a refusal by policy at call time: an op the module may not
// perform, or an action the caller may not invoke. Rule names the manifest
// or profile entry that decided, so the message says where to look.
type DeniedError struct {
	Module    string
	Action    string // "" for an op checked outside an invocation
	Op        string // "" for an action refused before it ran
	Principal string // "user@org", when known
	Rule      string
	Reason    string
}

// Error returns one line, like
//
//	denied: module hello-go action greet: requires one of roles [admin]; ann@acme has [user] (rule: manifest actions[0].roles)
func (e *DeniedError) Error() string {
	var b strings.Builder
	b.WriteString("denied")
	if e.Module != "" {
		b.WriteString(": module " + e.Module)
	}
	if e.Action != "" {
		b.WriteString(" action " + e.Action)
	}
	if e.Op != "" {
		b.WriteString(" op " + e.Op)
	}
	b.WriteString(": " + e.Reason)
	if e.Rule != "" {
		b.WriteString(" (rule: " + e.Rule + ")")
	}
	return b.String()
}

// Code classifies the error for the wire: abi.CodeDenied.
func (e *DeniedError) Code() abi.Code { return abi.CodeDenied }

// ErrorCode is Code, for abi.CodeOf.
func (e *DeniedError) ErrorCode() abi.Code { return e.Code() }
