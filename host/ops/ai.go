package ops

import (
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/policy"
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
	RegisterFamily(Family{
		Name: "ai", Capability: policy.CapabilitySpec{Name: "ai"},
		Config:    func() any { return &AIConfig{} },
		Provision: provisionAI,
		Ops: []Op{
			{Name: abi.OpAIComplete, Func: Typed(aiComplete), LeavesSandbox: true},
			{Name: abi.OpAIEmbed, Func: Typed(aiEmbed), LeavesSandbox: true},
		},
	})
}

// AIConfig configures the ai family (host.Config.Families["ai"]): the
// operator's providers, model aliases and budgets, which are the ai:
// section of moat-server.yaml (ai.Config), or a service already made
// from them.
type AIConfig struct {
	ai.Config `yaml:",inline"`
	// Service is a service made from the configuration already (ai.New),
	// for hosts of one process that share one, as moat serve's do: each
	// provider's bound on calls in flight then holds for all of them.
	// Nil: the family makes its own from Config, when Config configures
	// any model (ai.Config.Enabled); none otherwise.
	Service *ai.Service `yaml:"-"`
}

// aiService is the ai family's service: the operator's models (nil: no
// model calls on this host, and knowledge is full text alone), and the
// secrets family's source, where a provider's key may be kept.
type aiService struct {
	models  *ai.Service
	secrets SecretSource
}

func provisionAI(ctx *ProvisionContext, cfg any) (any, error) {
	c := cfg.(*AIConfig)
	s := &aiService{models: c.Service}
	if s.models == nil && c.Config.Enabled() {
		var err error
		if s.models, err = ai.New(c.Config, ctx.Store, ctx.Logger); err != nil {
			return nil, err
		}
	}
	var err error
	s.secrets, err = secretsService(ctx)
	return s, err
}

// aiOf is the ai family's service for env's host (empty when the host
// provisioned none: an Env made by hand).
func aiOf(env *Env) *aiService {
	if s, ok := ServiceOf[*aiService](env, "ai"); ok {
		return s
	}
	return &aiService{}
}

// caller is whom env's model calls are for.
func caller(env *Env, s *aiService) ai.Caller {
	return ai.Caller{Org: env.Principal.Org, Module: env.Module, Secrets: s.secrets}
}

// noModels is the refusal of a model call on a host with no AI service.
func noModels(op string) error {
	return abi.Errorf(abi.CodeUnavailable, "%s: this host has no model providers configured; the operator configures them under ai: in the server configuration (moat serve --config FILE, or moat run --server-config FILE)", op)
}

func aiComplete(env *Env, req *abi.AICompleteRequest) (*abi.AICompleteResponse, error) {
	s := aiOf(env)
	if s.models == nil {
		return nil, noModels(abi.OpAIComplete)
	}
	resp, ev, err := s.models.Complete(env.Context, caller(env, s), req)
	if ev != nil {
		env.SetModelCall(ev)
	}
	return resp, err
}

func aiEmbed(env *Env, req *abi.AIEmbedRequest) (*abi.AIEmbedResponse, error) {
	s := aiOf(env)
	if s.models == nil {
		return nil, noModels(abi.OpAIEmbed)
	}
	resp, ev, err := s.models.Embed(env.Context, caller(env, s), req)
	if ev != nil {
		env.SetModelCall(ev)
	}
	return resp, err
}
