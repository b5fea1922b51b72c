package ops_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/ai/aitest"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// aiEnv is an Env of org acme's module notes with a Service against a
// real OpenAI-protocol server; knowledge embeds with embed-small.
func aiEnv(t *testing.T) (*ops.Env, *aitest.Server, *store.Store) {
	t.Helper()
	ctx := context.Background()
	srv := aitest.New(t, "")
	srv.Synonyms = map[string]string{"automobile": "car", "vehicle": "car", "maintenance": "repair", "servicing": "repair"}
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := ai.New(ai.Config{
		Providers: map[string]ai.ProviderConfig{"local": {BaseURL: srv.URL}},
		Models: map[string]ai.ModelConfig{
			"small-chat":  {Provider: "local", Model: "llama-3.1-8b", Kind: ai.KindChat, MaxOutputTokens: 100},
			"big-chat":    {Provider: "local", Model: "llama-3.1-70b", Kind: ai.KindChat},
			"embed-small": {Provider: "local", Model: "nomic-embed-text", Kind: ai.KindEmbed},
		},
		Budgets:   ai.BudgetConfig{OrgDailyTokens: 100_000, ModuleDailyTokens: 1000},
		Knowledge: ai.KnowledgeConfig{EmbeddingModel: "embed-small"},
	}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	services, err := ops.Provision(ctx, ops.Core{Store: st}, map[string]any{"ai": &ai.FamilyConfig{Service: svc}})
	if err != nil {
		t.Fatal(err)
	}
	env := &ops.Env{Module: "notes", Store: st, Logger: slog.New(slog.DiscardHandler), Services: services}
	env.Begin(ctx, "a", policy.Principal{User: "ann", Org: "acme"}, "c")
	return env, srv, st
}

func dispatch(t *testing.T, env *ops.Env, g ops.Gate, op, req string) ([]byte, error) {
	t.Helper()
	o, ok := ops.Lookup([]byte(op))
	if !ok {
		t.Fatalf("no op %s", op)
	}
	return ops.Dispatch(env, g, o, []byte(req))
}

// TestAIOps drives ai.complete and ai.embed through Dispatch: the gate is
// asked with the model alias, the call is charged to the invocation's
// organization and module and leaves its evidence on the Env, and a
// refusal before the call (the gate, a model not configured) leaves none.
func TestAIOps(t *testing.T) {
	env, srv, st := aiEnv(t)
	g := &gate{allow: func(op, target string) bool { return target == "small-chat" || target == "embed-small" }}

	reply, err := dispatch(t, env, g, abi.OpAIComplete, `{"model":"small-chat","messages":[{"role":"user","content":"hello there"}],"max_tokens":10}`)
	if err != nil {
		t.Fatal(err)
	}
	var resp abi.AICompleteResponse
	if err := json.Unmarshal(reply, &resp); err != nil || resp.Text != "llama-3.1-8b heard: hello there" || resp.ModelCallID == "" {
		t.Fatalf("reply %s (%v)", reply, err)
	}
	if g.asked[len(g.asked)-1] != "ai.complete small-chat" {
		t.Errorf("the gate was asked %v", g.asked)
	}
	if ev := evidence(env); ev == nil || ev.ModelCallID != resp.ModelCallID || ev.Model != "small-chat" || ev.Usage != resp.Usage {
		t.Errorf("evidence %+v for %+v", ev, resp)
	}
	rows, _ := st.AIUsage(context.Background(), store.AIUsageFilter{Org: "acme"})
	if len(rows) != 2 || rows[1].Module != "notes" || rows[1].Used != resp.Usage.InputTokens+resp.Usage.OutputTokens {
		t.Errorf("acme's usage %+v", rows)
	}

	// Ungranted: the gate refuses before anything is sent or charged.
	before := len(srv.Requests())
	for _, req := range []string{
		`{"model":"big-chat","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"llama-3.1-70b","messages":[{"role":"user","content":"hi"}]}`, // the provider's own name
		`{"messages":[{"role":"user","content":"hi"}]}`,
	} {
		if _, err := dispatch(t, env, g, abi.OpAIComplete, req); codeOf(err) != abi.CodeDenied || env.ModelCall() != nil {
			t.Errorf("%s: %v (evidence %+v); want denied, no call", req, err, env.ModelCall())
		}
	}
	if len(srv.Requests()) != before {
		t.Error("an ungranted call reached the provider")
	}
	// Granted by a profile's "*" but not configured: not_found, no call.
	if _, err := dispatch(t, env, allowAll, abi.OpAIComplete, `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`); codeOf(err) != abi.CodeNotFound || env.ModelCall() != nil {
		t.Errorf("an alias the operator did not configure: %v", err)
	}
	// Hostile shapes are refused by decoding or the bounds (a 10 MB
	// prompt, which no transport would carry, included), before the
	// provider or the budget sees them.
	huge := `{"model":"small-chat","messages":[{"role":"user","content":"` + strings.Repeat("a", abi.MaxAIPromptBytes) + `"}, {"role":"user","content":"b"}]}`
	tenMB := `{"model":"small-chat","messages":[{"role":"user","content":"` + strings.Repeat("ab ", 10<<20/3) + `"}]}`
	for _, req := range []string{`{"model":"small-chat","messages":"hi"}`, `{"model":"small-chat","messages":[{"role":"user","content":1}]}`, huge, tenMB,
		`{"model":"small-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":1e300}`} {
		if _, err := dispatch(t, env, g, abi.OpAIComplete, req); codeOf(err) != abi.CodeInvalidArgument && codeOf(err) != abi.CodeTooLarge || len(err.Error()) > 1024 {
			t.Errorf("%.80s: %.300v", req, err)
		}
	}
	if len(srv.Requests()) != before {
		t.Error("a hostile request reached the provider")
	}

	reply, err = dispatch(t, env, g, abi.OpAIEmbed, `{"model":"embed-small","input":["red boat","blue harbour"]}`)
	var emb abi.AIEmbedResponse
	if err != nil || json.Unmarshal(reply, &emb) != nil || len(emb.Vectors) != 2 || len(emb.Vectors[0]) != 256 || env.ModelCall() == nil {
		t.Fatalf("embed: %.200s %v", reply, err)
	}

	// Over the module's budget: denied, naming it, with evidence.
	_, err = dispatch(t, env, g, abi.OpAIComplete, `{"model":"small-chat","messages":[{"role":"user","content":"`+strings.Repeat("word ", 600)+`"}],"max_tokens":100}`)
	if codeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "module notes of organization acme's daily ai budget of 1000 tokens") {
		t.Fatalf("over budget: %v", err)
	}
	if ev := evidence(env); ev == nil || ev.Budget == nil || ev.Budget.Scope != "module" {
		t.Errorf("the refused call's evidence: %+v", ev)
	}

	// With no AI service, the ops say so.
	env.Services = nil
	if _, err := dispatch(t, env, g, abi.OpAIComplete, `{"model":"small-chat","messages":[{"role":"user","content":"hi"}]}`); codeOf(err) != abi.CodeUnavailable {
		t.Errorf("without a service: %v", err)
	}
}

// TestKnowledgeHybridOps: with a knowledge model configured, an add is a
// model call (charged, with evidence, no ai grant needed), and a search
// finds a document near in meaning that shares no word with the query.
func TestKnowledgeHybridOps(t *testing.T) {
	env, srv, st := aiEnv(t)
	g := &gate{allow: func(op, target string) bool { return target == "docs" }}
	for id, text := range map[string]string{
		"fleet": "automobile maintenance schedule for the depot",
		"menu":  "lunch menu of the canteen",
	} {
		if _, err := dispatch(t, env, g, abi.OpKnowledgeAdd, `{"collection":"docs","id":"`+id+`","text":"`+text+`"}`); err != nil {
			t.Fatal(err)
		}
		if ev := evidence(env); ev == nil || ev.Model != "embed-small" || ev.Usage.InputTokens == 0 {
			t.Errorf("add %s: evidence %+v", id, ev)
		}
	}
	reply, err := dispatch(t, env, g, abi.OpKnowledgeSearch, `{"collection":"docs","query":"vehicle servicing"}`)
	var resp abi.KnowledgeSearchResponse
	if err != nil || json.Unmarshal(reply, &resp) != nil || len(resp.Hits) != 1 || resp.Hits[0].ID != "fleet" {
		t.Fatalf("search = %s, %v; want fleet alone", reply, err)
	}
	if ev := evidence(env); ev == nil || ev.Model != "embed-small" {
		t.Errorf("the search's query embedding: evidence %+v", ev)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d model calls, want 3 (two adds, one search)", n)
	}
	rows, _ := st.AIUsage(context.Background(), store.AIUsageFilter{Org: "acme"})
	if len(rows) != 2 || rows[1].Calls != 3 {
		t.Errorf("acme's usage %+v", rows)
	}
	// A request the store refuses costs no model call.
	if _, err := dispatch(t, env, allowAll, abi.OpKnowledgeAdd, `{"collection":"Bad Name","id":"x","text":"t"}`); codeOf(err) != abi.CodeInvalidArgument || env.ModelCall() != nil {
		t.Errorf("an invalid add: %v, evidence %+v", err, env.ModelCall())
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("an invalid add was embedded")
	}
}

// evidence is the model call env's op in flight made (host/ai's
// Evidence), nil when it made none.
func evidence(env *ops.Env) *ai.Evidence {
	ev, _ := env.ModelCall().(*ai.Evidence)
	return ev
}
