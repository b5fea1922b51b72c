package moat

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// TestAI: Complete and Embed send the contract's requests (a temperature
// of 0 is sent, an unset one is not; a schema as JSON), read the replies,
// and keep the host's codes; what cannot be a schema is refused in the
// guest.
func TestAI(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	var sent []string
	h.ops[abi.OpAIComplete] = func(b []byte) ([]byte, error) {
		sent = append(sent, string(b))
		var r abi.AICompleteRequest
		if err := abi.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Model == "big-chat" {
			return nil, abi.Errorf(abi.CodeDenied, "ai budget of organization acme for today is spent (limits.ai_tokens_org)")
		}
		text := "plain"
		if r.JSONSchema != nil {
			text = `{"answer":"forty-two"}`
		}
		return abi.Marshal(abi.AICompleteResponse{Text: text, Usage: abi.AIUsage{InputTokens: 12, OutputTokens: 3}, ModelCallID: "mc-1"})
	}
	h.ops[abi.OpAIEmbed] = func(b []byte) ([]byte, error) {
		sent = append(sent, string(b))
		var r abi.AIEmbedRequest
		if err := abi.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		vectors := [][]float32{{0.5, -0.25}, {1, 2}}[:min(2, len(r.Input))]
		if r.Model == "short" {
			vectors = vectors[:1]
		}
		return abi.Marshal(abi.AIEmbedResponse{Vectors: vectors, Usage: abi.AIUsage{InputTokens: 4}, ModelCallID: "mc-2"})
	}

	temp := 0.25
	c, err := AI.Complete("small-chat", []abi.AIMessage{SystemMessage("Be brief."), UserMessage("hi \"there\""), AssistantMessage("hello")},
		CompleteOptions{MaxTokens: 64, Temperature: &temp})
	if err != nil || *c != (Completion{Text: "plain", Usage: abi.AIUsage{InputTokens: 12, OutputTokens: 3}, ModelCallID: "mc-1"}) {
		t.Fatalf("Complete = %+v, %v", c, err)
	}
	zero := 0.0
	if _, err := AI.Complete("small-chat", nil, CompleteOptions{Temperature: &zero}); err != nil {
		t.Fatal(err)
	}
	c, err = AI.Complete("small-chat", []abi.AIMessage{UserMessage("answer?")}, CompleteOptions{
		JSONSchema: map[string]any{"type": "object", "properties": map[string]any{"answer": map[string]string{"type": "string"}}}})
	var answer struct{ Answer string }
	if err != nil || c.Decode(&answer) != nil || answer.Answer != "forty-two" {
		t.Fatalf("Complete with a schema = %+v, %v; decoded %+v", c, err, answer)
	}
	if _, err := AI.Complete("small-chat", nil, CompleteOptions{JSONSchema: json.RawMessage(`{"type":"object"}`)}); err != nil {
		t.Fatal(err)
	}
	e, err := AI.Embed("small-embed", []string{"a", "b"})
	if err != nil || !reflect.DeepEqual(e.Vectors, [][]float32{{0.5, -0.25}, {1, 2}}) || e.Usage.InputTokens != 4 || e.ModelCallID != "mc-2" {
		t.Fatalf("Embed = %+v, %v", e, err)
	}
	want := []string{
		`{"model":"small-chat","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi \"there\""},{"role":"assistant","content":"hello"}],"max_tokens":64,"temperature":0.25}`,
		`{"model":"small-chat","messages":[],"temperature":0}`,
		`{"model":"small-chat","messages":[{"role":"user","content":"answer?"}],"json_schema":{"properties":{"answer":{"type":"string"}},"type":"object"}}`,
		`{"model":"small-chat","messages":[],"json_schema":{"type":"object"}}`,
		`{"model":"small-embed","input":["a","b"]}`,
	}
	for i := range want {
		if at(sent, i) != want[i] {
			t.Errorf("request %d = %s\nwant %s", i, at(sent, i), want[i])
		}
	}

	var ae *abi.Error
	if _, err := AI.Complete("big-chat", nil, CompleteOptions{}); !errors.As(err, &ae) || ae.Code != abi.CodeDenied || ae.Message == "" {
		t.Errorf("over budget = %v; want denied naming the budget", err)
	}
	if _, err := AI.Embed("short", []string{"a", "b"}); !errors.As(err, &ae) || ae.Code != abi.CodeInternal {
		t.Errorf("fewer vectors than inputs = %v; want internal", err)
	}
	n := len(h.calls)
	for name, schema := range map[string]any{"a func": func() {}, "null": json.RawMessage("null"), "bad JSON": json.RawMessage(`{"type":`)} {
		if _, err := AI.Complete("small-chat", nil, CompleteOptions{JSONSchema: schema}); !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
			t.Errorf("schema %s = %v; want invalid_argument", name, err)
		}
	}
	if len(h.calls) != n {
		t.Errorf("refused schemas reached the host (%d crossings)", len(h.calls)-n)
	}
	if err := (&Completion{Text: "not json"}).Decode(&answer); !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
		t.Errorf("Decode of text = %v; want invalid_argument", err)
	}
}
