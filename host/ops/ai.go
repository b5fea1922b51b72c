package ops

import (
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ai"
)

// The ai family: model calls through the operator's providers
// (abi/ai.go has the contract, host/ai the calls). The capability is
// granted per model: each request's model alias is its target
// (OpTarget), checked by the gate once the request is decoded, so a
// module reaches exactly the aliases its grants name and never a
// provider or a provider's model by name. The call is charged to the
// invocation's organization and module (from Env, never the request),
// and its evidence (SetModelCall) makes the host's audit record of the
// op a model call: id, model, provider, tokens, latency, or the budget
// that refused it.

func init() {
	Register(Op{Name: abi.OpAIComplete, Capability: "ai", Func: Typed(aiComplete), LeavesSandbox: true})
	Register(Op{Name: abi.OpAIEmbed, Capability: "ai", Func: Typed(aiEmbed), LeavesSandbox: true})
}

// caller is whom env's model calls are for.
func caller(env *Env) ai.Caller {
	return ai.Caller{Org: env.Principal.Org, Module: env.Module, Secrets: env.Secrets}
}

// noModels is the refusal of a model call on a host with no AI service.
func noModels(op string) error {
	return abi.Errorf(abi.CodeUnavailable, "%s: this host has no model providers configured; the operator configures them under ai: in the server configuration (moat serve --config FILE, or moat run --server-config FILE)", op)
}

func aiComplete(env *Env, req *abi.AICompleteRequest) (*abi.AICompleteResponse, error) {
	if env.AI == nil {
		return nil, noModels(abi.OpAIComplete)
	}
	resp, ev, err := env.AI.Complete(env.Context, caller(env), req)
	if ev != nil {
		env.SetModelCall(ev)
	}
	return resp, err
}

func aiEmbed(env *Env, req *abi.AIEmbedRequest) (*abi.AIEmbedResponse, error) {
	if env.AI == nil {
		return nil, noModels(abi.OpAIEmbed)
	}
	resp, ev, err := env.AI.Embed(env.Context, caller(env), req)
	if ev != nil {
		env.SetModelCall(ev)
	}
	return resp, err
}
