package abi

import "encoding/json"

// The ai family: model calls through providers the operator configured
// (OpenAI-compatible HTTP APIs: hosted ones, vLLM, llama.cpp's server,
// Ollama). A module names models by the operator's aliases, and reaches
// only the models its grants name (capability ai, granted per model).
// Token budgets per organization and per module per day are checked
// before a call and charged from its usage; a call over budget is
// refused with CodeDenied, naming the budget. Every call is audited as a
// model call, with its id (returned as ModelCallID), the model, the
// tokens, the latency and the invocation's correlation id.
const (
	OpAIComplete = "ai.complete"
	OpAIEmbed    = "ai.embed"
)

// AI limits, enforced by the host.
const (
	MaxAIMessages     = 256
	MaxAIPromptBytes  = 1 << 20 // all messages' content together
	MaxAIOutputTokens = 32_768
	MaxAIEmbedInputs  = 256
	MaxAIEmbedBytes   = 1 << 20 // all inputs together
	MaxAISchemaBytes  = 64 << 10
)

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// AIMessage is one turn of a conversation.
type AIMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// AIUsage is what a call cost, in the provider's tokens.
type AIUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// AICompleteRequest asks Model (an operator's alias) to continue Messages.
// MaxTokens is 1 up to the model's max_output_tokens, which the operator
// sets (at most MaxAIOutputTokens); 0 asks for that most, and more is
// refused with CodeInvalidArgument. The call holds the input's estimate
// plus MaxTokens against the day's budgets, so a smaller MaxTokens lets
// a call through a nearly spent budget. Temperature, when set, is 0..2.
// JSONSchema, when set, is a JSON object (at most MaxAISchemaBytes, 64
// deep) asking for a reply that is JSON matching it (the provider's
// structured output; the host checks the reply is JSON).
type AICompleteRequest struct {
	Model       string          `json:"model"`
	Messages    []AIMessage     `json:"messages"`
	MaxTokens   int             `json:"max_tokens,omitempty"`
	Temperature *float64        `json:"temperature,omitempty"`
	JSONSchema  json.RawMessage `json:"json_schema,omitempty"`
}

// OpTarget is the model: ai is granted per model.
func (r *AICompleteRequest) OpTarget() string { return r.Model }

// AICompleteResponse is the model's reply.
type AICompleteResponse struct {
	Text        string  `json:"text"`
	Usage       AIUsage `json:"usage"`
	ModelCallID string  `json:"model_call_id"`
}

// AIEmbedRequest asks Model for one vector per input: 1 to
// MaxAIEmbedInputs inputs, none empty, MaxAIEmbedBytes in all.
type AIEmbedRequest struct {
	Model string   `json:"model"`
	Input []string `json:"input"`
}

// OpTarget is the model: ai is granted per model.
func (r *AIEmbedRequest) OpTarget() string { return r.Model }

// AIEmbedResponse holds a vector per input, in order.
type AIEmbedResponse struct {
	Vectors     [][]float32 `json:"vectors"`
	Usage       AIUsage     `json:"usage"`
	ModelCallID string      `json:"model_call_id"`
}
