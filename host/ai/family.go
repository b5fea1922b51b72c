package ai

import (
	"context"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/policy"
)

// The ai family: model calls through the operator's providers
// (abi/ai.go has the contract, Service the calls). It registers itself
// here, beside its service, rather than in host/ops: the op table then
// does not import the model client, and the knowledge family reaches the
// service through the interface it declares (ops.KnowledgeModels). The capability is
// granted per model: each request's model alias is its target
// (OpTarget), checked by the gate once the request is decoded, so a
// module reaches exactly the aliases its grants name and never a
// provider or a provider's model by name. The call is charged to the
// invocation's organization and module (from Env, never the request),
// and its evidence (SetModelCall) makes the host's audit record of the
// op a model call: id, model, provider, tokens, latency, or the budget
// that refused it.

func init() {
	ops.RegisterFamily(ops.Family{
		Name: "ai", Capability: policy.CapabilitySpec{Name: "ai"},
		Config:    func() any { return &FamilyConfig{} },
		Provision: provisionFamily,
		Ops: []ops.Op{
			{Name: abi.OpAIComplete, Func: ops.Typed(aiComplete), LeavesSandbox: true},
			{Name: abi.OpAIEmbed, Func: ops.Typed(aiEmbed), LeavesSandbox: true},
		},
	})
}

// FamilyConfig configures the ai family (host.Config.Families["ai"]):
// the operator's providers, model aliases and budgets, which are the ai:
// section of moat-server.yaml (Config), or a service already made from
// them.
type FamilyConfig struct {
	Config `yaml:",inline"`
	// Service is a service made from the configuration already (New),
	// for hosts of one process that share one, as moat serve's do: each
	// provider's bound on calls in flight then holds for all of them.
	// Nil: the family makes its own from Config, when Config configures
	// any model (Config.Enabled); none otherwise.
	Service *Service `yaml:"-"`
}

// familyService is the ai family's service: the operator's models (nil:
// no model calls on this host, and knowledge is full text alone), and
// the secrets family's source, where a provider's key may be kept.
type familyService struct {
	models  *Service
	secrets ops.SecretSource
}

// The knowledge family embeds with the operator's knowledge model
// through the ai family's service.
var _ ops.KnowledgeModels = (*familyService)(nil)

func provisionFamily(ctx *ops.ProvisionContext, cfg any) (any, error) {
	c := cfg.(*FamilyConfig)
	s := &familyService{models: c.Service}
	if s.models == nil && c.Config.Enabled() {
		var err error
		if s.models, err = New(c.Config, ctx.Store, ctx.Logger); err != nil {
			return nil, err
		}
	}
	sec, err := ctx.Service("secrets")
	s.secrets, _ = sec.(ops.SecretSource)
	if s.models == nil {
		return nil, err // knowledge is full text alone; ai.* answer unavailable
	}
	return s, err
}

// aiOf is the ai family's service for env's host (empty when the host
// provisioned none: no model configured, or an Env made by hand).
func aiOf(env *ops.Env) *familyService {
	if s, ok := ops.ServiceOf[*familyService](env, "ai"); ok {
		return s
	}
	return &familyService{}
}

// caller is whom env's model calls are for.
func caller(env *ops.Env, s *familyService) Caller {
	return Caller{Org: env.Principal.Org, Module: env.Module, Secrets: s.secrets}
}

// KnowledgeModel implements ops.KnowledgeModels.
func (s *familyService) KnowledgeModel() string { return s.models.KnowledgeModel() }

// MinSimilarity implements ops.KnowledgeModels.
func (s *familyService) MinSimilarity() float64 { return s.models.MinSimilarity() }

// EmbedText implements ops.KnowledgeModels: one embedding of text with
// model, charged to env's organization and module and recorded as the
// call's model call.
func (s *familyService) EmbedText(ctx context.Context, env *ops.Env, model, text string) ([]float32, error) {
	resp, ev, err := s.models.Embed(ctx, caller(env, s), &abi.AIEmbedRequest{Model: model, Input: []string{text}})
	if ev != nil {
		env.SetModelCall(ev)
	}
	if err != nil {
		return nil, err
	}
	return resp.Vectors[0], nil
}

// noModels is the refusal of a model call on a host with no AI service.
func noModels(op string) error {
	return abi.Errorf(abi.CodeUnavailable, "%s: this host has no model providers configured; the operator configures them under ai: in the server configuration (moat serve --config FILE, or moat run --server-config FILE)", op)
}

func aiComplete(env *ops.Env, req *abi.AICompleteRequest) (*abi.AICompleteResponse, error) {
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

func aiEmbed(env *ops.Env, req *abi.AIEmbedRequest) (*abi.AIEmbedResponse, error) {
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
