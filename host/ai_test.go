package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/ai/aitest"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// lockedBuffer is a log sink for a host's concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAIGuest drives the ai family from a real Go guest (goguest's call
// action, any op as JSON) through the real policy gate and audit trail:
// a granted model answers and its call is one audit event carrying its
// model call id beside the invocation's correlation id, with the model,
// provider and tokens; a knowledge add is one event holding both its
// mutation id and its embedding's model call id; an ungranted model, a
// budget used up and a provider failing are audited as such; and the
// provider's key is in no guest output, audit event or log line.
func TestAIGuest(t *testing.T) {
	ctx := context.Background()
	const key = "sk-live-8c1f4e2a9b7d3f6e0a5c8b2d4f7e9a1c"
	srv := aitest.New(t, key)
	srv.Synonyms = map[string]string{"automobile": "car", "vehicle": "car", "maintenance": "repair", "servicing": "repair"}
	t.Setenv("MOAT_TEST_PROVIDER_KEY", key)
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := ai.New(ai.Config{
		Providers: map[string]ai.ProviderConfig{"remote": {BaseURL: srv.URL, APIKeyEnv: "MOAT_TEST_PROVIDER_KEY"}},
		Models: map[string]ai.ModelConfig{
			"small-chat":  {Provider: "remote", Model: "provider-small", Kind: ai.KindChat, MaxOutputTokens: 50},
			"big-chat":    {Provider: "remote", Model: "provider-big", Kind: ai.KindChat},
			"embed-small": {Provider: "remote", Model: "provider-embed", Kind: ai.KindEmbed},
		},
		Budgets:   ai.BudgetConfig{OrgDailyTokens: 100_000, ModuleDailyTokens: 400},
		Knowledge: ai.KnowledgeConfig{EmbeddingModel: "embed-small"},
	}, st, logger)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := policy.ParseProfile("p.yaml", []byte(`
name: test
on_ungranted: deny_at_call
default:
  capabilities: {ai: [small-chat], knowledge: [docs]}
`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Store: st, Profile: prof, Logger: logger, Families: map[string]any{"ai": &ai.FamilyConfig{Service: svc}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	mf := mustManifest(t, "name: thinker\nversion: 1.0.0\nactions: [{name: call}]\ncapabilities: {ai: [small-chat, big-chat], knowledge: [docs]}\n")
	m, err := h.Load(ctx, testwasm.BuildGo(t, "./testdata/goguest", true), host.LoadOptions{Manifest: mf, Limits: host.Limits{Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var outputs []string
	call := func(cid, op, req string) (string, abi.Code) {
		t.Helper()
		res, err := m.Invoke(ctx, host.Request{Action: "call", Input: []byte(op + " " + req), Principal: ann, CorrelationID: cid})
		if err != nil {
			outputs = append(outputs, err.Error())
			return err.Error(), abi.CodeOf(err)
		}
		outputs = append(outputs, string(res.Output))
		return string(res.Output), ""
	}
	opEvent := func(cid string) audit.Event {
		t.Helper()
		evs := auditEvents(t, h, audit.Filter{CorrelationID: cid, Kind: audit.KindOp})
		if len(evs) != 1 {
			t.Fatalf("%d op events under %s, want 1: %+v", len(evs), cid, evs)
		}
		return evs[0]
	}

	out, code := call("ai-ok", abi.OpAIComplete, `{"model":"small-chat","messages":[{"role":"user","content":"what is in the harbour"}]}`)
	var resp abi.AICompleteResponse
	if code != "" || json.Unmarshal([]byte(out), &resp) != nil || resp.Text != "provider-small heard: what is in the harbour" {
		t.Fatalf("complete = %s %s", out, code)
	}
	ev := opEvent("ai-ok")
	if ev.Op != abi.OpAIComplete || ev.Decision != audit.Allow || ev.ModelCallID != resp.ModelCallID || ev.Org != "acme" || ev.User != "ann" ||
		ev.Module != "thinker" || ev.Attrs["model"] != "small-chat" || ev.Attrs["provider"] != "remote" || ev.Attrs["target"] != "small-chat" ||
		ev.Attrs["input_tokens"] != "9" || ev.Attrs["output_tokens"] != "7" || ev.Code != "" {
		t.Errorf("the model call's audit event: %+v", ev)
	}
	// One query by correlation id joins the invocation and its model call.
	if inv := auditEvents(t, h, audit.Filter{CorrelationID: "ai-ok", Kind: audit.KindInvocation}); len(inv) != 1 || inv[0].Action != "call" {
		t.Errorf("the invocation's event: %+v", inv)
	}

	// The module asks for big-chat; the profile does not grant it.
	if out, code := call("ai-ungranted", abi.OpAIComplete, `{"model":"big-chat","messages":[{"role":"user","content":"hi"}]}`); code != abi.CodeDenied ||
		!strings.Contains(out, "ai big-chat was requested but") {
		t.Errorf("ungranted model = %s %s", out, code)
	}
	if ev := opEvent("ai-ungranted"); ev.Decision != audit.Deny || ev.Attrs["target"] != "big-chat" || ev.ModelCallID != "" {
		t.Errorf("the refusal's audit event: %+v", ev)
	}

	// A knowledge add embeds the document: one event, a mutation and a
	// model call; a search finds it by meaning.
	if _, code := call("kb-add", abi.OpKnowledgeAdd, `{"collection":"docs","id":"fleet","text":"automobile maintenance schedule"}`); code != "" {
		t.Fatalf("add: %s", code)
	}
	if ev := opEvent("kb-add"); ev.MutationID == "" || ev.ModelCallID == "" || ev.Attrs["model"] != "embed-small" || ev.Attrs["target"] != "docs" {
		t.Errorf("the add's audit event: %+v", ev)
	}
	if out, code := call("kb-search", abi.OpKnowledgeSearch, `{"collection":"docs","query":"vehicle servicing"}`); code != "" || !strings.Contains(out, `"id":"fleet"`) {
		t.Errorf("search by meaning = %s %s", out, code)
	}
	if ev := opEvent("kb-search"); ev.ModelCallID == "" || ev.MutationID != "" {
		t.Errorf("the search's audit event: %+v", ev)
	}

	// The provider fails: the guest hears unavailable, the trail says so.
	srv.FailNext(aitest.RateLimited)
	if out, code := call("ai-429", abi.OpAIComplete, `{"model":"small-chat","messages":[{"role":"user","content":"hi"}]}`); code != abi.CodeUnavailable ||
		!strings.Contains(out, "retry after 7s") {
		t.Errorf("a rate-limited provider = %s %s", out, code)
	}
	if ev := opEvent("ai-429"); ev.Code != string(abi.CodeUnavailable) || ev.ModelCallID == "" || ev.Decision != audit.Allow {
		t.Errorf("the failed call's audit event: %+v", ev)
	}

	// Spend the module's 400 tokens: the call that does not fit is denied
	// naming the budget, and audited as a deny by that rule.
	var denied string
	for i := 0; i < 20 && denied == ""; i++ {
		out, code := call("ai-spend", abi.OpAIComplete, `{"model":"small-chat","messages":[{"role":"user","content":"`+strings.Repeat("many words ", 10)+`"}],"max_tokens":50}`)
		if code == abi.CodeDenied {
			denied = out
		} else if code != "" {
			t.Fatalf("spending: %s %s", out, code)
		}
	}
	if !strings.Contains(denied, "module thinker of organization acme's daily ai budget of 400 tokens") {
		t.Fatalf("over budget: %q", denied)
	}
	var budgetEvent *audit.Event
	for _, e := range auditEvents(t, h, audit.Filter{CorrelationID: "ai-spend", Kind: audit.KindOp, Limit: 100}) {
		if e.Decision == audit.Deny {
			budgetEvent = &e
		}
	}
	if budgetEvent == nil || budgetEvent.Rule != "ai budget module" || budgetEvent.Code != string(abi.CodeDenied) || budgetEvent.ModelCallID == "" ||
		!strings.Contains(budgetEvent.Reason, "daily ai budget of 400 tokens") {
		t.Errorf("the budget's refusal in the trail: %+v", budgetEvent)
	}

	// The key is nowhere a guest, the trail or the log can show.
	all := auditEvents(t, h, audit.Filter{Limit: 10000})
	trail, _ := json.Marshal(all)
	for where, text := range map[string]string{"guest output": strings.Join(outputs, "\n"), "audit trail": string(trail), "log": logs.String()} {
		for i := 0; i+6 <= len(key); i++ {
			if strings.Contains(text, key[i:i+6]) {
				t.Fatalf("the %s holds a piece of the provider's key (%q)", where, key[i:i+6])
			}
		}
	}
	if len(srv.Requests()) == 0 || srv.Requests()[0].Authorization != "Bearer "+key {
		t.Error("the key did not reach the provider")
	}
}
