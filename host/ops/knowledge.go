package ops

import (
	"context"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// The knowledge family: documents with metadata in named collections,
// searched by ranked full text (abi/knowledge.go has the rules). The
// capability is granted per collection, like db's: each request's
// collection is its target (OpTarget), checked by the gate once the
// request is decoded. The scope comes from Env (the caller's organization,
// user and the module, and the collection's scope from the module's
// manifest), never from the request, and the store applies it and checks
// everything a guest sends before any of it reaches SQL. Adds and deletes
// mutate storage, so the host audits each with a mutation id and the
// collection.
//
// With an embedding model configured for knowledge (the operator's
// ai.knowledge.embedding_model), an add embeds the document and a search
// its query: each a model call charged to the organization's and the
// module's budgets and audited as one (SetModelCall), though the module
// needs no ai grant for it (the operator chose the model, for knowledge
// as a whole). A search then ranks hybrid (store/hybrid.go). A model call
// refused (a budget, a provider down) fails the op: a document stored
// without its vector would silently drop out of the nearest ones.

func init() {
	RegisterFamily(Family{
		Name: "knowledge", Capability: policy.CapabilitySpec{Name: "knowledge"},
		Attach: func(ctx *AttachContext, _ any) (any, error) {
			return &knowledgeView{quota: int64(diskQuota(ctx.Module)), manifest: ctx.Module.Manifest}, nil
		},
		Ops: []Op{
			{Name: abi.OpKnowledgeAdd, Func: Typed(knowledgeAdd), Mutates: true},
			{Name: abi.OpKnowledgeDelete, Func: Typed(knowledgeDelete), Mutates: true},
			{Name: abi.OpKnowledgeSearch, Func: Typed(knowledgeSearch)},
		},
	})
}

// knowledgeView is the knowledge family's view of a module: its disk
// limit and its manifest, which says each collection's scope.
type knowledgeView struct {
	quota    int64 // limits.disk; 0: none
	manifest *policy.Manifest
}

// knowledgeOf is the knowledge family's view of env's module (every
// collection org-scoped, no byte quota, without one).
func knowledgeOf(env *Env) *knowledgeView {
	if v, ok := ViewOf[*knowledgeView](env, "knowledge"); ok {
		return v
	}
	return &knowledgeView{}
}

// knowledgeQuota is the quota of an add: abi.MaxKnowledgeDocuments
// documents, and the module's disk limit (limits.disk, none when unset)
// for their bytes, counted apart from its kv data.
func knowledgeQuota(env *Env) store.KnowledgeQuota {
	return store.KnowledgeQuota{Documents: abi.MaxKnowledgeDocuments, Bytes: knowledgeOf(env).quota}
}

// userScoped reports whether the module's manifest declares collection
// scope: user, which the store then applies to the caller's user.
func (e *Env) userScoped(collection string) bool {
	mf := knowledgeOf(e).manifest
	return mf != nil && mf.KnowledgeScope(collection) == abi.DBScopeUser
}

func knowledgeAdd(env *Env, req *abi.KnowledgeAddRequest) (*abi.KnowledgeAddResponse, error) {
	doc := store.KnowledgeDoc{Collection: req.Collection, ID: req.ID, Text: req.Text, Meta: req.Meta, Owner: env.Principal.User,
		UserScoped: env.userScoped(req.Collection), Embed: knowledgeEmbedder(env)}
	replaced, err := env.Store.KnowledgeAdd(env.Context, env.Scope(), doc, knowledgeQuota(env))
	if err != nil {
		return nil, storeError(env, abi.OpKnowledgeAdd, err)
	}
	return &abi.KnowledgeAddResponse{Replaced: replaced}, nil
}

func knowledgeDelete(env *Env, req *abi.KnowledgeDeleteRequest) (*abi.KnowledgeDeleteResponse, error) {
	deleted, err := env.Store.KnowledgeDelete(env.Context, env.Scope(), store.KnowledgeKey{
		Collection: req.Collection, ID: req.ID, User: env.Principal.User, UserScoped: env.userScoped(req.Collection)})
	if err != nil {
		return nil, storeError(env, abi.OpKnowledgeDelete, err)
	}
	return &abi.KnowledgeDeleteResponse{Deleted: deleted}, nil
}

func knowledgeSearch(env *Env, req *abi.KnowledgeSearchRequest) (*abi.KnowledgeSearchResponse, error) {
	q := store.KnowledgeQuery{Collection: req.Collection, Query: req.Query, Limit: req.Limit, Filter: req.Filter, Embed: knowledgeEmbedder(env),
		User: env.Principal.User, UserScoped: env.userScoped(req.Collection)}
	if m, ok := ServiceOf[KnowledgeModels](env, "ai"); ok {
		q.MinSimilarity = m.MinSimilarity()
	}
	hits, err := env.Store.KnowledgeSearch(env.Context, env.Scope(), q)
	if err != nil {
		return nil, storeError(env, abi.OpKnowledgeSearch, err)
	}
	resp := &abi.KnowledgeSearchResponse{Hits: make([]abi.KnowledgeHit, len(hits))}
	for i, h := range hits {
		resp.Hits[i] = abi.KnowledgeHit{ID: h.ID, Score: h.Score, Snippet: h.Snippet, Meta: h.Meta}
	}
	return resp, nil
}

// KnowledgeModels is the ai family's service as the knowledge family
// reads it (host/ai registers the family and implements it): the
// operator's embedding model for knowledge ("" for none), the similarity
// below which a vector hit is dropped, and one embedding charged to the
// invocation's organization and module, which records its evidence on
// env (SetModelCall).
type KnowledgeModels interface {
	KnowledgeModel() string
	MinSimilarity() float64
	EmbedText(ctx context.Context, env *Env, model, text string) ([]float32, error)
}

// knowledgeEmbedder embeds a document's text or a query with the
// operator's knowledge model, as a model call of the invocation; nil
// when none is configured.
func knowledgeEmbedder(env *Env) store.Embedder {
	m, ok := ServiceOf[KnowledgeModels](env, "ai")
	if !ok || m.KnowledgeModel() == "" {
		return nil
	}
	model := m.KnowledgeModel()
	return func(ctx context.Context, text string) (store.Vector, error) {
		v, err := m.EmbedText(ctx, env, model, text)
		if err != nil {
			return store.Vector{}, err
		}
		return store.Vector{Model: model, Values: v}, nil
	}
}
