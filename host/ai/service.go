// Package ai is moat's side of model calls: the operator's providers
// (OpenAI-compatible HTTP APIs: hosted ones, vLLM, llama.cpp's server,
// Ollama's /v1), the model aliases guests name, and the daily token
// budgets every call is metered against. The ai op family (host/ops/ai.go)
// and hybrid knowledge (host/ops/knowledge.go) call it; nothing else
// reaches a provider.
//
// A call goes: the alias to its model and provider (a guest never names a
// provider or a provider's model: only the operator's aliases, which its
// grants name) → the request bounded by abi's limits → the provider's key
// (an operator secret, read at each call, or the environment) → a hold on
// the organization's and the module's budgets of the day, atomic in the
// store → a turn among the provider's calls in flight → the HTTP call →
// the reply checked → the hold settled with the tokens the provider
// reported. Every step's failure is an *abi.Error for the guest that
// never holds the key nor the provider's address, and the call's Evidence
// (its id, model, provider, tokens, latency, the budget that refused it)
// goes to the audit trail through the op.
package ai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// SecretSource reads the operator's secrets; ops.SecretSource (the host's
// secret store) satisfies it. A provider's key is the operator's secret of
// its api_key_secret name, read with org "".
type SecretSource interface {
	Secret(ctx context.Context, org, name string) ([]byte, error)
}

// lookupEnv reads a key from moat's environment (a variable of tests).
var lookupEnv = os.Getenv

// Service makes model calls for guests. It is safe for concurrent use, and
// one Service should serve every host of a process, so that each
// provider's bound on calls in flight holds for all of them.
type Service struct {
	cfg       Config
	store     *store.Store
	log       *slog.Logger
	providers map[string]*provider
	now       func() time.Time
}

// New checks cfg (its defaults filled in) and the keys its api_key_env
// variables hold, and makes the Service. Budgets are kept in st.
func New(cfg Config, st *store.Store, logger *slog.Logger) (*Service, error) {
	if st == nil {
		return nil, errors.New("ai: a Service needs the store its budgets are kept in")
	}
	if logger == nil {
		logger = slog.Default()
	}
	cfg = cfg.clone()
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, store: st, log: logger, providers: map[string]*provider{}, now: time.Now}
	for _, name := range sortedKeys(cfg.Providers) {
		p := newProvider(name, cfg.Providers[name])
		if env := p.cfg.APIKeyEnv; env != "" {
			if p.envKey == "" {
				return nil, &ConfigError{Field: "providers." + name + ".api_key_env",
					Msg: "$" + env + " is empty or not set in moat's environment; export it, or keep the key with moat secrets set and name it in api_key_secret"}
			}
			if err := checkKey(p.envKey); err != nil {
				return nil, &ConfigError{Field: "providers." + name + ".api_key_env", Msg: "the value of $" + env + " " + err.Error()}
			}
		}
		s.providers[name] = p
	}
	return s, nil
}

// clone copies c's maps, so the caller's config is never changed.
func (c Config) clone() Config {
	out := c
	out.Providers = make(map[string]ProviderConfig, len(c.Providers))
	for k, v := range c.Providers {
		out.Providers[k] = v
	}
	out.Models = make(map[string]ModelConfig, len(c.Models))
	for k, v := range c.Models {
		out.Models[k] = v
	}
	return out
}

// Config is the configuration the Service runs with, defaults filled in.
func (s *Service) Config() Config { return s.cfg.clone() }

// KnowledgeModel is the model knowledge embeds with ("" when knowledge is
// full text alone), and MinSimilarity the cosine similarity a nearest
// document must pass.
func (s *Service) KnowledgeModel() string { return s.cfg.Knowledge.EmbeddingModel }

// MinSimilarity is knowledge.min_similarity.
func (s *Service) MinSimilarity() float64 { return s.cfg.Knowledge.MinSimilarity }

// Budgets are the operator's default daily budgets.
func (s *Service) Budgets() store.AIBudget {
	return store.AIBudget{OrgDailyTokens: int64(s.cfg.Budgets.OrgDailyTokens), ModuleDailyTokens: int64(s.cfg.Budgets.ModuleDailyTokens)}
}

// Caller is whom a model call is for: its organization and module, whose
// budgets it is charged to, and the secrets a provider's key is read
// from (nil: none, so only providers with an environment key or none
// work).
type Caller struct {
	Org, Module string
	Secrets     SecretSource
}

// Evidence is what one model call leaves for the audit trail. A call
// refused by a budget has Budget set; one that failed after it was sent
// has Err's code in the op's record.
type Evidence struct {
	ModelCallID string
	Model       string // the alias the guest named
	Provider    string
	Usage       abi.AIUsage // what was charged
	Estimated   bool        // the provider reported no usage: Usage is the host's estimate
	Reserved    int64       // the tokens held before the call
	Latency     time.Duration
	Budget      *store.AIBudgetError
}

// Attrs are the evidence as audit attributes.
func (e *Evidence) Attrs() map[string]string {
	a := map[string]string{
		"model": e.Model, "provider": e.Provider,
		"input_tokens":  strconv.FormatInt(e.Usage.InputTokens, 10),
		"output_tokens": strconv.FormatInt(e.Usage.OutputTokens, 10),
		"reserved":      strconv.FormatInt(e.Reserved, 10),
		"latency_ms":    strconv.FormatInt(e.Latency.Milliseconds(), 10),
	}
	if e.Estimated {
		a["usage"] = "estimated"
	}
	return a
}

// EstimateTokens is what the host counts a text as before a provider has
// said: a token per three bytes, rounded up. Tokenizers give English about
// four bytes a token and CJK about three, so this overestimates English
// text by a third, which is the direction a hold must err in; a provider
// that reports no usage is charged this for the input and for the reply.
func EstimateTokens(s string) int64 { return (int64(len(s)) + 2) / 3 }

// estimateMessages counts a conversation: each message's content, plus 4
// per message for its role and delimiters, plus 3 for the reply's start
// (OpenAI's accounting of the chat format).
func estimateMessages(msgs []abi.AIMessage) int64 {
	n := int64(3)
	for _, m := range msgs {
		n += EstimateTokens(m.Content) + 4
	}
	return n
}

// model looks up alias, which must be of kind.
func (s *Service) model(op, alias, kind string) (ModelConfig, *provider, error) {
	m, ok := s.cfg.Models[alias]
	if !ok {
		return m, nil, abi.Errorf(abi.CodeNotFound, "%s: no model %q is configured on this host; name one of the operator's model aliases your grants hold", op, cut(alias, 128))
	}
	if m.Kind != kind {
		want := "ai.complete"
		if m.Kind == KindEmbed {
			want = "ai.embed"
		}
		return m, nil, abi.Errorf(abi.CodeInvalidArgument, "%s: model %s is a %s model; call %s with it, or name a %s model", op, alias, m.Kind, want, kind)
	}
	return m, s.providers[m.Provider], nil
}

// key returns the provider's key for a call ("" for none). Its errors say
// which secret or variable is missing, never what a value holds.
func (s *Service) key(ctx context.Context, op string, p *provider, c Caller) (string, error) {
	fail := func(why string) error {
		s.log.Error("ai: a provider's key is not usable", "provider", p.name, "reason", why)
		return abi.Errorf(abi.CodeUnavailable, "%s: provider %s has no usable key; the operator must set it (%s)", op, p.name, why)
	}
	switch {
	case p.cfg.APIKeyEnv != "":
		if err := checkKey(p.envKey); err != nil {
			return "", fail("$" + p.cfg.APIKeyEnv + " " + err.Error())
		}
		return p.envKey, nil
	case p.cfg.APIKeySecret != "":
		if c.Secrets == nil {
			return "", fail("it is the operator secret " + p.cfg.APIKeySecret + ", and this host has no secret store")
		}
		v, err := c.Secrets.Secret(ctx, "", p.cfg.APIKeySecret)
		if err != nil {
			s.log.Error("ai: reading a provider's key", "provider", p.name, "secret", p.cfg.APIKeySecret, "err", err)
			return "", fail("the operator secret " + p.cfg.APIKeySecret + " could not be read: moat secrets set " + p.cfg.APIKeySecret + " stores it")
		}
		k := string(v)
		if err := checkKey(k); err != nil {
			return "", fail("the operator secret " + p.cfg.APIKeySecret + " " + err.Error())
		}
		return k, nil
	}
	return "", nil
}

// call is one metered call in progress.
type call struct {
	s   *Service
	ev  *Evidence
	c   Caller
	r   store.AIReservation
	p   *provider
	op  string
	key string
}

// begin resolves the key, holds need tokens and waits for a turn at the
// provider. On an error the hold (if any) is released.
func (s *Service) begin(ctx context.Context, op, alias string, p *provider, c Caller, need int64) (*call, error) {
	ev := &Evidence{ModelCallID: audit.NewID(), Model: alias, Provider: p.name, Reserved: need}
	k := &call{s: s, ev: ev, c: c, p: p, op: op}
	var err error
	if k.key, err = s.key(ctx, op, p, c); err != nil {
		return k, err
	}
	k.r, err = s.store.AIReserve(ctx, store.Scope{Org: c.Org, Module: c.Module}, s.now(), need, s.Budgets())
	if err != nil {
		var be *store.AIBudgetError
		if errors.As(err, &be) {
			ev.Budget = be
			return k, &abi.Error{Code: abi.CodeDenied, Message: op + ": " + be.Error()}
		}
		var ae *abi.Error
		if errors.As(err, &ae) {
			return k, ae
		}
		s.log.Error("ai: budget store failure", "op", op, "org", c.Org, "module", c.Module, "err", err)
		return k, abi.Errorf(abi.CodeUnavailable, "%s: the ai budget could not be checked (storage is unavailable); retry later", op)
	}
	select {
	case p.slots <- struct{}{}:
		return k, nil
	case <-ctx.Done():
		k.settle(0)
		return k, abi.Errorf(abi.CodeUnavailable, "%s: provider %s is at its limit of %d calls in flight, and the deadline passed while this call waited; retry later",
			op, p.name, cap(p.slots))
	}
}

// settle ends the call's hold with used tokens charged, and frees its
// turn. It runs after the invocation's context may have ended: a hold
// must not outlive its call for want of a context.
func (k *call) settle(used int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.s.store.AISettle(ctx, k.r, used); err != nil {
		k.s.log.Error("ai: a model call's tokens were not settled: its hold stays counted until the day ends",
			"model_call_id", k.ev.ModelCallID, "org", k.c.Org, "module", k.c.Module, "tokens", k.r.Tokens, "err", err)
	}
}

func (k *call) release() { <-k.p.slots }

// failed records a provider failure: it is logged for the operator
// (scrubbed), and charged: what the provider reported, when it said (a
// refusal carries its usage); nothing when it answered with an error (a
// provider does not bill those); and the input's estimate when it never
// answered, since it may have processed the input all the same.
func (k *call) failed(err error, inputEstimate int64, usage abi.AIUsage, reported bool) error {
	var ce *callError
	if !errors.As(err, &ce) {
		k.settle(0)
		return err
	}
	switch {
	case reported:
		k.ev.Usage = usage
	case !ce.answered:
		k.ev.Usage, k.ev.Estimated = abi.AIUsage{InputTokens: inputEstimate}, true
	}
	k.settle(k.ev.Usage.InputTokens + k.ev.Usage.OutputTokens)
	k.s.log.Warn("ai: provider call failed", "op", k.op, "provider", k.p.name, "model", k.ev.Model,
		"model_call_id", k.ev.ModelCallID, "org", k.c.Org, "module", k.c.Module, "code", ce.err.Code, "detail", ce.detail)
	return ce.err
}

// Complete runs req for c: see the package comment. Evidence is nil when
// the request was refused before it became a model call (a model not
// configured, a request out of bounds); otherwise it describes the call,
// also when it failed.
func (s *Service) Complete(ctx context.Context, c Caller, req *abi.AICompleteRequest) (*abi.AICompleteResponse, *Evidence, error) {
	const op = abi.OpAIComplete
	m, p, err := s.model(op, req.Model, KindChat)
	if err != nil {
		return nil, nil, err
	}
	maxTokens, err := checkComplete(req, m)
	if err != nil {
		return nil, nil, err
	}
	wire := &chatRequest{Model: m.Model, Messages: req.Messages, MaxTokens: maxTokens, Temperature: req.Temperature}
	if len(req.JSONSchema) > 0 {
		wire.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: &schemaSpec{Name: "reply", Schema: req.JSONSchema}}
	}
	input := estimateMessages(req.Messages)
	k, err := s.begin(ctx, op, req.Model, p, c, input+int64(maxTokens))
	if err != nil {
		return nil, k.ev, err
	}
	defer k.release()
	start := time.Now()
	tctx, span := traceCall(ctx, op, k.ev)
	text, usage, reported, err := p.complete(tctx, k.key, wire)
	k.ev.Latency = time.Since(start)
	endCall(span, usage, err)
	if err != nil {
		return nil, k.ev, k.failed(err, input, usage, reported)
	}
	if !reported {
		usage, k.ev.Estimated = abi.AIUsage{InputTokens: input, OutputTokens: EstimateTokens(text)}, true
	}
	k.ev.Usage = usage
	k.settle(usage.InputTokens + usage.OutputTokens)
	if len(req.JSONSchema) > 0 && !json.Valid([]byte(text)) {
		return nil, k.ev, abi.Errorf(abi.CodeUnavailable, "%s: model %s's reply is not JSON, though the request gave a json_schema; retry, or ask for JSON in the prompt too", op, req.Model)
	}
	return &abi.AICompleteResponse{Text: text, Usage: usage, ModelCallID: k.ev.ModelCallID}, k.ev, nil
}

// checkComplete bounds a completion request before anything is sent, and
// returns the max_tokens to send: the request's, or the model's
// max_output_tokens.
func checkComplete(req *abi.AICompleteRequest, m ModelConfig) (int, error) {
	const op = abi.OpAIComplete
	switch n := len(req.Messages); {
	case n == 0:
		return 0, abi.Errorf(abi.CodeInvalidArgument, "%s: messages is empty; send at least one {\"role\":\"user\",\"content\":...}", op)
	case n > abi.MaxAIMessages:
		return 0, abi.Errorf(abi.CodeTooLarge, "%s: %d messages, over the limit of %d; send fewer (summarize the older turns)", op, n, abi.MaxAIMessages)
	}
	total := 0
	for i, msg := range req.Messages {
		switch msg.Role {
		case abi.RoleSystem, abi.RoleUser, abi.RoleAssistant:
		default:
			return 0, abi.Errorf(abi.CodeInvalidArgument, "%s: messages[%d].role %q is not system, user or assistant", op, i, cut(msg.Role, 32))
		}
		total += len(msg.Content)
	}
	if total > abi.MaxAIPromptBytes {
		return 0, abi.Errorf(abi.CodeTooLarge, "%s: the messages' content is %d bytes, over the limit of %d; send less", op, total, abi.MaxAIPromptBytes)
	}
	switch {
	case req.MaxTokens < 0:
		return 0, abi.Errorf(abi.CodeInvalidArgument, "%s: max_tokens %d is negative; give 1 to %d, or 0 for the model's default", op, req.MaxTokens, m.MaxOutputTokens)
	case req.MaxTokens > m.MaxOutputTokens:
		return 0, abi.Errorf(abi.CodeInvalidArgument, "%s: max_tokens %d is over model %s's limit of %d (the operator's max_output_tokens); ask for at most %d",
			op, req.MaxTokens, req.Model, m.MaxOutputTokens, m.MaxOutputTokens)
	}
	if t := req.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 2) {
		return 0, abi.Errorf(abi.CodeInvalidArgument, "%s: temperature %v is outside 0 to 2", op, *t)
	}
	if s := req.JSONSchema; len(s) > 0 {
		if len(s) > abi.MaxAISchemaBytes {
			return 0, abi.Errorf(abi.CodeTooLarge, "%s: json_schema is %d bytes, over the limit of %d", op, len(s), abi.MaxAISchemaBytes)
		}
		if err := checkSchema(s); err != nil {
			return 0, abi.Errorf(abi.CodeInvalidArgument, "%s: json_schema %v", op, err)
		}
	}
	if req.MaxTokens == 0 {
		return m.MaxOutputTokens, nil
	}
	return req.MaxTokens, nil
}

// maxSchemaDepth bounds a json_schema's nesting: it is passed to a
// provider whose parser the host does not know.
const maxSchemaDepth = 64

// checkSchema checks that s is a JSON object nested at most
// maxSchemaDepth deep.
func checkSchema(s json.RawMessage) error {
	if !json.Valid(s) {
		return fmt.Errorf("is not JSON")
	}
	depth, max, inString, escaped := 0, 0, false, false
	first := byte(0)
	for _, c := range s {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			max = maxInt(max, depth)
		case '}', ']':
			depth--
		case ' ', '\t', '\n', '\r':
			continue
		}
		if first == 0 {
			first = c
		}
	}
	switch {
	case first != '{':
		return fmt.Errorf("is not a JSON object; give a schema like {\"type\":\"object\",...}")
	case max > maxSchemaDepth:
		return fmt.Errorf("is nested %d deep, over the limit of %d", max, maxSchemaDepth)
	}
	return nil
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// Embed returns a vector for each of req.Input; Evidence as Complete's.
func (s *Service) Embed(ctx context.Context, c Caller, req *abi.AIEmbedRequest) (*abi.AIEmbedResponse, *Evidence, error) {
	const op = abi.OpAIEmbed
	m, p, err := s.model(op, req.Model, KindEmbed)
	if err != nil {
		return nil, nil, err
	}
	switch n := len(req.Input); {
	case n == 0:
		return nil, nil, abi.Errorf(abi.CodeInvalidArgument, "%s: input is empty; send at least one text", op)
	case n > abi.MaxAIEmbedInputs:
		return nil, nil, abi.Errorf(abi.CodeTooLarge, "%s: %d inputs, over the limit of %d; send them in several calls", op, n, abi.MaxAIEmbedInputs)
	}
	total, input := 0, int64(0)
	for i, in := range req.Input {
		if in == "" {
			return nil, nil, abi.Errorf(abi.CodeInvalidArgument, "%s: input[%d] is empty; every input needs text", op, i)
		}
		total += len(in)
		input += EstimateTokens(in)
	}
	if total > abi.MaxAIEmbedBytes {
		return nil, nil, abi.Errorf(abi.CodeTooLarge, "%s: the inputs are %d bytes, over the limit of %d; send them in several calls", op, total, abi.MaxAIEmbedBytes)
	}
	k, err := s.begin(ctx, op, req.Model, p, c, input)
	if err != nil {
		return nil, k.ev, err
	}
	defer k.release()
	start := time.Now()
	tctx, span := traceCall(ctx, op, k.ev)
	vecs, usage, reported, err := p.embed(tctx, k.key, m.Model, req.Input, m.Dimensions)
	k.ev.Latency = time.Since(start)
	endCall(span, usage, err)
	if err != nil {
		return nil, k.ev, k.failed(err, input, usage, reported)
	}
	if !reported {
		usage, k.ev.Estimated = abi.AIUsage{InputTokens: input}, true
	}
	usage.OutputTokens = 0
	k.ev.Usage = usage
	k.settle(usage.InputTokens)
	return &abi.AIEmbedResponse{Vectors: vecs, Usage: usage, ModelCallID: k.ev.ModelCallID}, k.ev, nil
}

// traceCall opens a model call's client span (tracing on only), under the
// op's: the model alias, the provider, the model call id the audit trail
// records, and at its end the tokens the provider reported. Never a
// prompt, a reply, a vector or the provider's key. The trace context is
// not sent to the provider.
func traceCall(ctx context.Context, op string, ev *Evidence) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, nil
	}
	return tracing.Start(ctx, "moat.ai "+op, trace.SpanKindClient, tracing.KeyModel.String(ev.Model),
		tracing.KeyProvider.String(ev.Provider), attribute.String("moat.ai.model_call_id", ev.ModelCallID))
}

func endCall(span trace.Span, usage abi.AIUsage, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", usage.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", usage.OutputTokens))
	code := "ok"
	if err != nil {
		code = string(abi.CodeOf(err))
		if code == "" {
			code = string(abi.CodeUnavailable)
		}
	}
	tracing.End(span, code, err)
}
