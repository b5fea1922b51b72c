package host

import (
	"context"
	"errors"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
)

// Each op family derives its own view of a module when the module loads
// (ops.Family.Attach: kv's disk quota, db's migrated models, knowledge's
// scopes, the task actions, the http client), once its policy is settled
// and before it serves a call; the module's Envs point at the views and
// the ops read theirs with ops.ViewOf. The host knows no family: it hands
// each what the module is, and audits a refusal.

// attachFamilies attaches every family's view of m, loaded with opts. A
// refusal (db's models a change stored documents could not follow) is
// audited as a denied load, with the rule the family named.
func (h *Host) attachFamilies(ctx context.Context, m *Module, opts LoadOptions) error {
	info := ops.ModuleInfo{Name: m.name, Digest: m.digest, Org: opts.Org, Manifest: m.policy.manifest, Evaluation: m.policy.eval,
		Actions: func() []string { return m.acts.public }, CorrelationID: opts.CorrelationID}
	err := m.views.Attach(ctx, h.familyCore(), h.services, info)
	var ae *ops.AttachError
	if !errors.As(err, &ae) {
		return err
	}
	code, reason := ae.Reason()
	h.audit.Record(ctx, audit.Event{Kind: audit.KindLoad, Decision: audit.Deny, Module: m.name, CorrelationID: opts.CorrelationID,
		Rule: ae.Rule, Reason: reason, Org: opts.Org, Attrs: map[string]string{"digest": m.digest}})
	return &Error{Module: m.name, Code: code, Reason: reason, Err: err}
}

// familyCore is what every family may use: the host's store, logger and
// audit log.
func (h *Host) familyCore() ops.Core {
	return ops.Core{Store: h.store, Logger: h.log, Audit: h.audit}
}
