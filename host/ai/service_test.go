package ai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/ai/aitest"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy"
)

// testKey is the provider's key in these tests: long enough that a piece
// of it in any text is not chance.
const testKey = "sk-test-7f3a9c1e5b2d8f4a6c0e9b1d3f5a7c9e"

// logBuffer is a log sink safe for the concurrent calls of a test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// rig is a Service on a fresh SQLite store, against a real
// OpenAI-protocol server, with its log captured.
type rig struct {
	srv   *aitest.Server
	st    *store.Store
	svc   *ai.Service
	log   *logBuffer
	cfg   ai.Config
	scope store.Scope
}

func newRig(t *testing.T, edit func(*ai.Config)) *rig {
	t.Helper()
	srv := aitest.New(t, testKey)
	t.Setenv("MOAT_TEST_AI_KEY", testKey)
	st := openStore(t)
	cfg := ai.Config{
		Providers: map[string]ai.ProviderConfig{
			"remote": {BaseURL: srv.URL, APIKeyEnv: "MOAT_TEST_AI_KEY", Timeout: policy.Duration(5 * time.Second)},
		},
		Models: map[string]ai.ModelConfig{
			"small-chat":  {Provider: "remote", Model: "provider-chat-v1", Kind: ai.KindChat, MaxOutputTokens: 64},
			"embed-small": {Provider: "remote", Model: "provider-embed-v1", Kind: ai.KindEmbed},
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	lb := &logBuffer{}
	svc, err := ai.New(cfg, st, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{srv: srv, st: st, svc: svc, log: lb, cfg: cfg, scope: store.Scope{Org: "acme", Module: "notes"}}
}

func (r *rig) caller() ai.Caller { return ai.Caller{Org: r.scope.Org, Module: r.scope.Module} }

// usage returns the day's row of module ("" for the organization's).
func (r *rig) usage(t *testing.T, module string) store.AIUsage {
	t.Helper()
	rows, err := r.st.AIUsage(context.Background(), store.AIUsageFilter{Org: r.scope.Org})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rows {
		if u.Module == module {
			return u
		}
	}
	return store.AIUsage{}
}

// noKey fails the test if any piece of the key is in s.
func noKey(t *testing.T, where, s string) {
	t.Helper()
	for i := 0; i+6 <= len(testKey); i++ {
		if strings.Contains(s, testKey[i:i+6]) {
			t.Fatalf("%s holds a piece of the provider's key (%q): %s", where, testKey[i:i+6], s)
		}
	}
}

func user(text string) []abi.AIMessage { return []abi.AIMessage{{Role: abi.RoleUser, Content: text}} }

// TestComplete runs a completion through a real server: the alias
// becomes the provider's model name, the key goes in the Authorization
// header, max_tokens is the model's when the request names none, the
// reply and usage are the server's, and the day's budget rows are charged
// exactly the reported usage with nothing left held.
func TestComplete(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	msgs := []abi.AIMessage{{Role: abi.RoleSystem, Content: "Be brief."}, {Role: abi.RoleUser, Content: "Summarize the notes about the harbour"}}
	resp, ev, err := r.svc.Complete(ctx, r.caller(), &abi.AICompleteRequest{Model: "small-chat", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	want := aitest.Reply("provider-chat-v1", msgs[1].Content)
	if resp.Text != want {
		t.Errorf("text %q, want %q", resp.Text, want)
	}
	wantUsage := abi.AIUsage{InputTokens: aitest.PromptTokens(msgs[0].Content, msgs[1].Content), OutputTokens: int64(len(strings.Fields(want)))}
	if resp.Usage != wantUsage || ev.Usage != wantUsage || ev.Estimated {
		t.Errorf("usage %+v (evidence %+v), want %+v", resp.Usage, ev.Usage, wantUsage)
	}
	if resp.ModelCallID == "" || ev.ModelCallID != resp.ModelCallID || ev.Model != "small-chat" || ev.Provider != "remote" {
		t.Errorf("evidence %+v for reply %+v", ev, resp)
	}
	reqs := r.srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests reached the provider", len(reqs))
	}
	got := reqs[0]
	if got.Path != "/v1/chat/completions" || got.Authorization != "Bearer "+testKey || got.Body["model"] != "provider-chat-v1" ||
		got.Body["max_tokens"] != 64.0 || got.Body["temperature"] != nil || got.Body["response_format"] != nil {
		t.Errorf("the provider received %+v", got)
	}
	for _, m := range []string{"", "notes"} {
		u := r.usage(t, m)
		if u.Used != wantUsage.InputTokens+wantUsage.OutputTokens || u.Reserved != 0 || u.Calls != 1 {
			t.Errorf("module %q: day's usage %+v, want %d used, none held, one call", m, u, wantUsage.InputTokens+wantUsage.OutputTokens)
		}
	}
	if _, ok := ev.Attrs()["usage"]; ok {
		t.Errorf("reported usage marked estimated: %v", ev.Attrs())
	}

	// max_tokens cuts the reply, and is sent as asked.
	resp, _, err = r.svc.Complete(ctx, r.caller(), &abi.AICompleteRequest{Model: "small-chat", Messages: user("one two three four five"), MaxTokens: 3})
	if err != nil || resp.Text != "provider-chat-v1 heard: one" || resp.Usage.OutputTokens != 3 {
		t.Errorf("max_tokens 3: %+v %v", resp, err)
	}
}

// TestJSONSchema passes a schema as OpenAI's response_format and checks
// the reply is JSON; a reply that is not is refused, and still charged.
func TestJSONSchema(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	schema := json.RawMessage(`{"type":"object","properties":{"heard":{"type":"string"}},"required":["heard"]}`)
	resp, _, err := r.svc.Complete(ctx, r.caller(), &abi.AICompleteRequest{Model: "small-chat", Messages: user("list the ports"), JSONSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if json.Unmarshal([]byte(resp.Text), &out) != nil || out["heard"] != "list the ports" {
		t.Errorf("reply %q is not the schema's JSON", resp.Text)
	}
	rf, _ := r.srv.Requests()[0].Body["response_format"].(map[string]any)
	if rf["type"] != "json_schema" || rf["json_schema"].(map[string]any)["schema"].(map[string]any)["type"] != "object" {
		t.Errorf("response_format sent: %v", rf)
	}
	before := r.usage(t, "notes").Used
	_, ev, err := r.svc.Complete(ctx, r.caller(), &abi.AICompleteRequest{Model: "small-chat", Messages: user("answer NOT JSON"), JSONSchema: schema})
	if code(err) != abi.CodeUnavailable || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("a reply that is not JSON: %v", err)
	}
	if ev == nil || r.usage(t, "notes").Used <= before {
		t.Errorf("the call that answered without JSON was not charged: evidence %+v", ev)
	}
}

func code(err error) abi.Code {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// TestCompleteBounds refuses every request out of abi's bounds, or for a
// model the operator did not configure, before anything reaches the
// provider or the budget.
func TestCompleteBounds(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	big := strings.Repeat("x", abi.MaxAIPromptBytes+1)
	deep := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
	many := make([]abi.AIMessage, abi.MaxAIMessages+1)
	for i := range many {
		many[i] = abi.AIMessage{Role: abi.RoleUser, Content: "hi"}
	}
	temp := func(v float64) *float64 { return &v }
	tests := []struct {
		name string
		req  abi.AICompleteRequest
		code abi.Code
		says string
	}{
		{"no such model", abi.AICompleteRequest{Model: "gpt-4o", Messages: user("hi")}, abi.CodeNotFound, "no model"},
		{"the provider's own name", abi.AICompleteRequest{Model: "provider-chat-v1", Messages: user("hi")}, abi.CodeNotFound, "no model"},
		{"an embed model", abi.AICompleteRequest{Model: "embed-small", Messages: user("hi")}, abi.CodeInvalidArgument, "ai.embed"},
		{"no messages", abi.AICompleteRequest{Model: "small-chat"}, abi.CodeInvalidArgument, "messages is empty"},
		{"too many messages", abi.AICompleteRequest{Model: "small-chat", Messages: many}, abi.CodeTooLarge, "257 messages"},
		{"a prompt over 1 MiB", abi.AICompleteRequest{Model: "small-chat", Messages: user(big)}, abi.CodeTooLarge, "over the limit"},
		{"a role of its own", abi.AICompleteRequest{Model: "small-chat", Messages: []abi.AIMessage{{Role: "tool", Content: "x"}}}, abi.CodeInvalidArgument, "role"},
		{"max_tokens over the model's", abi.AICompleteRequest{Model: "small-chat", Messages: user("hi"), MaxTokens: 65}, abi.CodeInvalidArgument, "limit of 64"},
		{"max_tokens huge", abi.AICompleteRequest{Model: "small-chat", Messages: user("hi"), MaxTokens: math.MaxInt32}, abi.CodeInvalidArgument, "max_tokens"},
		{"max_tokens negative", abi.AICompleteRequest{Model: "small-chat", Messages: user("hi"), MaxTokens: -1}, abi.CodeInvalidArgument, "negative"},
		{"temperature 3", abi.AICompleteRequest{Model: "small-chat", Messages: user("hi"), Temperature: temp(3)}, abi.CodeInvalidArgument, "temperature"},
		{"temperature NaN", abi.AICompleteRequest{Model: "small-chat", Messages: user("hi"), Temperature: temp(math.NaN())}, abi.CodeInvalidArgument, "temperature"},
		{"schema not an object", abi.AICompleteRequest{Model: "small-chat", Messages: user("hi"), JSONSchema: json.RawMessage(`[1]`)}, abi.CodeInvalidArgument, "not a JSON object"},
		{"schema not JSON", abi.AICompleteRequest{Model: "small-chat", Messages: user("hi"), JSONSchema: json.RawMessage(`{"a":`)}, abi.CodeInvalidArgument, "not JSON"},
		{"schema 100 deep", abi.AICompleteRequest{Model: "small-chat", Messages: user("hi"), JSONSchema: json.RawMessage(deep)}, abi.CodeInvalidArgument, "nested 100 deep"},
		{"schema over 64 KiB", abi.AICompleteRequest{Model: "small-chat", Messages: user("hi"),
			JSONSchema: json.RawMessage(`{"d":"` + strings.Repeat("x", abi.MaxAISchemaBytes) + `"}`)}, abi.CodeTooLarge, "json_schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, ev, err := r.svc.Complete(ctx, r.caller(), &tt.req)
			if code(err) != tt.code || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("= %+v, %v; want %s saying %q", resp, err, tt.code, tt.says)
			}
			if ev != nil {
				t.Errorf("a refused request became a model call: %+v", ev)
			}
			if len(err.Error()) > 1024 {
				t.Errorf("the refusal is %d bytes: it quotes what the guest sent", len(err.Error()))
			}
		})
	}
	if n := len(r.srv.Requests()); n != 0 {
		t.Errorf("%d refused requests reached the provider", n)
	}
	if u := r.usage(t, ""); u != (store.AIUsage{}) {
		t.Errorf("refused requests touched the budget: %+v", u)
	}
}

// TestProviderFaults: each way a provider fails is a code for the guest
// that says what to do, a hold settled by the charging rule (nothing for
// an error the provider answered with, the input's estimate for no answer
// at all), and no piece of the key in the error or the log.
func TestProviderFaults(t *testing.T) {
	testenv.Timing(t)
	r := newRig(t, func(c *ai.Config) {
		p := c.Providers["remote"]
		p.Timeout = policy.Duration(time.Second)
		p.MaxResponseBytes = 64 << 10
		c.Providers["remote"] = p
	})
	ctx := context.Background()
	tests := []struct {
		name    string
		fault   aitest.Fault
		code    abi.Code
		says    string
		charged bool // the input's estimate (no answer) or the reported usage
	}{
		{"rate limited", aitest.RateLimited, abi.CodeUnavailable, "retry after 7s", false},
		{"server error", aitest.ServerError, abi.CodeUnavailable, "HTTP 500", false},
		{"slow", aitest.Slow, abi.CodeUnavailable, "did not answer in time", true},
		{"huge body", aitest.Huge, abi.CodeUnavailable, "over 65536 bytes", false},
		{"malformed JSON", aitest.Malformed, abi.CodeUnavailable, "not the API's JSON", false},
		{"no choices", aitest.NoChoices, abi.CodeUnavailable, "no choices", true},
		{"redirect", aitest.Redirect, abi.CodeUnavailable, "redirect", false},
		{"a 400 quoting the key", aitest.BadRequest, abi.CodeInvalidArgument, "context length exceeded for key [key] ([key]", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := r.usage(t, "notes")
			r.srv.FailNext(tt.fault)
			start := time.Now()
			_, ev, err := r.svc.Complete(ctx, r.caller(), &abi.AICompleteRequest{Model: "small-chat", Messages: user("where is the harbour")})
			if code(err) != tt.code || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("= %v; want %s saying %q", err, tt.code, tt.says)
			}
			if took := time.Since(start); took > 4*time.Second {
				t.Errorf("took %s: the provider's 1s timeout did not hold", took)
			}
			noKey(t, "the error", err.Error())
			if strings.Contains(err.Error(), r.srv.URL) || strings.Contains(err.Error(), "127.0.0.1") {
				t.Errorf("the error names the provider's address: %v", err)
			}
			after := r.usage(t, "notes")
			if after.Reserved != 0 || after.Calls != before.Calls+1 {
				t.Errorf("after the failure: %+v (before %+v): a hold left, or the call not counted", after, before)
			}
			if charged := after.Used > before.Used; charged != tt.charged || charged && ev.Usage.InputTokens == 0 {
				t.Errorf("charged %d tokens (evidence %+v); want charged=%v", after.Used-before.Used, ev, tt.charged)
			}
		})
	}
	noKey(t, "the log", r.log.String())
	if !strings.Contains(r.log.String(), "provider call failed") {
		t.Errorf("the failures are not in the operator's log:\n%s", r.log.String())
	}

	// A reply without usage is charged the host's estimate, and says so.
	r.srv.FailNext(aitest.NoUsage)
	resp, ev, err := r.svc.Complete(ctx, r.caller(), &abi.AICompleteRequest{Model: "small-chat", Messages: user("where is the harbour")})
	if err != nil || !ev.Estimated || ev.Attrs()["usage"] != "estimated" {
		t.Fatalf("no usage: %+v %+v %v", resp, ev, err)
	}
	if want := ai.EstimateTokens("where is the harbour") + 4 + 3; resp.Usage.InputTokens != want || resp.Usage.OutputTokens != ai.EstimateTokens(resp.Text) {
		t.Errorf("estimated usage %+v, want input %d, output %d", resp.Usage, want, ai.EstimateTokens(resp.Text))
	}
}

// TestKeyRefused: a key the provider refuses is "the operator's key was
// refused", with none of the key the provider quoted back.
func TestKeyRefused(t *testing.T) {
	r := newRig(t, nil)
	r.srv.Key = "sk-another-key-the-provider-wants"
	_, ev, err := r.svc.Complete(context.Background(), r.caller(), &abi.AICompleteRequest{Model: "small-chat", Messages: user("hi")})
	if code(err) != abi.CodeUnavailable || !strings.Contains(err.Error(), "refused the operator's key (HTTP 401)") {
		t.Fatalf("= %v", err)
	}
	noKey(t, "the error", err.Error())
	noKey(t, "the log", r.log.String())
	if !strings.Contains(r.log.String(), "Incorrect API key provided: [key]") {
		t.Errorf("the log does not carry the provider's (scrubbed) words:\n%s", r.log.String())
	}
	if ev == nil || ev.Usage != (abi.AIUsage{}) {
		t.Errorf("a refused key was charged: %+v", ev)
	}
}

// secretMap is a SecretSource over a map: the seam through which the host
// hands the Service its secret store (host/ops.SecretSource), filled here
// with what the test stores.
type secretMap map[string]string

func (m secretMap) Secret(_ context.Context, org, name string) ([]byte, error) {
	if v, ok := m[org+"/"+name]; ok {
		return []byte(v), nil
	}
	return nil, fmt.Errorf("secret %s of org %q: no such secret", name, org)
}

// TestKeyFromSecret reads the key from the operator's secret at each call
// (a rotated key takes effect at once), never an organization's secret of
// the same name, and refuses a call whose secret is missing or would
// break the header.
func TestKeyFromSecret(t *testing.T) {
	r := newRig(t, func(c *ai.Config) {
		c.Providers["remote"] = ai.ProviderConfig{BaseURL: c.Providers["remote"].BaseURL, APIKeySecret: "openai"}
	})
	ctx := context.Background()
	req := &abi.AICompleteRequest{Model: "small-chat", Messages: user("hi")}
	secrets := secretMap{"acme/openai": testKey} // the organization's, not the operator's
	c := ai.Caller{Org: "acme", Module: "notes", Secrets: secrets}
	if _, _, err := r.svc.Complete(ctx, c, req); code(err) != abi.CodeUnavailable || !strings.Contains(err.Error(), "operator secret openai") {
		t.Fatalf("with only the organization's secret: %v", err)
	}
	secrets["/openai"] = testKey + "\r\nX-Evil: 1"
	if _, _, err := r.svc.Complete(ctx, c, req); code(err) != abi.CodeUnavailable || !strings.Contains(err.Error(), "control character") {
		t.Fatalf("with a key that would break the header: %v", err)
	}
	secrets["/openai"] = testKey
	if _, _, err := r.svc.Complete(ctx, c, req); err != nil {
		t.Fatal(err)
	}
	r.srv.Key = "sk-rotated-0000000000000000000000"
	secrets["/openai"] = r.srv.Key
	if _, _, err := r.svc.Complete(ctx, c, req); err != nil {
		t.Fatalf("after the rotation: %v", err)
	}
	if _, _, err := r.svc.Complete(ctx, ai.Caller{Org: "acme", Module: "notes"}, req); code(err) != abi.CodeUnavailable || !strings.Contains(err.Error(), "no secret store") {
		t.Fatalf("with no secret store: %v", err)
	}
	if n := len(r.srv.Requests()); n != 2 {
		t.Errorf("%d requests reached the provider, want the 2 with a usable key", n)
	}
	// A provider that echoes the request hands back no key.
	r.srv.FailNext(aitest.EchoKey)
	resp, _, err := r.svc.Complete(ctx, c, req)
	if err != nil || resp.Text != "you sent Bearer [key]" {
		t.Errorf("a completion echoing the key: %+v %v", resp, err)
	}
	noKey(t, "the log", r.log.String())
}

// TestEmbed returns a vector per input in the inputs' order (the server
// answers out of order, by index), charges the reported usage, and
// refuses what is out of bounds or a reply of the wrong length.
func TestEmbed(t *testing.T) {
	r := newRig(t, func(c *ai.Config) {
		m := c.Models["embed-small"]
		m.Dimensions = 256
		c.Models["embed-small"] = m
	})
	ctx := context.Background()
	in := []string{"the red harbour", "a blue boat", "the harbour"}
	resp, ev, err := r.svc.Embed(ctx, r.caller(), &abi.AIEmbedRequest{Model: "embed-small", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range in {
		want := r.srv.Vector(text)
		if len(resp.Vectors[i]) != len(want) {
			t.Fatalf("vector %d has %d values", i, len(resp.Vectors[i]))
		}
		for j := range want {
			if float64(resp.Vectors[i][j]) != want[j] {
				t.Fatalf("vector %d is not input %d's", i, i)
			}
		}
	}
	if resp.Usage.InputTokens != 8 || resp.Usage.OutputTokens != 0 || ev.ModelCallID != resp.ModelCallID || r.usage(t, "notes").Used != 8 {
		t.Errorf("usage %+v, evidence %+v, day %+v", resp.Usage, ev, r.usage(t, "notes"))
	}
	if got := r.srv.Requests()[0].Body; got["model"] != "provider-embed-v1" || got["encoding_format"] != "float" {
		t.Errorf("the provider received %v", got)
	}
	r.srv.FailNext(aitest.WrongDims)
	if _, _, err := r.svc.Embed(ctx, r.caller(), &abi.AIEmbedRequest{Model: "embed-small", Input: in}); code(err) != abi.CodeUnavailable || !strings.Contains(err.Error(), "255 values") {
		t.Errorf("vectors of the wrong length: %v", err)
	}
	for _, tt := range []struct {
		name string
		req  abi.AIEmbedRequest
		code abi.Code
	}{
		{"a chat model", abi.AIEmbedRequest{Model: "small-chat", Input: in}, abi.CodeInvalidArgument},
		{"no input", abi.AIEmbedRequest{Model: "embed-small"}, abi.CodeInvalidArgument},
		{"an empty input", abi.AIEmbedRequest{Model: "embed-small", Input: []string{"a", ""}}, abi.CodeInvalidArgument},
		{"257 inputs", abi.AIEmbedRequest{Model: "embed-small", Input: make([]string, abi.MaxAIEmbedInputs+1)}, abi.CodeTooLarge},
		{"over 1 MiB", abi.AIEmbedRequest{Model: "embed-small", Input: []string{strings.Repeat("y", abi.MaxAIEmbedBytes+1)}}, abi.CodeTooLarge},
	} {
		if tt.name == "257 inputs" {
			for i := range tt.req.Input {
				tt.req.Input[i] = "x"
			}
		}
		if _, ev, err := r.svc.Embed(ctx, r.caller(), &tt.req); code(err) != tt.code || ev != nil {
			t.Errorf("%s: %v (evidence %+v); want %s before any call", tt.name, err, ev, tt.code)
		}
	}
}

// TestBudgets: a call the day's budget cannot hold is denied before it is
// sent, naming the budget, the tokens used and the call's need; the
// organization's budget is shared by its modules, a module's is its own,
// another organization's is untouched, and an override in the store
// takes the place of the defaults.
func TestBudgets(t *testing.T) {
	r := newRig(t, func(c *ai.Config) {
		c.Budgets = ai.BudgetConfig{OrgDailyTokens: 150, ModuleDailyTokens: 120}
	})
	ctx := context.Background()
	req := &abi.AICompleteRequest{Model: "small-chat", Messages: user("one two three"), MaxTokens: 50}
	need := ai.EstimateTokens("one two three") + 4 + 3 + 50 // 62
	call := func(org, module string) error {
		_, _, err := r.svc.Complete(ctx, ai.Caller{Org: org, Module: module}, req)
		return err
	}
	// Each call holds 62 and is charged 12 (what the server reports):
	// five fit the module's 120 (48 + 62 = 110), the sixth does not
	// (60 + 62 = 122).
	var err error
	n := 0
	for ; n < 20 && err == nil; n++ {
		err = call("acme", "notes")
	}
	u := r.usage(t, "notes")
	per := aitest.PromptTokens("one two three") + int64(len(strings.Fields(aitest.Reply("provider-chat-v1", "one two three"))))
	if n != 6 || u.Used != 5*per || u.Reserved != 0 {
		t.Fatalf("refused at call %d, day %+v; want the sixth refused after 5 charged %d each", n, u, per)
	}
	wantMsg := fmt.Sprintf("module notes of organization acme's daily ai budget of 120 tokens: %d used, this call may need %d", u.Used, need)
	if code(err) != abi.CodeDenied || !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("over the module's budget: %v; want denied saying %q", err, wantMsg)
	}
	calls := len(r.srv.Requests())
	// Another module of acme draws on the organization's 200.
	var orgErr error
	for i := 0; i < 10 && orgErr == nil; i++ {
		orgErr = call("acme", "other")
	}
	if code(orgErr) != abi.CodeDenied || !strings.HasPrefix(orgErr.Error(), "denied: ai.complete: organization acme's daily ai budget of 150 tokens: 96 used, this call may need 62;") {
		t.Fatalf("over the organization's budget: %v", orgErr)
	}
	if org := r.usage(t, ""); org.Used+need <= 150 || org.Reserved != 0 {
		t.Errorf("the organization's day %+v: refused while it could hold %d", org, need)
	}
	if err := call("globex", "notes"); err != nil {
		t.Fatalf("another organization: %v", err)
	}
	// The operator raises acme's budgets.
	if err := r.st.AIBudgetPut(ctx, "acme", store.AIBudget{OrgDailyTokens: 10_000, ModuleDailyTokens: 5_000}); err != nil {
		t.Fatal(err)
	}
	if err := call("acme", "notes"); err != nil {
		t.Fatalf("after the override: %v", err)
	}
	if n := len(r.srv.Requests()); n <= calls {
		t.Errorf("denied calls reached the provider")
	}
}

// TestBudgetRace: many concurrent calls on a budget that holds only some
// of them: exactly as many pass as fit, and the day's count never passes
// the limit. (storetest races the reservation itself on both backends and
// across handles.)
func TestBudgetRace(t *testing.T) {
	r := newRig(t, func(c *ai.Config) {
		c.Budgets = ai.BudgetConfig{OrgDailyTokens: 1_000_000, ModuleDailyTokens: 600}
		p := c.Providers["remote"]
		p.MaxConcurrent = 4
		c.Providers["remote"] = p
	})
	ctx := context.Background()
	req := &abi.AICompleteRequest{Model: "small-chat", Messages: user("x"), MaxTokens: 57} // holds 1+4+3+57 = 65
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, denied := 0, 0
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := r.svc.Complete(ctx, r.caller(), req)
			mu.Lock()
			defer mu.Unlock()
			switch code(err) {
			case "":
				ok++
			case abi.CodeDenied:
				denied++
			default:
				t.Errorf("a call failed: %v", err)
			}
		}()
	}
	wg.Wait()
	u := r.usage(t, "notes")
	if u.Used > 600 || u.Reserved != 0 || ok+denied != 40 || ok < 9 || int64(ok) != u.Calls {
		t.Errorf("%d passed, %d denied; day %+v", ok, denied, u)
	}
}
