package host

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// This file is where the host applies policy: at load (signature, grants),
// at each invocation (principal, confirmation, concurrency, rate) and at
// each op (effective grants, sensitive ops). Every decision is audited;
// every refusal is both an *Error for the caller and a deny event.

// modulePolicy is what the policy decided for one loaded module.
type modulePolicy struct {
	profile  *policy.Profile
	manifest *policy.Manifest
	implicit bool // no moat.yaml: actions are whatever the module exports, capabilities none
	// sources are what the binding covers beyond the module's digest:
	// a script's sources, a native plugin's files; nil for WebAssembly.
	sources []byte
	eval    *policy.Evaluation
	slots   chan struct{} // concurrency limit; nil when unlimited
	rate    *rateLimiter  // calls per minute per organization; nil when unlimited

	bindOnce sync.Once
	binding  string // see Module.Binding
}

// Binding is the hex SHA-256 that names exactly what this module runs: its
// bytes, an interpreted plugin's sources, its manifest (actions, roles,
// config, capabilities), its config and how its signature was judged. A
// confirmation is bound to it when requested and refused when used on a
// module with another: replacing the module (or only its manifest) between
// the 428 and the confirmation cannot make the approval run other code.
func (m *Module) Binding() string {
	mp := m.policy
	mp.bindOnce.Do(func() {
		h := sha256.New()
		part := func(b []byte) {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
		part([]byte("moat module binding v1"))
		part([]byte(m.name))
		part([]byte(m.digest))
		part(mp.sources) // a script's sources, a native plugin's files; nil for WebAssembly
		for _, v := range []any{mp.manifest, m.config, m.info.Mode, m.info.Signer} {
			b, err := json.Marshal(v)
			if err != nil { // cannot happen for these types; still, never collide
				b = []byte(fmt.Sprintf("unencodable %T: %v", v, err))
			}
			part(b)
		}
		mp.binding = hex.EncodeToString(h.Sum(nil))
	})
	return mp.binding
}

// ConfirmationRequest is returned (inside an *Error with code
// confirmation_required) when an action must be confirmed before it runs.
// The token is single-use, bound to the principal, module, action and
// input, and expires at ExpiresAt.
type ConfirmationRequest struct {
	Token     string    `json:"token"`
	Module    string    `json:"module"`
	Action    string    `json:"action"`
	Summary   string    `json:"summary"`
	ExpiresAt time.Time `json:"expires_at"`
}

// verifySignature checks the module's signature against the profile's
// trusted keys. It returns the signer's key name ("" for a module that runs
// sandboxed) or a refusal.
//
// sigFile names the signature's file in the refusal of an unsigned module
// (name.wasm.minisig; a script's, name.minisig: its loader's).
func (h *Host) verifySignature(ctx context.Context, name string, wasm []byte, opts LoadOptions, correlation, sigFile string) (string, error) {
	p := h.profile
	ev := audit.Event{Kind: audit.KindSignature, Module: name, CorrelationID: correlation, Rule: "profile " + p.Name + ": require_signature"}
	deny := func(reason string, err error) (string, error) {
		ev.Decision, ev.Reason = audit.Deny, reason
		h.audit.Record(ctx, ev)
		return "", &Error{Module: name, Code: abi.CodeDenied, Reason: reason, Err: err}
	}
	if opts.Signature == nil {
		if p.RequireSignature {
			return deny(fmt.Sprintf("unsigned (no %s); profile %s requires a signature from a trusted key", sigFile, p.Name), nil)
		}
		return "", nil // unsigned modules run sandboxed; nothing to record
	}
	trusted, err := p.TrustedPublicKeys()
	if err != nil {
		return deny(err.Error(), err)
	}
	v, err := policy.Verify(trusted, policy.Signed{Name: name, Module: wasm, Manifest: opts.ManifestBytes}, opts.Signature)
	if err != nil {
		var se *policy.SignatureError
		if errors.As(err, &se) && se.UnknownKey && !p.RequireSignature {
			// Signed, but by a key this operator does not trust: the
			// module runs sandboxed, and the audit trail says why.
			ev.Decision, ev.Reason, ev.Rule = audit.Allow, se.Reason+"; running sandboxed", "profile "+p.Name+": trusted_keys"
			h.audit.Record(ctx, ev)
			return "", nil
		}
		return deny(err.Error(), err)
	}
	ev.Decision, ev.Reason, ev.Rule = audit.Allow, "signed by trusted key "+v.KeyName+" ("+v.KeyID+")", "profile "+p.Name+": trusted_keys"
	h.audit.Record(ctx, ev)
	return v.KeyName, nil
}

// applyPolicy evaluates the manifest against the profile at load and
// refuses the module when a request is not granted (on_ungranted: refuse).
func (h *Host) applyPolicy(ctx context.Context, m *Module, signer, correlation string) error {
	mp := m.policy
	mp.eval = h.profile.Evaluate(mp.manifest, signer)
	ev := audit.Event{Kind: audit.KindLoad, Module: m.name, CorrelationID: correlation, Rule: "profile " + h.profile.Name,
		Attrs: map[string]string{"digest": m.digest, "mode": string(mp.eval.Mode)}}
	if mp.eval.Refused {
		var why []string
		for _, r := range mp.eval.Refusals {
			why = append(why, r.Capability+": "+r.Reason)
		}
		reason := fmt.Sprintf("%d request(s) not granted by profile %s: %s (see `moat policy check`)", len(why), h.profile.Name, strings.Join(why, "; "))
		ev.Decision, ev.Reason = audit.Deny, reason
		h.audit.Record(ctx, ev)
		return &Error{Module: m.name, Code: abi.CodeDenied, Reason: reason}
	}
	ev.Decision, ev.Reason = audit.Allow, "loaded "+string(mp.eval.Mode)
	if n := len(mp.eval.Refusals); n > 0 {
		ev.Reason += fmt.Sprintf("; %d request(s) not granted will be denied at call time", n)
	}
	h.audit.Record(ctx, ev)
	if c := mp.eval.Limits.Concurrency; c > 0 {
		mp.slots = make(chan struct{}, c)
	}
	if r := mp.eval.Limits.CallsPerMinute; r > 0 {
		mp.rate = newRateLimiter(r)
	}
	return nil
}

// authorize runs the per-invocation checks in order: the principal's roles
// and permissions, then the confirmation requirement.
func (m *Module) authorize(ctx context.Context, req *Request, confirmed bool) error {
	mp := m.policy
	if mp.implicit {
		return nil
	}
	if err := mp.profile.Authorize(mp.manifest, req.Action, req.Principal); err != nil {
		var de *policy.DeniedError
		rule, reason := "", err.Error()
		if errors.As(err, &de) {
			rule, reason = de.Rule, de.Reason
		}
		m.deny(ctx, req, audit.KindDecision, "", rule, reason)
		return &Error{Module: m.name, Action: req.Action, Code: abi.CodeDenied, Reason: reason, Err: err}
	}
	a, ok := mp.manifest.Action(req.Action)
	if ok && a.InputSchema != nil {
		// Before a confirmation is asked for: nobody is asked to approve
		// an input the action refuses anyway.
		if err := a.InputSchema.Validate(req.Input); err != nil {
			reason := err.Error() + " (input_schema of " + m.name + "." + req.Action + ")"
			m.deny(ctx, req, audit.KindDecision, "", "manifest: input_schema", reason)
			return &Error{Module: m.name, Action: req.Action, Code: abi.CodeInvalidArgument, Reason: reason, Err: err, decided: true}
		}
	}
	if ok && a.Confirm && !confirmed {
		return m.requestConfirmation(ctx, req, fmt.Sprintf("run %s.%s for %s", m.name, req.Action, req.Principal), "manifest: confirm: true")
	}
	return nil
}

// MayInvoke reports whether the principal's roles and permissions allow
// the action, as Invoke would check them, without recording anything:
// what a list of the caller's tools (MCP tools/list) and the console ask.
// Invoke checks again, and audits.
func (m *Module) MayInvoke(action string, p policy.Principal) bool {
	if _, ok := m.acts.publicIdx[action]; !ok {
		return false
	}
	if m.policy.implicit {
		return true
	}
	return m.policy.profile.Authorize(m.policy.manifest, action, p) == nil
}

func (m *Module) deny(ctx context.Context, req *Request, kind, op, rule, reason string) {
	m.host.audit.Record(ctx, audit.Event{Kind: kind, Decision: audit.Deny, CorrelationID: req.CorrelationID, Module: m.name,
		Action: req.Action, Op: op, User: req.Principal.User, Org: req.Principal.Org, Rule: rule, Reason: reason})
}

// requestConfirmation stores a single-use token for this exact request and
// returns the confirmation_required error that carries it.
func (m *Module) requestConfirmation(ctx context.Context, req *Request, summary, rule string) error {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return &Error{Module: m.name, Action: req.Action, Code: abi.CodeInternal, Reason: "cannot make a confirmation token", Err: err}
	}
	token := base64.RawURLEncoding.EncodeToString(raw[:])
	now := time.Now().UTC()
	ttl := time.Duration(m.policy.profile.ConfirmTTL)
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	sum := sha256.Sum256(req.Input)
	c := store.Confirmation{
		TokenHash: hashToken(token), Org: req.Principal.Org, User: req.Principal.User, Module: m.name, Action: req.Action,
		Input: req.Input, InputSHA256: hex.EncodeToString(sum[:]), Summary: summary, CreatedAt: now, ExpiresAt: now.Add(ttl),
		Binding: m.Binding(), Roles: req.Principal.Roles,
	}
	if err := m.host.store.ConfirmationCreate(ctx, c); err != nil {
		return &Error{Module: m.name, Action: req.Action, Code: abi.CodeUnavailable, Reason: "cannot store the confirmation", Err: err}
	}
	m.host.audit.Record(ctx, audit.Event{Kind: audit.KindConfirmation, Decision: audit.Deny, CorrelationID: req.CorrelationID, Module: m.name,
		Action: req.Action, User: req.Principal.User, Org: req.Principal.Org, Rule: rule,
		Reason: "confirmation requested: " + summary, Attrs: map[string]string{"input_sha256": c.InputSHA256, "binding": c.Binding, "expires_at": c.ExpiresAt.Format(time.RFC3339)}})
	return &Error{Module: m.name, Action: req.Action, Code: abi.CodeConfirmationRequired,
		Reason:       fmt.Sprintf("%s needs confirmation (%s); confirm with the token within %s", req.Action, rule, ttl),
		Confirmation: &ConfirmationRequest{Token: token, Module: m.name, Action: req.Action, Summary: summary, ExpiresAt: c.ExpiresAt}, decided: true}
}

func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ConfirmRequest confirms a pending confirmation and runs its action once.
type ConfirmRequest struct {
	Token         string
	Principal     policy.Principal
	CorrelationID string
}

// Confirm runs the action a confirmation token stands for, with the input it
// was requested with, for the principal it was issued to, exactly once, on
// the module it was requested on. A replayed, expired, unknown or other
// principal's token is refused, and so is one requested on another module
// or on this name before it was replaced (its Binding differs: the error
// wraps store.ErrConfirmationStale, and the token is used up).
func (m *Module) Confirm(ctx context.Context, req ConfirmRequest) (Result, error) {
	fake := Request{Principal: req.Principal, CorrelationID: req.CorrelationID}
	binding := m.Binding()
	c, err := m.host.store.ConfirmationUse(ctx, hashToken(req.Token), req.Principal.Org, req.Principal.User, binding, time.Now().UTC())
	if err != nil {
		var reason string
		switch {
		case errors.Is(err, store.ErrConfirmationStale) && c != nil:
			fake.Action = c.Action
			if c.Module != m.name {
				reason = fmt.Sprintf("the confirmation token is for module %s, not %s", c.Module, m.name)
			} else {
				reason = fmt.Sprintf("module %s changed since the confirmation was requested (binding %s then, %s now): "+
					"the approval was for the code and manifest then; the token is used up, invoke the action again for a new one",
					m.name, short(c.Binding), short(binding))
			}
			m.host.audit.Record(ctx, audit.Event{Kind: audit.KindConfirmation, Decision: audit.Deny, CorrelationID: req.CorrelationID,
				Module: m.name, Action: c.Action, User: req.Principal.User, Org: req.Principal.Org, Rule: "confirmation binding", Reason: reason,
				Attrs: map[string]string{"binding_requested": c.Binding, "binding_now": binding}})
			return Result{}, &Error{Module: m.name, Action: c.Action, Code: abi.CodeDenied, Reason: reason, Err: err}
		case errors.Is(err, store.ErrConfirmationUsed):
			reason = "the confirmation token was already used"
		case errors.Is(err, store.ErrConfirmationExpired):
			reason = "the confirmation token has expired; invoke the action again for a new one"
		case errors.Is(err, store.ErrConfirmationPrincipal):
			reason = "the confirmation token was issued to another principal"
		case errors.Is(err, store.ErrConfirmationNotFound):
			reason = "no such confirmation token"
		default:
			return Result{}, &Error{Module: m.name, Code: abi.CodeUnavailable, Reason: "cannot read confirmations", Err: err}
		}
		m.deny(ctx, &fake, audit.KindConfirmation, "", "confirmation token", reason)
		return Result{}, &Error{Module: m.name, Code: abi.CodeDenied, Reason: reason, Err: err}
	}
	fake.Action = c.Action
	if c.Module != m.name {
		reason := fmt.Sprintf("the confirmation token is for module %s, not %s", c.Module, m.name)
		m.deny(ctx, &fake, audit.KindConfirmation, "", "confirmation token", reason)
		return Result{}, &Error{Module: m.name, Action: c.Action, Code: abi.CodeDenied, Reason: reason}
	}
	m.host.audit.Record(ctx, audit.Event{Kind: audit.KindConfirmation, Decision: audit.Allow, CorrelationID: req.CorrelationID, Module: m.name,
		Action: c.Action, User: req.Principal.User, Org: req.Principal.Org, Rule: "confirmation token", Reason: "confirmed: " + c.Summary,
		Attrs: map[string]string{"input_sha256": c.InputSHA256}})
	return m.invoke(ctx, Request{Action: c.Action, Input: c.Input, Principal: req.Principal, CorrelationID: req.CorrelationID}, true)
}

// DecideRequest is an approver's decision on a pending confirmation of
// its organization (four-eyes approval; see Module.Decide).
type DecideRequest struct {
	TokenHash     string           // the confirmation's token hash (the approver never holds the token)
	Approver      policy.Principal // who decides
	Approve       bool             // true: run the action; false: deny it
	CorrelationID string
}

// Decide approves or denies, once, a confirmation another principal of the
// approver's organization requested on this module. An approval runs the
// action AS THE REQUESTER, with the roles it held when it asked (stored
// with the confirmation), the input it asked with, on the module it asked
// on: the approver lends its judgement, not its roles. Whether the
// approver may decide at all (the server's confirm.approve permission) is
// the caller's check; whether it may decide its own request is the
// profile's confirm_self_approve. Both the requester and the approver are
// in the audit event. The errors are Confirm's, and a refused self-approval
// wraps store.ErrConfirmationSelf; an unknown confirmation and one of
// another organization are the same store.ErrConfirmationNotFound.
func (m *Module) Decide(ctx context.Context, req DecideRequest) (Result, *store.Confirmation, error) {
	binding := m.Binding()
	c, err := m.host.store.ConfirmationDecide(ctx, req.TokenHash, store.ConfirmationDecision{
		Org: req.Approver.Org, Approver: req.Approver.User, Approve: req.Approve, Binding: binding,
		AllowSelf: m.policy.profile.ConfirmSelfApprove, Now: time.Now().UTC(),
	})
	verb := "deny"
	if req.Approve {
		verb = "approve"
	}
	ev := audit.Event{Kind: audit.KindConfirmation, Decision: audit.Deny, CorrelationID: req.CorrelationID, Module: m.name,
		User: req.Approver.User, Org: req.Approver.Org, Rule: "confirmation " + verb,
		Attrs: map[string]string{"approver": req.Approver.User}}
	if c != nil {
		ev.Action, ev.User = c.Action, c.User
		ev.Attrs["requester"], ev.Attrs["input_sha256"] = c.User, c.InputSHA256
	}
	if err != nil {
		var reason string
		code := abi.CodeDenied
		switch {
		case errors.Is(err, store.ErrConfirmationStale) && c != nil:
			reason = fmt.Sprintf("module %s changed since the confirmation was requested (binding %s then, %s now): "+
				"the request was for the code and manifest then; it is used up, the requester must invoke the action again",
				c.Module, short(c.Binding), short(binding))
			ev.Attrs["binding_requested"], ev.Attrs["binding_now"] = c.Binding, binding
		case errors.Is(err, store.ErrConfirmationSelf):
			reason = "you requested this confirmation; another approver of the organization must decide it (profile " +
				m.policy.profile.Name + " does not set confirm_self_approve)"
		case errors.Is(err, store.ErrConfirmationUsed):
			reason = "the confirmation was already decided or used"
		case errors.Is(err, store.ErrConfirmationExpired):
			reason = "the confirmation has expired; the requester must invoke the action again"
		case errors.Is(err, store.ErrConfirmationNotFound):
			code, reason = abi.CodeNotFound, "no such confirmation in organization "+req.Approver.Org
		default:
			return Result{}, nil, &Error{Module: m.name, Code: abi.CodeUnavailable, Reason: "cannot read confirmations", Err: err}
		}
		ev.Reason = verb + " refused: " + reason
		m.host.audit.Record(ctx, ev)
		return Result{}, c, &Error{Module: m.name, Action: ev.Action, Code: code, Reason: reason, Err: err}
	}
	if !req.Approve {
		ev.Reason = fmt.Sprintf("denied by %s: %s", req.Approver.User, c.Summary)
		m.host.audit.Record(ctx, ev)
		return Result{}, c, nil
	}
	if c.Module != m.name {
		// Another module has another binding, so the store refused it
		// as stale already; this holds even if two had the same one.
		ev.Reason = fmt.Sprintf("the confirmation is for module %s, not %s", c.Module, m.name)
		m.host.audit.Record(ctx, ev)
		return Result{}, c, &Error{Module: m.name, Action: c.Action, Code: abi.CodeDenied, Reason: ev.Reason}
	}
	ev.Decision, ev.Reason = audit.Allow, fmt.Sprintf("approved by %s: %s", req.Approver.User, c.Summary)
	m.host.audit.Record(ctx, ev)
	requester := policy.Principal{Org: c.Org, User: c.User, Roles: c.Roles}
	res, err := m.invoke(ctx, Request{Action: c.Action, Input: c.Input, Principal: requester, CorrelationID: req.CorrelationID}, true)
	return res, c, err
}

// acquire takes a concurrency slot and a rate token for the invocation.
func (m *Module) acquire(ctx context.Context, req *Request) (release func(), err error) {
	mp := m.policy
	if mp.rate != nil && !mp.rate.allow(req.Principal.Org) {
		reason := fmt.Sprintf("the limit of %d calls per minute for organization %s is used up", mp.eval.Limits.CallsPerMinute, req.Principal.Org)
		m.deny(ctx, req, audit.KindDecision, "", "limits.calls_per_minute", reason)
		return nil, &Error{Module: m.name, Action: req.Action, Code: abi.CodeRateLimited, Reason: reason, decided: true}
	}
	if mp.slots == nil {
		return func() {}, nil
	}
	select {
	case mp.slots <- struct{}{}:
		return func() { <-mp.slots }, nil
	case <-ctx.Done():
		reason := fmt.Sprintf("no free slot within the deadline (limits.concurrency %d)", cap(mp.slots))
		m.deny(ctx, req, audit.KindDecision, "", "limits.concurrency", reason)
		return nil, &Error{Module: m.name, Action: req.Action, Code: abi.CodeTimeout, Reason: reason}
	}
}

// rateLimiter is a token bucket per organization: perMinute tokens, refilled
// continuously, so one organization cannot use up another's calls.
type rateLimiter struct {
	mu        sync.Mutex
	perMinute float64
	buckets   map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(perMinute int) *rateLimiter {
	return &rateLimiter{perMinute: float64(perMinute), buckets: map[string]*bucket{}}
}

func (r *rateLimiter) allow(org string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	b, ok := r.buckets[org]
	if !ok {
		b = &bucket{tokens: r.perMinute, last: now}
		r.buckets[org] = b
	}
	b.tokens = min(r.perMinute, b.tokens+now.Sub(b.last).Minutes()*r.perMinute)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// short is the first 12 digits of a digest, for messages.
func short(digest string) string {
	if digest == "" {
		return "(none)"
	}
	return digest[:min(12, len(digest))]
}
