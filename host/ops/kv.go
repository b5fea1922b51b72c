package ops

import (
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/policy"
)

// The kv family: a small key-value store per organization and module. The
// scope comes from Env (the caller's organization and the module's name),
// never from the request, so a guest cannot ask for another scope. The
// bytes it may store are the module's limits.disk (its view, attached at
// load), across the organization's keys and values.

func init() {
	RegisterFamily(Family{
		Name: "kv", Capability: policy.CapabilitySpec{Name: "kv"},
		Attach: func(ctx *AttachContext, _ any) (any, error) {
			return diskQuota(ctx.Module), nil
		},
		Ops: []Op{
			{Name: abi.OpKVGet, Func: Typed(kvGet)},
			{Name: abi.OpKVPut, Func: Typed(kvPut), Mutates: true},
			{Name: abi.OpKVDelete, Func: Typed(kvDelete), Mutates: true},
			{Name: abi.OpKVList, Func: Typed(kvList)},
		},
	})
}

func kvGet(env *Env, req *abi.KVGetRequest) (*abi.KVGetResponse, error) {
	v, found, err := env.Store.KVGet(env.Context, env.Scope(), req.Key)
	if err != nil {
		return nil, storeError(env, abi.OpKVGet, err)
	}
	return &abi.KVGetResponse{Value: v, Found: found}, nil
}

func kvPut(env *Env, req *abi.KVPutRequest) (*abi.Empty, error) {
	if err := env.Store.KVPutWithin(env.Context, env.Scope(), req.Key, req.Value, kvQuota(env)); err != nil {
		return nil, storeError(env, abi.OpKVPut, err)
	}
	return &abi.Empty{}, nil
}

func kvDelete(env *Env, req *abi.KVDeleteRequest) (*abi.KVDeleteResponse, error) {
	deleted, err := env.Store.KVDelete(env.Context, env.Scope(), req.Key)
	if err != nil {
		return nil, storeError(env, abi.OpKVDelete, err)
	}
	return &abi.KVDeleteResponse{Deleted: deleted}, nil
}

func kvList(env *Env, req *abi.KVListRequest) (*abi.KVListResponse, error) {
	if req.Limit < 0 || req.Limit > abi.MaxKVListLimit {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "kv.list: limit %d is outside 0..%d", req.Limit, abi.MaxKVListLimit)
	}
	keys, more, err := env.Store.KVList(env.Context, env.Scope(), req.Prefix, req.After, req.Limit)
	if err != nil {
		return nil, storeError(env, abi.OpKVList, err)
	}
	if keys == nil {
		keys = []string{}
	}
	return &abi.KVListResponse{Keys: keys, More: more}, nil
}

// DiskQuota is the kv family's view of a module: the bytes of stored
// keys and values allowed per organization and module (limits.disk); 0:
// none.
type DiskQuota int64

// diskQuota is m's limits.disk, which kv and knowledge each count apart.
func diskQuota(m ModuleInfo) DiskQuota { return DiskQuota(m.Evaluation.Limits.Disk) }

// kvQuota is the disk quota of env's module (none without a view).
func kvQuota(env *Env) int64 {
	q, _ := ViewOf[DiskQuota](env, "kv")
	return int64(q)
}
