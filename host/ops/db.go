package ops

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// The db family: JSON documents in the models the module declares in its
// moat.yaml (models:), granted per model (capabilities: db: [notes]: the
// request's model is the op's target, checked by the gate before the op
// runs). The scope is the invocation's: the caller's organization and
// user and the module, from Env, never from the request, so a guest
// cannot name another organization or user; the store applies it in
// every statement. The model comes from the module's load (the family's
// view, attachDB: the manifest's models compiled, compared with what the
// store kept from the module's last load, migrated, or the load refused
// when stored documents could not follow), so a guest can only use models
// its manifest declared, with the fields and types declared there.

func init() {
	RegisterFamily(Family{
		Name: "db", Capability: policy.CapabilitySpec{Name: "db"},
		Attach: attachDB,
		Ops: []Op{
			{Name: abi.OpDBInsert, Func: Typed(dbInsert), Mutates: true},
			{Name: abi.OpDBGet, Func: Typed(dbGet)},
			{Name: abi.OpDBQuery, Func: Typed(dbQuery)},
			{Name: abi.OpDBUpdate, Func: Typed(dbUpdate), Mutates: true},
			{Name: abi.OpDBDelete, Func: Typed(dbDelete), Mutates: true},
			{Name: abi.OpDBCount, Func: Typed(dbCount)},
		},
	})
}

// DefaultDBRows and DefaultDBBytes are an organization's module's db
// quota when its limits set none (limits.db_rows, limits.db_bytes).
const (
	DefaultDBRows  = 1_000_000
	DefaultDBBytes = 1 << 30
)

// dbView is the db family's view of a module: its declared models,
// migrated for the organization it is loaded for (nil: none), and the
// documents and bytes an organization's module may store.
type dbView struct {
	models *store.Models
	quota  store.DBQuota
}

// attachDB compiles and migrates the models of the module's manifest for
// the organization it is loaded for ("" when every organization may call
// it), and sets its db quota. A refusal says what changed and how to
// migrate, and is audited as the rule "manifest models".
func attachDB(ctx *AttachContext, _ any) (any, error) {
	m := ctx.Module
	v := &dbView{quota: store.DBQuota{Rows: DefaultDBRows, Bytes: DefaultDBBytes}}
	if lim := m.Evaluation.Limits; lim.DBRows > 0 {
		v.quota.Rows = int64(lim.DBRows)
	}
	if lim := m.Evaluation.Limits; lim.DBBytes > 0 {
		v.quota.Bytes = int64(lim.DBBytes)
	}
	if len(m.Manifest.Models) == 0 {
		return v, nil
	}
	var schemas []*store.Schema
	for _, name := range slices.Sorted(maps.Keys(m.Manifest.Models)) {
		sc, err := store.CompileModel(storeModel(name, m.Manifest.Models[name]))
		if err != nil {
			return nil, modelsRefusal(err)
		}
		schemas = append(schemas, sc)
	}
	if ctx.Store == nil {
		return nil, modelsRefusal(errors.New("the host has no store"))
	}
	if err := ctx.Store.DBMigrate(ctx, m.Org, m.Name, schemas); err != nil {
		return nil, modelsRefusal(err)
	}
	v.models = store.NewModels(m.Org, schemas...)
	return v, nil
}

// modelsRefusal is a load refused by its models: the module's mistake
// (an *abi.Error: a change stored documents could not follow), or the
// store's failure.
func modelsRefusal(err error) error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		err = abi.Errorf(ae.Code, "models: %s", ae.Message)
	} else {
		err = fmt.Errorf("models: the store cannot migrate the module's models: %w", err)
	}
	return &Refusal{Rule: "manifest models", Err: err}
}

// storeModel converts a manifest's model to the store's.
func storeModel(name string, m policy.Model) store.Model {
	out := store.Model{Name: name, Scope: m.Scope, Additional: m.Additional, Indexes: m.Indexes, Fields: map[string]store.Field{}}
	for fname, f := range m.Fields {
		out.Fields[fname] = store.Field{Type: f.Type, Required: f.Required, Max: f.Max}
	}
	return out
}

// dbOf is the db family's view of env's module (no models without one).
func dbOf(env *Env) *dbView {
	if v, ok := ViewOf[*dbView](env, "db"); ok {
		return v
	}
	return &dbView{}
}

// dbModel finds the declared model a request names, and the caller's
// scope.
func (e *Env) dbModel(op, name string) (*store.Schema, store.DBScope, error) {
	models := dbOf(e).models
	m, ok := models.Lookup(name)
	if !ok {
		declared := "none"
		if names := models.Names(); len(names) > 0 {
			declared = strings.Join(names, ", ")
		}
		return nil, store.DBScope{}, abi.Errorf(abi.CodeInvalidArgument,
			"%s: model %q is not declared by module %s; declare it under models: in its moat.yaml (declared: %s)", op, name, e.Module, declared)
	}
	if owner := models.Owner; owner != "" && owner != e.Principal.Org {
		// A module loaded for one organization keeps that
		// organization's models; another's caller has no business here.
		return nil, store.DBScope{}, abi.Errorf(abi.CodeDenied, "%s: module %s is loaded for another organization", op, e.Module)
	}
	return m, store.DBScope{Org: e.Principal.Org, Module: e.Module, User: e.Principal.User}, nil
}

func dbInsert(env *Env, req *abi.DBInsertRequest) (*abi.DBInsertResponse, error) {
	m, sc, err := env.dbModel(abi.OpDBInsert, req.Model)
	if err != nil {
		return nil, err
	}
	id, v, err := env.Store.DBInsert(env.Context, sc, m, req.Doc, dbOf(env).quota)
	if err != nil {
		return nil, storeError(env, abi.OpDBInsert, err)
	}
	env.SetSubject(id)
	return &abi.DBInsertResponse{ID: id, Version: v}, nil
}

func dbGet(env *Env, req *abi.DBGetRequest) (*abi.DBGetResponse, error) {
	m, sc, err := env.dbModel(abi.OpDBGet, req.Model)
	if err != nil {
		return nil, err
	}
	d, found, err := env.Store.DBGet(env.Context, sc, m, req.ID)
	if err != nil {
		return nil, storeError(env, abi.OpDBGet, err)
	}
	if !found {
		return &abi.DBGetResponse{}, nil
	}
	return &abi.DBGetResponse{Found: true, ID: d.ID, Version: d.Version, Doc: d.Doc, Owner: d.Owner, Created: d.Created, Updated: d.Updated}, nil
}

func dbQuery(env *Env, req *abi.DBQueryRequest) (*abi.DBQueryResponse, error) {
	m, sc, err := env.dbModel(abi.OpDBQuery, req.Model)
	if err != nil {
		return nil, err
	}
	docs, next, err := env.Store.DBQuery(env.Context, sc, m, store.DBQuery{Where: req.Where, Order: req.Order, Limit: req.Limit, After: req.After})
	if err != nil {
		return nil, storeError(env, abi.OpDBQuery, err)
	}
	if docs == nil {
		docs = []abi.DBDoc{}
	}
	return &abi.DBQueryResponse{Docs: docs, Next: next}, nil
}

func dbUpdate(env *Env, req *abi.DBUpdateRequest) (*abi.DBUpdateResponse, error) {
	m, sc, err := env.dbModel(abi.OpDBUpdate, req.Model)
	if err != nil {
		return nil, err
	}
	v, err := env.Store.DBUpdate(env.Context, sc, m, req.ID, req.Set, req.Unset, req.Version, dbOf(env).quota)
	if err != nil {
		return nil, storeError(env, abi.OpDBUpdate, err)
	}
	env.SetSubject(req.ID)
	return &abi.DBUpdateResponse{Version: v}, nil
}

func dbDelete(env *Env, req *abi.DBDeleteRequest) (*abi.DBDeleteResponse, error) {
	m, sc, err := env.dbModel(abi.OpDBDelete, req.Model)
	if err != nil {
		return nil, err
	}
	deleted, err := env.Store.DBDelete(env.Context, sc, m, req.ID, req.Version)
	if err != nil {
		return nil, storeError(env, abi.OpDBDelete, err)
	}
	env.SetSubject(req.ID)
	return &abi.DBDeleteResponse{Deleted: deleted}, nil
}

func dbCount(env *Env, req *abi.DBCountRequest) (*abi.DBCountResponse, error) {
	m, sc, err := env.dbModel(abi.OpDBCount, req.Model)
	if err != nil {
		return nil, err
	}
	n, err := env.Store.DBCount(env.Context, sc, m, req.Where)
	if err != nil {
		return nil, storeError(env, abi.OpDBCount, err)
	}
	return &abi.DBCountResponse{Count: n}, nil
}
