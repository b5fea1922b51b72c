package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/ai/aitest"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
)

// TestAIConfig: the ai: section parses into host/ai's Config with its
// defaults, and each mistake is reported at its line and field, with the
// fix.
func TestAIConfig(t *testing.T) {
	c, err := server.ParseConfig("moat-server.yaml", []byte(`
ai:
  providers:
    local: {base_url: "http://127.0.0.1:8000/v1"}
    openai: {base_url: "https://api.openai.com/v1", api_key_secret: openai, timeout: 30s, max_concurrent: 4}
  models:
    small-chat: {provider: openai, model: gpt-4o-mini, kind: chat, max_output_tokens: 2048}
    embed-small: {provider: local, model: nomic-embed-text, kind: embed, dimensions: 768}
  budgets: {org_daily_tokens: 500000}
  knowledge: {embedding_model: embed-small, min_similarity: 0.25}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := c.AI
	if !a.Enabled() || a.Providers["openai"].Timeout.Std() != 30*time.Second || a.Providers["local"].Timeout.Std() != ai.DefaultTimeout ||
		a.Providers["openai"].MaxConcurrent != 4 || a.Providers["local"].MaxResponseBytes != ai.DefaultMaxResponseBytes ||
		a.Models["small-chat"].MaxOutputTokens != 2048 || a.Models["embed-small"].Dimensions != 768 ||
		a.Budgets.OrgDailyTokens != 500000 || a.Budgets.ModuleDailyTokens != ai.DefaultModuleDailyTokens ||
		a.Knowledge.EmbeddingModel != "embed-small" || a.Knowledge.MinSimilarity != 0.25 {
		t.Errorf("parsed ai config = %+v", a)
	}
	if d := server.DefaultConfig(); d.AI.Enabled() {
		t.Errorf("the default config configures models: %+v", d.AI)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"ai:\n  provider: {}\n", "moat-server.yaml:2: ai.provider: unknown field; did you mean providers?"},
		{"ai:\n  providers:\n    p: {base_url: ftp://x}\n", "moat-server.yaml:3: ai.providers.p.base_url: scheme \"ftp\": use http or https"},
		{"ai:\n  providers:\n    p: {base_url: \"http://x\", timeout: 30}\n", "moat-server.yaml:3: ai.providers.p.timeout:"},
		{"ai:\n  providers:\n    p: {base_url: \"http://x\"}\n  models:\n    m: {provider: q, model: x, kind: chat}\n",
			"moat-server.yaml:5: ai.models.m.provider: \"q\" is not a configured provider; name one of p"},
		{"ai:\n  providers:\n    p: {base_url: \"http://x\"}\n  models:\n    m: {provider: p, model: x}\n",
			"moat-server.yaml:5: ai.models.m.kind: missing; write kind: chat or kind: embed"},
		{"ai:\n  budgets: {org_daily_tokens: lots}\n", "moat-server.yaml:2: ai.budgets.org_daily_tokens: \"lots\" is not a whole number"},
		{"ai:\n  knowledge: {embedding_model: nope}\n", "moat-server.yaml:2: ai.knowledge.embedding_model: \"nope\" is not a configured model"},
	} {
		_, err := server.ParseConfig("moat-server.yaml", []byte(tt.yaml))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant %s...", tt.yaml, err, tt.want)
		}
	}
}

// TestAIUsageRoute: GET /v1/ai/usage shows the caller's organization its
// budgets (the override when the operator set one) and its usage per day,
// never another organization's; it needs permission ai.usage, and a
// server without providers says it has none.
func TestAIUsageRoute(t *testing.T) {
	ctx := context.Background()
	srv := aitest.New(t, "")
	ts := start(t, "", func(c *server.Config) {
		c.AI = ai.Config{
			Providers: map[string]ai.ProviderConfig{"local": {BaseURL: srv.URL}},
			Models:    map[string]ai.ModelConfig{"small-chat": {Provider: "local", Model: "m", Kind: ai.KindChat}},
			Budgets:   ai.BudgetConfig{OrgDailyTokens: 5000, ModuleDailyTokens: 1000},
		}
	})
	st := ts.Store()
	for _, u := range []struct {
		org, module string
		day         time.Time
		used        int64
	}{{"acme", "notes", time.Now(), 120}, {"acme", "notes", time.Now().AddDate(0, 0, -1), 30}, {"acme", "sum", time.Now(), 7}, {"globex", "spy", time.Now(), 999}} {
		r, err := st.AIReserve(ctx, store.Scope{Org: u.org, Module: u.module}, u.day, 10, store.AIBudget{OrgDailyTokens: 1e6, ModuleDailyTokens: 1e6})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.AISettle(ctx, r, u.used); err != nil {
			t.Fatal(err)
		}
	}
	admin := ts.key(t, "acme", "ann", "admin")
	res := ts.do(t, "GET", "/v1/ai/usage?days=2", admin, nil)
	var got server.AIUsageJSON
	if res.status != 200 || json.Unmarshal(res.body, &got) != nil {
		t.Fatalf("GET /v1/ai/usage: %d %s", res.status, res.body)
	}
	today, yesterday := time.Now().UTC().Format(time.DateOnly), time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	want := []server.AIUsageEntry{
		{Day: today, Module: "", Used: 127, Calls: 2}, {Day: today, Module: "notes", Used: 120, Calls: 1}, {Day: today, Module: "sum", Used: 7, Calls: 1},
		{Day: yesterday, Module: "", Used: 30, Calls: 1}, {Day: yesterday, Module: "notes", Used: 30, Calls: 1},
	}
	if got.Org != "acme" || got.Budget != (server.AIBudgetJSON{OrgDailyTokens: 5000, ModuleDailyTokens: 1000}) || fmt.Sprint(got.Days) != fmt.Sprint(want) {
		t.Errorf("usage = %+v\nwant days %+v", got, want)
	}
	if strings.Contains(string(res.body), "globex") || strings.Contains(string(res.body), "999") {
		t.Errorf("another organization's usage shown: %s", res.body)
	}
	if err := st.AIBudgetPut(ctx, "acme", store.AIBudget{OrgDailyTokens: 9000}); err != nil {
		t.Fatal(err)
	}
	res = ts.do(t, "GET", "/v1/ai/usage?days=1", admin, nil)
	if json.Unmarshal(res.body, &got) != nil || got.Budget != (server.AIBudgetJSON{OrgDailyTokens: 9000, ModuleDailyTokens: 1000, Override: true}) || len(got.Days) != 3 {
		t.Errorf("with an override: %s", res.body)
	}
	if res := ts.do(t, "GET", "/v1/ai/usage?days=40", admin, nil); res.status != 400 {
		t.Errorf("days=40: %d %s", res.status, res.body)
	}
	if res := ts.do(t, "GET", "/v1/ai/usage", ts.key(t, "acme", "bob", "dev"), nil); res.status != 403 {
		t.Errorf("without ai.usage: %d %s", res.status, res.body)
	}
	plain := start(t, "", nil)
	if res := plain.do(t, "GET", "/v1/ai/usage", plain.key(t, "acme", "ann", "admin"), nil); res.status != 404 {
		t.Errorf("a server without providers: %d %s", res.status, res.body)
	}
}
