package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// Family is one op family: its ops and everything they need that is not
// the invocation's, in one value the family's file registers
// (RegisterFamily). It follows caddy's module lifecycle: the embedder
// gives the family its configuration (host.Config.Families, or its
// section of moat-server.yaml), Validate checks it, Provision makes the
// family's service from it once per host, the ops reach that service
// through ServiceOf, and Cleanup releases what Provision held when the
// host closes.
//
// A family is the unit in which moat grows: adding one is its abi types,
// this value in host/ops/<family>.go, and its store methods; nothing in
// host, policy or the server's configuration names a family.
type Family struct {
	// Name names the family: its entry in host.Config.Families and its
	// section of moat-server.yaml are Name, and the knob a guest's error
	// cites is a path under Name (media.quota_bytes). Its ops are usually
	// named Name.* (the task family, "tasks", has task.*).
	Name string
	// Capability is what a module's grants must hold to call the
	// family's ops, as policy's capability table declares it: a spec with
	// a Shape is the family's own capability, which RegisterFamily adds
	// to the table (policy.RegisterCapability) before its ops name it; a
	// spec with only a Name names one the table has (the built-in kv,
	// media, ...). An op of the family whose Op.Capability is "" takes
	// its Name. Zero for a family any module may call (log, config).
	Capability policy.CapabilitySpec
	// Config makes a new configuration of the family with every field at
	// its zero value (a pointer to the family's own struct, with yaml
	// tags): what Provision gets when the embedder configures nothing,
	// and the type an embedder's configuration must have. Nil for a
	// family with nothing to configure.
	Config func() any
	// Validate checks a configuration before anything is provisioned
	// from it; its error names the knob (Name.field). Optional.
	Validate func(cfg any) error
	// Provision makes the family's service from its configuration (what
	// Config made, filled by the embedder): the value ServiceOf gives the
	// family's ops for every invocation of the host. It may ask for
	// another family's service by name (ProvisionContext.Service). Nil
	// for a family whose ops need nothing but the Env.
	Provision func(ctx *ProvisionContext, cfg any) (any, error)
	// Cleanup releases what Provision's service holds, when the host
	// closes. Optional.
	Cleanup func(service any) error
	// Attach derives the family's view of one module when the module
	// loads, once its policy is settled (AttachContext.Module: its name,
	// digest, organization, manifest and effective grants and limits)
	// and before it serves a call: what the family's ops read for that
	// module with ViewOf (kv's disk quota, db's migrated models, http's
	// client). service is the family's provisioned service. An error
	// refuses the load (an *abi.Error for a mistake in the module, its
	// message for the author; a *Refusal to name the rule in the audit
	// record). Nil for a family that sees every module alike.
	Attach func(ctx *AttachContext, service any) (any, error)
	// Detach releases what Attach's view holds, when the module closes
	// (calls in flight may still finish with it). Optional.
	Detach func(view any)
	// Ops are the family's ops, registered with it.
	Ops []Op
}

var families = map[string]*Family{}

// RegisterFamily adds f and its ops to the table (Register), each op
// taking the family's capability unless it names its own. Called from
// the init of the family's file; it panics on a duplicate or empty name,
// an op registered twice or a capability policy does not know: all are
// programming errors caught when the binary starts.
func RegisterFamily(f Family) {
	if f.Name == "" || strings.ContainsAny(f.Name, ". ") {
		panic(fmt.Sprintf("ops: RegisterFamily needs a name without dots or spaces, got %q", f.Name))
	}
	mu.Lock()
	if _, dup := families[f.Name]; dup {
		mu.Unlock()
		panic(fmt.Sprintf("ops: family %q registered twice", f.Name))
	}
	fam := f
	fam.Ops = nil
	families[f.Name] = &fam
	mu.Unlock()
	if f.Capability.Shape != 0 {
		if err := policy.RegisterCapability(f.Capability); err != nil {
			panic(fmt.Sprintf("ops: family %s: %v", f.Name, err))
		}
	}
	for _, op := range f.Ops {
		if op.Capability == "" {
			op.Capability = f.Capability.Name
		}
		op.family = f.Name
		Register(op)
	}
}

// Families lists the registered families' names, sorted.
func Families() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// FamilyConfig makes a new, zero configuration of the family name (its
// Config), for a decoder that fills it from the family's section of a
// configuration file. ok is false when no family has that name or it
// has nothing to configure.
func FamilyConfig(name string) (cfg any, ok bool) {
	mu.RLock()
	f := families[name]
	mu.RUnlock()
	if f == nil || f.Config == nil {
		return nil, false
	}
	return f.Config(), true
}

// ValidateFamilyConfig runs the family name's Validate on cfg (what
// FamilyConfig made, filled), for a decoder that puts the error where the
// family's section was written; nil for a family with no Validate.
func ValidateFamilyConfig(name string, cfg any) error {
	mu.RLock()
	f := families[name]
	mu.RUnlock()
	if f == nil {
		return fmt.Errorf("ops: no op family %q; the families are %s", name, strings.Join(Families(), ", "))
	}
	if f.Validate == nil {
		return nil
	}
	return f.Validate(cfg)
}

// Core is what every family may use when it is provisioned or attached:
// the host's store, logger and audit log. A family's own needs are its
// configuration, or another family's service (ProvisionContext.Service).
type Core struct {
	Store  *store.Store
	Logger *slog.Logger
	Audit  *audit.Log // nil: what a family records is dropped (an Env made by hand)
}

// ProvisionContext is what a family's Provision gets: the Core, and the
// services of the other families by name, each provisioned at its first
// request (caddy's ctx.App): a family that serves another is asked, not
// wired by hand.
type ProvisionContext struct {
	context.Context
	Core
	s       *Services
	configs map[string]any
	busy    map[string]bool // families being provisioned, to refuse a cycle
}

// Service is the service of the family name, provisioned now if it is
// not yet. nil, nil for a family that provisions nothing (or whose
// Provision returned nil: it offers nothing on this host).
func (c *ProvisionContext) Service(name string) (any, error) {
	return c.s.provision(c, name)
}

// Services are the provisioned services of a host's families, one per
// family that has a Provision. Ops read them through ServiceOf; the
// host releases them with Cleanup.
type Services struct {
	byName   map[string]any
	order    []string        // provisioning order; Cleanup goes backwards
	disabled map[string]bool // families the embedder disabled (Disabled)
}

// Disabled, as a family's entry in the configurations given to Provision
// (host.Config.Families{"http": ops.Disabled}), disables the family on
// that host: it is not provisioned nor attached to any module, a family
// asking for its service gets none, and each of its ops is refused,
// audited, with a *DisabledError naming the family, whatever the
// module's grants. It is how an embedder offers its modules less than
// moat has, extism-style: by leaving a host function out.
var Disabled any = disabledFamily{}

type disabledFamily struct{}

// DisabledError refuses an op of a family the host disabled (Disabled).
// Its code is denied: the module may hold the grant; the host offers the
// family to none of its modules.
type DisabledError struct {
	Family string
	Op     string
}

func (e *DisabledError) Error() string {
	return fmt.Sprintf("op %s: the %s family is disabled on this host by its operator or embedder; no grant enables it here (rule: host: family disabled)", e.Op, e.Family)
}

// ErrorCode implements abi.CodeOf's interface: denied.
func (e *DisabledError) ErrorCode() abi.Code { return abi.CodeDenied }

// Disabled reports whether the family name is disabled on the host.
func (s *Services) Disabled(name string) bool {
	return s != nil && len(s.disabled) > 0 && s.disabled[name]
}

// DisabledFamilies lists the families disabled on the host, sorted, for
// an embedder's report of what its host offers.
func (s *Services) DisabledFamilies() []string {
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.disabled))
	for n := range s.disabled {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Refuse is the refusal of op o on the host when its family is disabled
// (a *DisabledError), nil otherwise: the host's gate asks it first, so
// the refusal is audited as any other.
func (s *Services) Refuse(o *Op) error {
	if s.Disabled(o.family) {
		return &DisabledError{Family: o.family, Op: o.Name}
	}
	return nil
}

// Provision validates and provisions every registered family from its
// configuration in configs (keyed by family name; a family left out, or
// given nil, gets its Config's zero value, which Provision fills with
// its defaults). A configuration must have the type the family's Config
// makes; a name no family has is refused, naming the families there are.
// On an error the families already provisioned are cleaned up.
func Provision(ctx context.Context, core Core, configs map[string]any) (*Services, error) {
	mu.RLock()
	known := make(map[string]*Family, len(families))
	for n, f := range families {
		known[n] = f
	}
	mu.RUnlock()
	for name, cfg := range configs {
		f, ok := known[name]
		if !ok {
			return nil, fmt.Errorf("ops: no op family %q; the families are %s", name, strings.Join(Families(), ", "))
		}
		if cfg == nil || cfg == Disabled {
			continue
		}
		if f.Config == nil {
			return nil, fmt.Errorf("ops: family %s has nothing to configure, but was given a %T", name, cfg)
		}
		if want := reflect.TypeOf(f.Config()); reflect.TypeOf(cfg) != want {
			return nil, fmt.Errorf("ops: family %s is configured with a %s, not a %T", name, want, cfg)
		}
	}
	s := &Services{byName: map[string]any{}}
	for name, cfg := range configs {
		if cfg == Disabled {
			if s.disabled == nil {
				s.disabled = map[string]bool{}
			}
			s.disabled[name] = true
		}
	}
	pc := &ProvisionContext{Context: ctx, Core: core, s: s, configs: configs, busy: map[string]bool{}}
	for _, name := range Families() {
		if _, err := s.provision(pc, name); err != nil {
			s.Cleanup()
			return nil, err
		}
	}
	return s, nil
}

// provision provisions the family name once, with its dependencies first.
func (s *Services) provision(pc *ProvisionContext, name string) (any, error) {
	if svc, done := s.byName[name]; done || s.disabled[name] {
		return svc, nil
	}
	mu.RLock()
	f := families[name]
	mu.RUnlock()
	if f == nil {
		return nil, fmt.Errorf("ops: no op family %q; the families are %s", name, strings.Join(Families(), ", "))
	}
	if pc.busy[name] {
		return nil, fmt.Errorf("ops: family %s needs its own service while it is provisioned (a cycle of families)", name)
	}
	pc.busy[name] = true
	defer delete(pc.busy, name)
	cfg := pc.configs[name]
	if cfg == nil && f.Config != nil {
		cfg = f.Config()
	}
	if f.Validate != nil {
		if err := f.Validate(cfg); err != nil {
			return nil, err
		}
	}
	var svc any
	if f.Provision != nil {
		var err error
		if svc, err = f.Provision(pc, cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	s.byName[name] = svc
	s.order = append(s.order, name)
	return svc, nil
}

// Cleanup releases the services, the last provisioned first. It is safe
// on a nil *Services and to call twice.
func (s *Services) Cleanup() error {
	if s == nil {
		return nil
	}
	var errs []error
	for i := len(s.order) - 1; i >= 0; i-- {
		name := s.order[i]
		mu.RLock()
		f := families[name]
		mu.RUnlock()
		if svc := s.byName[name]; f != nil && f.Cleanup != nil && svc != nil {
			if err := f.Cleanup(svc); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	s.order, s.byName = nil, map[string]any{}
	return errors.Join(errs...)
}

// Service is the provisioned service of the family name (nil when it
// has none).
func (s *Services) Service(name string) any {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// ServiceOf is the service the family name provisioned for env's host,
// as the type its ops expect. ok is false when the host has none (a
// family whose Provision offers nothing here, or an Env made by hand
// without Services).
func ServiceOf[T any](env *Env, family string) (svc T, ok bool) {
	svc, ok = env.Services.Service(family).(T)
	return svc, ok
}

// ModuleInfo is what a family's Attach may read of the module being
// loaded: who it is and what its policy settled. It is the module's, not
// a request's: nothing in it is chosen by a caller.
type ModuleInfo struct {
	Name   string
	Digest string // sha256 of the module bytes, hex
	// Org is the organization the module is loaded for (moat serve loads
	// each organization's modules), or "" when callers of every
	// organization share it.
	Org string
	// Manifest is the module's manifest, declared or implicit (the
	// actions it registers, nothing else); never nil.
	Manifest *policy.Manifest
	// Evaluation is its policy: the effective capabilities and the limits
	// to enforce (0: the host's default).
	Evaluation *policy.Evaluation
	// Actions lists the action names its callers use. It is read at each
	// call, not at Attach: a module loaded without a manifest has none
	// until its runtime has started, which may come after Attach.
	Actions func() []string
	// CorrelationID is the load's, for the audit records of a refusal.
	CorrelationID string
}

// AttachContext is what a family's Attach gets: the Core and the module.
type AttachContext struct {
	context.Context
	Core
	Module ModuleInfo
}

// Refusal is an Attach error that names the rule that refused the load,
// for the host's audit record ("manifest models"); Err is the reason.
type Refusal struct {
	Rule string
	Err  error
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// Views are the views the families attached for one module, which its
// ops read through ViewOf. The host attaches them once per load
// (Views.Attach) and detaches them when the module closes; the zero
// value has none.
type Views struct {
	byName map[string]any
	order  []string
}

// AttachError is a module's load refused by a family's Attach.
type AttachError struct {
	Family string
	Rule   string // the rule that refused: the Refusal's, or "family NAME"
	Err    error
}

func (e *AttachError) Error() string { return fmt.Sprintf("%s: %v", e.Family, e.Err) }
func (e *AttachError) Unwrap() error { return e.Err }

// Attach runs every registered family's Attach for the module m, with
// the services the host provisioned, into v (a module's zero Views,
// which its Envs may already point at). A family disabled on the host
// (Disabled) attaches nothing. On an error (an *AttachError naming the
// family) the views already made are detached.
func (v *Views) Attach(ctx context.Context, core Core, s *Services, m ModuleInfo) error {
	if m.Manifest == nil {
		m.Manifest = &policy.Manifest{Name: m.Name}
	}
	if m.Evaluation == nil {
		m.Evaluation = &policy.Evaluation{Module: m.Name}
	}
	if m.Actions == nil {
		m.Actions = func() []string { return nil }
	}
	mu.RLock()
	var fams []*Family
	for _, n := range sortedFamilies() { // ordered, so a refusal is the same at every load
		if f := families[n]; f.Attach != nil && !s.Disabled(n) {
			fams = append(fams, f)
		}
	}
	mu.RUnlock()
	v.byName = make(map[string]any, len(fams))
	ac := &AttachContext{Context: ctx, Core: core, Module: m}
	for _, f := range fams {
		view, err := f.Attach(ac, s.Service(f.Name))
		if err != nil {
			v.Detach()
			rule := "family " + f.Name
			var r *Refusal
			if errors.As(err, &r) {
				rule = r.Rule
			}
			return &AttachError{Family: f.Name, Rule: rule, Err: err}
		}
		v.byName[f.Name] = view
		v.order = append(v.order, f.Name)
	}
	return nil
}

// Detach releases the views, the last attached first. It is safe on a
// nil *Views and to call twice.
func (v *Views) Detach() {
	if v == nil {
		return
	}
	for i := len(v.order) - 1; i >= 0; i-- {
		name := v.order[i]
		mu.RLock()
		f := families[name]
		mu.RUnlock()
		if view := v.byName[name]; f != nil && f.Detach != nil && view != nil {
			f.Detach(view)
		}
	}
	v.order = nil
}

// View is the view the family name attached (nil when it has none).
func (v *Views) View(name string) any {
	if v == nil {
		return nil
	}
	return v.byName[name]
}

// ViewOf is the view the family name attached for env's module, as the
// type its ops expect. ok is false when there is none (a family disabled
// on the host, or an Env made by hand without Views).
func ViewOf[T any](env *Env, family string) (view T, ok bool) {
	view, ok = env.Views.View(family).(T)
	return view, ok
}

// sortedFamilies lists the registered families' names, sorted; mu held.
func sortedFamilies() []string {
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Reason is the code of the refused load and its reason for the module's
// author: an *abi.Error's code and message (a mistake in the module),
// else unavailable and the error (the host failed).
func (e *AttachError) Reason() (abi.Code, string) {
	var ae *abi.Error
	if errors.As(e.Err, &ae) {
		return ae.Code, ae.Message
	}
	return abi.CodeUnavailable, e.Err.Error()
}
