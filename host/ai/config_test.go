package ai_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/policy"
)

// TestConfigValidate: every mistake names its field and says how to fix
// it.
func TestConfigValidate(t *testing.T) {
	base := func() ai.Config {
		return ai.Config{
			Providers: map[string]ai.ProviderConfig{"p": {BaseURL: "https://api.example.com/v1"}},
			Models: map[string]ai.ModelConfig{
				"chat":  {Provider: "p", Model: "m", Kind: ai.KindChat},
				"embed": {Provider: "p", Model: "e", Kind: ai.KindEmbed},
			},
		}
	}
	tests := []struct {
		name  string
		edit  func(c *ai.Config)
		field string // "" for valid
		says  string
	}{
		{"valid", func(*ai.Config) {}, "", ""},
		{"the zero value", func(c *ai.Config) { *c = ai.Config{} }, "", ""},
		{"key from the environment", func(c *ai.Config) {
			c.Providers["p"] = ai.ProviderConfig{BaseURL: "http://127.0.0.1:8000/v1", APIKeyEnv: "MOAT_TEST_GOOD_KEY"}
		}, "", ""},
		{"no base_url", func(c *ai.Config) { c.Providers["p"] = ai.ProviderConfig{} }, "providers.p.base_url", "missing"},
		{"a key in the URL", func(c *ai.Config) { c.Providers["p"] = ai.ProviderConfig{BaseURL: "https://sk-x@api.example.com/v1"} }, "providers.p.base_url", "api_key_secret"},
		{"a query in the URL", func(c *ai.Config) { c.Providers["p"] = ai.ProviderConfig{BaseURL: "https://api.example.com/v1?key=1"} }, "providers.p.base_url", "query"},
		{"ftp", func(c *ai.Config) { c.Providers["p"] = ai.ProviderConfig{BaseURL: "ftp://api.example.com/v1"} }, "providers.p.base_url", "http or https"},
		{"both keys", func(c *ai.Config) {
			c.Providers["p"] = ai.ProviderConfig{BaseURL: "https://a.example/v1", APIKeySecret: "k", APIKeyEnv: "MOAT_TEST_GOOD_KEY"}
		}, "providers.p", "not both"},
		{"bad secret name", func(c *ai.Config) {
			c.Providers["p"] = ai.ProviderConfig{BaseURL: "https://a.example/v1", APIKeySecret: "a b"}
		}, "providers.p.api_key_secret", "secret name"},
		{"timeout too long", func(c *ai.Config) {
			c.Providers["p"] = ai.ProviderConfig{BaseURL: "https://a.example/v1", Timeout: policy.Duration(1 << 62)}
		}, "providers.p.timeout", "1s to 10m"},
		{"concurrency", func(c *ai.Config) {
			c.Providers["p"] = ai.ProviderConfig{BaseURL: "https://a.example/v1", MaxConcurrent: 5000}
		}, "providers.p.max_concurrent", "1 to 1024"},
		{"bad provider name", func(c *ai.Config) { c.Providers["P Q"] = ai.ProviderConfig{BaseURL: "https://a.example/v1"} }, "providers.P Q", "provider name"},
		{"unknown provider", func(c *ai.Config) { c.Models["chat"] = ai.ModelConfig{Provider: "q", Model: "m", Kind: ai.KindChat} }, "models.chat.provider", "one of p"},
		{"no kind", func(c *ai.Config) { c.Models["chat"] = ai.ModelConfig{Provider: "p", Model: "m"} }, "models.chat.kind", "chat or kind: embed"},
		{"odd kind", func(c *ai.Config) { c.Models["chat"] = ai.ModelConfig{Provider: "p", Model: "m", Kind: "image"} }, "models.chat.kind", "chat or embed"},
		{"no provider model", func(c *ai.Config) { c.Models["chat"] = ai.ModelConfig{Provider: "p", Kind: ai.KindChat} }, "models.chat.model", "provider's name"},
		{"an alias a grant cannot name", func(c *ai.Config) {
			c.Models["bad alias!"] = ai.ModelConfig{Provider: "p", Model: "m", Kind: ai.KindChat}
		}, "models.bad alias!", "model alias"},
		{"max_output_tokens past abi's", func(c *ai.Config) {
			c.Models["chat"] = ai.ModelConfig{Provider: "p", Model: "m", Kind: ai.KindChat, MaxOutputTokens: 40_000}
		}, "models.chat.max_output_tokens", "1 to 32768"},
		{"an embed model with output tokens", func(c *ai.Config) {
			c.Models["embed"] = ai.ModelConfig{Provider: "p", Model: "m", Kind: ai.KindEmbed, MaxOutputTokens: 10}
		}, "models.embed.max_output_tokens", "writes no tokens"},
		{"dimensions too many", func(c *ai.Config) {
			c.Models["embed"] = ai.ModelConfig{Provider: "p", Model: "m", Kind: ai.KindEmbed, Dimensions: 10_000}
		}, "models.embed.dimensions", "1 to 8192"},
		{"a negative budget", func(c *ai.Config) { c.Budgets.OrgDailyTokens = -1 }, "budgets.org_daily_tokens", "outside"},
		{"knowledge with a chat model", func(c *ai.Config) { c.Knowledge.EmbeddingModel = "chat" }, "knowledge.embedding_model", "kind: embed"},
		{"knowledge with no such model", func(c *ai.Config) { c.Knowledge.EmbeddingModel = "nope" }, "knowledge.embedding_model", "not a configured model"},
		{"min_similarity 1", func(c *ai.Config) { c.Knowledge.MinSimilarity = 1 }, "knowledge.min_similarity", "0 to 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.edit(&c)
			c.FillDefaults()
			err := c.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			var ce *ai.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field || !strings.Contains(ce.Msg, tt.says) {
				t.Fatalf("= %v; want field %s saying %q", err, tt.field, tt.says)
			}
			if strings.Contains(err.Error(), "sk-") {
				t.Errorf("the error quotes a key: %v", err)
			}
		})
	}
}

// TestNewChecksKeys: the keys api_key_env names are checked when the
// Service is made, in the process that will send them, never quoted.
func TestNewChecksKeys(t *testing.T) {
	t.Setenv("MOAT_TEST_BAD_KEY", "sk-bad\nInjected: 1")
	st := openStore(t)
	for _, tt := range []struct{ env, says string }{
		{"MOAT_TEST_UNSET_KEY", "not set"},
		{"MOAT_TEST_BAD_KEY", "control character"},
	} {
		_, err := ai.New(ai.Config{Providers: map[string]ai.ProviderConfig{"p": {BaseURL: "https://a.example/v1", APIKeyEnv: tt.env}}}, st, nil)
		var ce *ai.ConfigError
		if !errors.As(err, &ce) || ce.Field != "providers.p.api_key_env" || !strings.Contains(ce.Msg, tt.says) || strings.Contains(err.Error(), "sk-") {
			t.Errorf("$%s: %v; want providers.p.api_key_env saying %q", tt.env, err, tt.says)
		}
	}
}

// TestPorts: the ports a confined server must be able to connect to.
func TestPorts(t *testing.T) {
	c := ai.Config{Providers: map[string]ai.ProviderConfig{
		"a": {BaseURL: "https://api.example.com/v1"}, "b": {BaseURL: "http://127.0.0.1:8000/v1"},
		"c": {BaseURL: "http://ollama.local/v1"}, "d": {BaseURL: "https://other.example:443/v1"},
	}}
	if got := fmt.Sprint(c.Ports()); got != "[443 8000 80]" {
		t.Errorf("Ports = %s, want [443 8000 80]", got)
	}
	c = ai.Config{Providers: map[string]ai.ProviderConfig{"p": {BaseURL: "http://x:70000/v1"}}}
	c.FillDefaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "port") {
		t.Errorf("port 70000: %v", err)
	}
}
