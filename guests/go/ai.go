package moat

import (
	"encoding/json"

	"github.com/moat-sandbox/moat/abi"
)

// AIClient calls models through the providers the operator configured
// (OpenAI-compatible APIs: hosted ones, vLLM, llama.cpp's server,
// Ollama). Use the package variable [AI]. A module names models by the
// operator's aliases and reaches only those its grants name
// (capabilities: {ai: [small-chat]}). Token budgets per organization and
// per module per day are checked before each call: a call over one fails
// with abi.CodeDenied naming the budget. Every call is audited as a model
// call, with the id it returns (ModelCallID) and the invocation's
// correlation id.
type AIClient struct{}

// AI calls models.
var AI AIClient

// SystemMessage makes the message that sets a conversation's rules.
func SystemMessage(content string) abi.AIMessage {
	return abi.AIMessage{Role: abi.RoleSystem, Content: content}
}

// UserMessage makes a message of the user's.
func UserMessage(content string) abi.AIMessage {
	return abi.AIMessage{Role: abi.RoleUser, Content: content}
}

// AssistantMessage makes a message of the model's, for a conversation's
// history.
func AssistantMessage(content string) abi.AIMessage {
	return abi.AIMessage{Role: abi.RoleAssistant, Content: content}
}

// CompleteOptions tune a completion; the zero value leaves everything to
// the provider's defaults (capped by the operator).
type CompleteOptions struct {
	// MaxTokens bounds the reply, 1..abi.MaxAIOutputTokens (0: the
	// provider's default).
	MaxTokens int
	// Temperature, when set, is 0..2: t := 0.2; opts.Temperature = &t.
	Temperature *float64
	// JSONSchema, when set, asks for a reply that is JSON matching it
	// (anything that marshals to a JSON Schema object: a map, a struct,
	// a json.RawMessage); the host checks the reply is JSON, which
	// Completion.Decode then reads.
	JSONSchema any
}

// Completion is a model's reply: its text, what it cost and the id of
// the model call in the audit trail.
type Completion struct {
	Text        string
	Usage       abi.AIUsage
	ModelCallID string
}

// Decode unmarshals the reply's text, JSON when the call set JSONSchema,
// into v.
func (c *Completion) Decode(v any) error {
	if err := json.Unmarshal([]byte(c.Text), v); err != nil {
		return abi.Errorf(abi.CodeInvalidArgument, "model call %s: decode the reply into %T: %v", c.ModelCallID, v, err)
	}
	return nil
}

// Complete asks model (an operator's alias) to continue messages.
//
//	c, err := moat.AI.Complete("small-chat", []abi.AIMessage{
//		moat.SystemMessage("Answer in one sentence."),
//		moat.UserMessage(question),
//	}, moat.CompleteOptions{MaxTokens: 200})
func (AIClient) Complete(model string, messages []abi.AIMessage, opts CompleteOptions) (*Completion, error) {
	req := abi.AICompleteRequest{Model: model, Messages: messages, MaxTokens: opts.MaxTokens, Temperature: opts.Temperature}
	if opts.JSONSchema != nil {
		schema, err := json.Marshal(opts.JSONSchema)
		if err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "op %s: encode the JSON schema: %v", abi.OpAIComplete, err)
		}
		if string(schema) == "null" {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "op %s: the JSON schema is null; leave JSONSchema nil for a plain-text reply", abi.OpAIComplete)
		}
		req.JSONSchema = schema
	}
	if req.Messages == nil {
		req.Messages = []abi.AIMessage{}
	}
	var resp abi.AICompleteResponse
	if err := Call(abi.OpAIComplete, req, &resp); err != nil {
		return nil, err
	}
	return &Completion{Text: resp.Text, Usage: resp.Usage, ModelCallID: resp.ModelCallID}, nil
}

// Embedding is one vector per input, in order, what the call cost and
// the id of the model call.
type Embedding struct {
	Vectors     [][]float32
	Usage       abi.AIUsage
	ModelCallID string
}

// Embed asks model (an operator's alias) for one vector per input.
func (AIClient) Embed(model string, input []string) (*Embedding, error) {
	if input == nil {
		input = []string{}
	}
	var resp abi.AIEmbedResponse
	if err := Call(abi.OpAIEmbed, abi.AIEmbedRequest{Model: model, Input: input}, &resp); err != nil {
		return nil, err
	}
	if len(resp.Vectors) != len(input) {
		return nil, abi.Errorf(abi.CodeInternal, "op %s: %d inputs but the host returned %d vectors", abi.OpAIEmbed, len(input), len(resp.Vectors))
	}
	return &Embedding{Vectors: resp.Vectors, Usage: resp.Usage, ModelCallID: resp.ModelCallID}, nil
}
