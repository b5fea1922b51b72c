package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/policy/egress"
	"gopkg.in/yaml.v3"
)

// shape is what one Shape means, written once: every capability of the
// shape goes through it. Values are a capability's value as
// capability.value returns it: bool, []string, HTTPCaps or []FileGrant.
type shape interface {
	// empty is the unset value.
	empty() any
	// zero reports whether v asks for or grants nothing.
	zero(v any) bool
	// union adds b to a (a later profile layer to an earlier one).
	union(a, b any) any
	// check validates v written at path; grant is true in a profile.
	check(ix *index, path string, k *capability, v any, grant bool) error
	// evaluate intersects the request req with ev's grant, records a
	// refusal for each part not covered, and returns the effective value.
	evaluate(ev *evaluator, k *capability, req any) any
	// checkOp decides a call of op on target (CheckOp).
	checkOp(e *Evaluation, k *capability, op, target string) opCheck
	// report writes the rows of the request req (Report).
	report(r *reporter, k *capability, req any)
}

var (
	_ shape = flagShape{}
	_ shape = namedShape{}
	_ shape = targetsShape{}
	_ shape = pathsShape{}
)

// opCheck is a shape's decision on a call, for CheckOp's common tail.
type opCheck struct {
	allowed bool
	denied  *DeniedError // a refusal of the shape's own: no target, a bad URL, a path outside a prefix
	asked   bool         // the manifest asked for what the call needs
	what    string       // the thing, as a Refusal names it: "db orders"
	ask     string       // what to write in moat.yaml: "db: [orders]"
	// refused matches a refusal's Capability beyond what itself (a
	// refused http target covering the URL); nil for none.
	refused func(capability string) bool
}

// evaluator is Evaluate's state, shared by the shapes.
type evaluator struct {
	e       *Evaluation
	p       *Profile
	rule    string
	granted Capabilities
	// check records a refusal when the request is not covered by the
	// grant, naming a trusted part that would have covered it.
	check func(what string, covered func(*Capabilities) bool, reason string) bool
}

// --- Flag ---------------------------------------------------------------

type flagShape struct{}

func (flagShape) empty() any                                         { return false }
func (flagShape) zero(v any) bool                                    { return !v.(bool) }
func (flagShape) union(a, b any) any                                 { return a.(bool) || b.(bool) }
func (flagShape) check(*index, string, *capability, any, bool) error { return nil }

func (flagShape) evaluate(ev *evaluator, k *capability, req any) any {
	return req.(bool) && ev.check(k.Name, func(c *Capabilities) bool { return k.value(c).(bool) }, "the profile does not grant "+k.Name)
}

func (flagShape) checkOp(e *Evaluation, k *capability, op, target string) opCheck {
	if k.flag(&e.Effective) {
		return opCheck{allowed: true}
	}
	return opCheck{asked: k.flag(&e.Requested), what: k.Name, ask: k.Name + ": true"}
}

func (flagShape) report(r *reporter, k *capability, req any) {
	if req.(bool) {
		r.row(k.Name)
	}
}

// --- Named --------------------------------------------------------------

type namedShape struct{}

func (namedShape) empty() any      { return []string(nil) }
func (namedShape) zero(v any) bool { return len(v.([]string)) == 0 }

func (namedShape) union(a, b any) any { return mergeNames(a.([]string), b.([]string)) }

// mergeNames adds y's new names to x's.
func mergeNames(x, y []string) []string {
	out := slices.Clone(x)
	for _, s := range y {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func (namedShape) check(ix *index, path string, k *capability, v any, grant bool) error {
	names := v.([]string)
	if err := checkDuplicates(ix, path, names); err != nil {
		return err
	}
	for i, name := range names {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case name == AllCollections && (grant || k.AskAll):
		case name == AllCollections:
			return ix.Errorf(p, `a module names the %ss it uses; "*" is only for profiles`, k.Target)
		case k.Valid != nil:
			if err := k.Valid(name); err != nil {
				return ix.Errorf(p, "%v", err)
			}
		case !collectionRE.MatchString(name):
			return ix.Errorf(p, "%q is not a %s name; use 1-64 characters a-z 0-9 _", name, k.Target)
		}
	}
	return nil
}

func (namedShape) evaluate(ev *evaluator, k *capability, req any) any {
	var eff []string
	granted := k.value(&ev.granted).([]string)
	for _, name := range req.([]string) {
		if ev.check(k.Name+" "+name, func(c *Capabilities) bool { return nameCovered(k.value(c).([]string), name) },
			fmt.Sprintf("%s %s is not granted (granted: %s)", k.Target, name, list(granted))) {
			eff = append(eff, name)
		}
	}
	return eff
}

// nameCovered: a name is granted by name or by "*".
func nameCovered(granted []string, name string) bool {
	return slices.Contains(granted, name) || slices.Contains(granted, AllCollections)
}

func (namedShape) checkOp(e *Evaluation, k *capability, op, target string) opCheck {
	if target == "" {
		return opCheck{denied: &DeniedError{Module: e.Module, Op: op, Rule: "op " + op, Reason: op + " names no " + k.Target}}
	}
	// Only an AskAll capability can hold "*" in a request, and so in
	// the effective grant (see Collections).
	covered := func(l []string) bool {
		return slices.Contains(l, target) || k.AskAll && slices.Contains(l, AllCollections)
	}
	if covered(k.names(&e.Effective)) {
		return opCheck{allowed: true}
	}
	return opCheck{asked: covered(k.names(&e.Requested)), what: k.Name + " " + target, ask: k.Name + ": [" + target + "]"}
}

func (namedShape) report(r *reporter, k *capability, req any) {
	for _, item := range req.([]string) {
		r.row(k.Name + " " + item)
	}
}

// --- Targets ------------------------------------------------------------

type targetsShape struct{}

func (targetsShape) empty() any      { return HTTPCaps{} }
func (targetsShape) zero(v any) bool { return len(v.(HTTPCaps).Targets) == 0 }

func (targetsShape) union(a, b any) any {
	x, y := a.(HTTPCaps), b.(HTTPCaps)
	return HTTPCaps{Targets: mergeNames(x.Targets, y.Targets), AllowAny: x.AllowAny || y.AllowAny, Headers: mergeHeaders(x.Headers, y.Headers),
		PropagateTrace: mergeNames(x.PropagateTrace, y.PropagateTrace)}
}

func (targetsShape) check(ix *index, path string, k *capability, v any, grant bool) error {
	h := v.(HTTPCaps)
	tp := path + ".targets"
	if n := ix.Value(path); n != nil && n.Kind == yaml.SequenceNode {
		tp = path
	}
	if err := checkDuplicates(ix, tp, h.Targets); err != nil {
		return err
	}
	for i, s := range h.Targets {
		p := fmt.Sprintf("%s[%d]", tp, i)
		item := p
		if ix.Has(p + ".url") {
			p += ".url"
		}
		t, err := parseTarget(s)
		if err != nil {
			return ix.Errorf(p, "%v", err)
		}
		if t.wild() && !h.AllowAny {
			return ix.Errorf(p, "%q allows any server; if that is intended, use the mapping form and say so: %s: {targets: [%q], allow_any: true}", s, k.Name, s)
		}
		hs, has := h.Headers[s]
		switch {
		case has && !grant:
			return ix.Errorf(item+".headers", "a manifest asks for URLs only: the headers a request carries from the operator (a secret as Authorization) are the operator's to write, in the profile's grant; write the target alone, like %s", s)
		case has && t.wild():
			return ix.Errorf(item+".headers", "%s matches any server, so its headers would go to every server; inject them under the target of the server they are for", s)
		case has:
			if err := checkInjected(ix, item+".headers", hs); err != nil {
				return err
			}
		}
		if slices.Contains(h.PropagateTrace, s) {
			switch {
			case !grant:
				return ix.Errorf(item+".propagate_trace", "a manifest asks for URLs only: whether a server receives the trace context is the operator's choice, in the profile's grant; write the target alone, like %s", s)
			case t.wild():
				return ix.Errorf(item+".propagate_trace", "%s matches any server, so the trace context would go to every server; set propagate_trace under the target of the server that should receive it", s)
			}
		}
	}
	return nil
}

// evaluate grants each requested target a granted one covers. A target
// whose host is a special address (loopback, private, metadata, ...) is
// reached only when a grant names the address (AddressTargets) or, on a
// developer's profile, when the manifest names a loopback or private one
// (ManifestAddresses). A grant that covers it otherwise, a wildcard, is a
// refusal here, so that policy check, CheckOp and the connection's address
// check give one answer.
//
// The http capability is the one the host's outbound client serves, so
// only its named addresses and injected headers are recorded for
// AddressTargets and HTTPInjections.
func (targetsShape) evaluate(ev *evaluator, k *capability, req any) any {
	e, p := ev.e, ev.p
	var eff HTTPCaps
	var addresses []string
	granted := k.value(&ev.granted).(HTTPCaps)
	for _, s := range req.(HTTPCaps).Targets {
		what := k.Name + " " + s
		r, err := parseTarget(s)
		if err != nil { // ParseManifest rejects these; a hand-built manifest may not
			e.Refusals = append(e.Refusals, Refusal{Capability: what, Rule: "manifest", Reason: err.Error()})
			continue
		}
		if !ev.check(what, func(c *Capabilities) bool { return targetCovered(k.value(c).(HTTPCaps).Targets, r) }, uncoveredReason(granted.Targets, r)) {
			continue
		}
		named := addressNamed(granted.Targets, r)
		if r.host == "localhost" {
			// A name of this machine's loopback: a name never reaches a
			// special address, so the target would be granted and every
			// connection refused. On a developer's profile it stands for
			// the loopback addresses it names; elsewhere it is refused
			// here, with the form that is granted.
			if !p.ManifestAddresses {
				e.Refusals = append(e.Refusals, Refusal{Capability: what, Rule: ev.rule, Reason: fmt.Sprintf(
					"localhost is a name of this machine's loopback address, and a name never reaches a loopback address; write the address, http://127.0.0.1:%s, in %s and have the profile grant it, or, on a developer's own machine, set manifest_addresses: true in profile %s (the dev profile does)",
					r.port, ManifestFile, p.Name)})
				continue
			}
			for _, h := range []string{"127.0.0.1", "[::1]"} {
				if o := r.scheme + "://" + h + ":" + r.port; !slices.Contains(addresses, o) {
					addresses = append(addresses, o)
				}
			}
		}
		if !named && !r.any && isAddress(r.host) {
			switch class := addressClass(r.host); {
			case class == "":
			case p.ManifestAddresses && manifestAddressClass(class):
				named = true
			default:
				e.Refusals = append(e.Refusals, Refusal{Capability: what, Rule: ev.rule, Reason: addressReason(p, r, class)})
				continue
			}
		}
		eff.Targets = append(eff.Targets, s)
		if e.targets == nil {
			e.targets = map[string][]httpTarget{}
		}
		e.targets[k.Name] = append(e.targets[k.Name], r)
		eff.AllowAny = eff.AllowAny || r.wild()
		if named && !slices.Contains(addresses, r.origin()) {
			addresses = append(addresses, r.origin())
		}
	}
	if k.Name == "http" {
		e.addressTargets = addresses
		e.injections = parseInjections(granted)
		e.propagating = parsePropagating(granted)
	}
	return eff
}

func (targetsShape) checkOp(e *Evaluation, k *capability, op, target string) opCheck {
	dest, err := urlTarget(target)
	if err != nil {
		return opCheck{denied: &DeniedError{Module: e.Module, Op: op, Rule: "op " + op, Reason: err.Error()}}
	}
	effective := e.targets[k.Name]
	if effective == nil { // an Evaluation built by hand
		for _, s := range k.value(&e.Effective).(HTTPCaps).Targets {
			if g, err := parseTarget(s); err == nil {
				effective = append(effective, g)
			}
		}
	}
	for _, g := range effective {
		if g.covers(dest) {
			return opCheck{allowed: true}
		}
	}
	// A path the effective targets' prefixes do not cover, on a server
	// they reach: say which, and why the path is not read.
	for _, g := range effective {
		if g.coversServer(dest) {
			reason := fmt.Sprintf("the path /%s is not under the granted prefix %s", strings.Join(dest.path, "/"), g)
			if dest.pathErr != nil {
				var ee *egress.Error
				reason = dest.pathErr.Error()
				if errors.As(dest.pathErr, &ee) {
					reason = ee.Reason
				}
				reason = fmt.Sprintf("%s; the granted target %s covers only paths read as plain segments under its prefix", reason, g)
			}
			return opCheck{denied: &DeniedError{Module: e.Module, Op: op, Rule: "grant path prefix", Reason: reason}}
		}
	}
	return opCheck{
		asked: targetCovered(k.value(&e.Requested).(HTTPCaps).Targets, dest),
		what:  k.Name + " " + dest.String(), ask: k.Name + ": [" + dest.String() + "]",
		refused: func(capability string) bool { return refusalCovers(capability, k.Name, dest) },
	}
}

// refusalCovers reports whether the refused target in capability
// ("http scheme://host:port") covers the URL target u.
func refusalCovers(capability, name string, u httpTarget) bool {
	s, ok := strings.CutPrefix(capability, name+" ")
	if !ok {
		return false
	}
	r, err := parseTarget(s)
	return err == nil && r.covers(u)
}

// report writes a row per target; a granted one also names the headers
// its grant injects (names and the secrets they hold, never a value).
func (targetsShape) report(r *reporter, k *capability, req any) {
	for _, target := range req.(HTTPCaps).Targets {
		what := k.Name + " " + target
		t, err := parseTarget(target)
		if r.refusal(what) != nil || err != nil {
			r.row(what)
			continue
		}
		var notes []string
		if in := r.e.injectionsFor(t); k.Name == "http" && len(in) > 0 {
			notes = append(notes, "the host injects "+strings.Join(in, ", "))
		}
		if t.wild() || strings.HasPrefix(t.host, "*.") {
			notes = append(notes, WildcardAddressNote)
		}
		if len(notes) > 0 {
			r.line("  %s\t✓ granted; %s", what, strings.Join(notes, "; "))
			continue
		}
		r.row(what)
	}
}

// --- Paths --------------------------------------------------------------

type pathsShape struct{}

func (pathsShape) empty() any         { return []FileGrant(nil) }
func (pathsShape) zero(v any) bool    { return len(v.([]FileGrant)) == 0 }
func (pathsShape) union(a, b any) any { return mergeFiles(a.([]FileGrant), b.([]FileGrant)) }

func (pathsShape) check(ix *index, path string, k *capability, v any, grant bool) error {
	return checkFileGrants(ix, path, v.([]FileGrant), grant)
}

// evaluate grants writes only when both sides say rw. A read-write
// request under a read-only grant is refused as such (on_ungranted
// decides whether the module loads) and, loaded, gets the directory
// read-only: its writes fail with EROFS.
func (pathsShape) evaluate(ev *evaluator, k *capability, req any) any {
	var eff []FileGrant
	granted := k.value(&ev.granted).([]FileGrant)
	for _, fg := range req.([]FileGrant) {
		what := k.Name + " " + fg.String()
		if !ev.check(what, func(c *Capabilities) bool {
			covered, _ := fileCovered(k.value(c).([]FileGrant), fg.Path)
			return covered
		},
			fmt.Sprintf("not under a granted directory (granted: %s)", fileList(granted))) {
			continue
		}
		eff = append(eff, fg)
		if fg.RW && !ev.check(what, func(c *Capabilities) bool { _, rw := fileCovered(k.value(c).([]FileGrant), fg.Path); return rw },
			fmt.Sprintf("granted read-only (granted: %s), so it is mounted read-only; to let the module write, grant %s:rw or {path: %s, rw: true}",
				fileList(granted), fg.Path, fg.Path)) {
			eff[len(eff)-1].RW = false
		}
	}
	return eff
}

// checkOp allows a call whose target path lies under an effective
// directory. (The filesystem capability itself is enforced by the
// preopens and mounts the host makes of the effective directories; an op
// family's own Paths capability is checked here.)
func (pathsShape) checkOp(e *Evaluation, k *capability, op, target string) opCheck {
	if target == "" {
		return opCheck{denied: &DeniedError{Module: e.Module, Op: op, Rule: "op " + op, Reason: op + " names no path"}}
	}
	p := cleanAbs(target)
	allowed, _ := fileCovered(k.value(&e.Effective).([]FileGrant), p)
	asked, _ := fileCovered(k.value(&e.Requested).([]FileGrant), p)
	return opCheck{
		allowed: allowed, asked: asked,
		what: k.Name + " " + p, ask: k.Name + ": [" + p + "]",
		refused: func(capability string) bool {
			s, ok := strings.CutPrefix(capability, k.Name+" ")
			return ok && PathWithin(p, parseFileGrant(s).Path)
		},
	}
}

func (pathsShape) report(r *reporter, k *capability, req any) {
	for _, g := range req.([]FileGrant) {
		what := k.Name + " " + g.String()
		if rf := r.refusal(what); rf != nil {
			r.line("  %s\t✗ refused (%s): %s", what, rf.Rule, rf.Reason)
		} else {
			r.line("  %s\t✓ granted %s", what, g.Mode())
		}
	}
}
