package ops

import (
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
// every statement. The model comes from the module's load (Env.Models),
// so a guest can only use models its manifest declared, with the fields
// and types declared there.

func init() {
	RegisterFamily(Family{
		Name: "db", Capability: policy.CapabilitySpec{Name: "db"},
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

// dbModel finds the declared model a request names, and the caller's
// scope.
func (e *Env) dbModel(op, name string) (*store.Schema, store.DBScope, error) {
	m, ok := e.Models.Lookup(name)
	if !ok {
		declared := "none"
		if names := e.Models.Names(); len(names) > 0 {
			declared = strings.Join(names, ", ")
		}
		return nil, store.DBScope{}, abi.Errorf(abi.CodeInvalidArgument,
			"%s: model %q is not declared by module %s; declare it under models: in its moat.yaml (declared: %s)", op, name, e.Module, declared)
	}
	if owner := e.Models.Owner; owner != "" && owner != e.Principal.Org {
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
	id, v, err := env.Store.DBInsert(env.Context, sc, m, req.Doc, env.DBQuota)
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
	v, err := env.Store.DBUpdate(env.Context, sc, m, req.ID, req.Set, req.Unset, req.Version, env.DBQuota)
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
