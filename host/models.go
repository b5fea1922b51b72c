package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// The db family's models are a module's manifest (models:), made ready at
// load: compiled, compared with what the store kept from the module's
// last load, migrated (new fields and indexes) or refused (a change stored
// documents could not follow), before the module serves anything. Ops
// then take the compiled models from the module, never from a request.

// storeModel converts a manifest's model to the store's.
func storeModel(name string, m policy.Model) store.Model {
	out := store.Model{Name: name, Scope: m.Scope, Additional: m.Additional, Indexes: m.Indexes, Fields: map[string]store.Field{}}
	for fname, f := range m.Fields {
		out.Fields[fname] = store.Field{Type: f.Type, Required: f.Required, Max: f.Max}
	}
	return out
}

// loadModels compiles and migrates the models of m's manifest for the
// organization opts.Org ("" when every organization may call it), and
// sets m's db quota. A refusal is audited as a denied load, with what
// changed and how to migrate.
func (h *Host) loadModels(ctx context.Context, m *Module, opts LoadOptions) error {
	m.dbQuota = store.DBQuota{Rows: DefaultDBRows, Bytes: DefaultDBBytes}
	if lim := m.policy.eval.Limits; lim.DBRows > 0 || lim.DBBytes > 0 {
		if lim.DBRows > 0 {
			m.dbQuota.Rows = int64(lim.DBRows)
		}
		if lim.DBBytes > 0 {
			m.dbQuota.Bytes = int64(lim.DBBytes)
		}
	}
	mf := m.policy.manifest
	if mf == nil || len(mf.Models) == 0 {
		return nil
	}
	var schemas []*store.Schema
	for _, name := range slices.Sorted(maps.Keys(mf.Models)) {
		sc, err := store.CompileModel(storeModel(name, mf.Models[name]))
		if err != nil {
			return h.refuseModels(ctx, m, opts, err)
		}
		schemas = append(schemas, sc)
	}
	if err := h.store.DBMigrate(ctx, opts.Org, m.name, schemas); err != nil {
		return h.refuseModels(ctx, m, opts, err)
	}
	m.models = store.NewModels(opts.Org, schemas...)
	return nil
}

func (h *Host) refuseModels(ctx context.Context, m *Module, opts LoadOptions, err error) error {
	code, reason := abi.CodeUnavailable, "the store cannot migrate the module's models: "+err.Error()
	var ae *abi.Error
	if errors.As(err, &ae) {
		code, reason = abi.CodeInvalidArgument, ae.Message
	}
	h.audit.Record(ctx, audit.Event{Kind: audit.KindLoad, Decision: audit.Deny, Module: m.name, CorrelationID: opts.CorrelationID,
		Rule: "manifest models", Reason: reason, Org: opts.Org, Attrs: map[string]string{"digest": m.digest}})
	return &Error{Module: m.name, Code: code, Reason: fmt.Sprintf("models: %s", reason), Err: err}
}
