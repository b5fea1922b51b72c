package ai

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// Config is the operator's AI configuration: the providers model calls go
// to, the models guests may name (aliases the operator chose, never a
// provider's own names), the daily token budgets, and the model knowledge
// embeds with. In the server configuration it is the ai: section:
//
//	ai:
//	  providers:
//	    local: {base_url: "http://127.0.0.1:8000/v1"}
//	    openai: {base_url: "https://api.openai.com/v1", api_key_secret: openai}
//	  models:
//	    small-chat: {provider: openai, model: gpt-4o-mini, kind: chat, max_output_tokens: 1024}
//	    embed-small: {provider: local, model: nomic-embed-text, kind: embed}
//	  budgets: {org_daily_tokens: 1000000, module_daily_tokens: 250000}
//	  knowledge: {embedding_model: embed-small}
//
// The zero value configures nothing: every ai op is unavailable, and
// knowledge is ranked by full text alone.
type Config struct {
	Providers map[string]ProviderConfig `yaml:"providers"`
	Models    map[string]ModelConfig    `yaml:"models"`
	Budgets   BudgetConfig              `yaml:"budgets"`
	Knowledge KnowledgeConfig           `yaml:"knowledge"`
}

// ProviderConfig is one OpenAI-compatible HTTP API: a hosted one, vLLM,
// llama.cpp's server or Ollama's /v1. Its key comes from the operator's
// secrets (APIKeySecret, read at each call, so a rotated key takes effect
// at once) or from the environment moat was started in (APIKeyEnv, read
// once at start); a local server needs neither.
type ProviderConfig struct {
	// BaseURL is where the API lives; the host posts to
	// {base_url}/chat/completions and {base_url}/embeddings.
	BaseURL string `yaml:"base_url"`
	// APIKeySecret names the operator's secret holding the key (moat
	// secrets set NAME, no --org).
	APIKeySecret string `yaml:"api_key_secret"`
	// APIKeyEnv names an environment variable holding the key.
	APIKeyEnv string `yaml:"api_key_env"`
	// Timeout bounds one call, from the request to the last byte of the
	// reply (the invocation's own deadline applies too). Default 60s.
	Timeout policy.Duration `yaml:"timeout"`
	// MaxConcurrent bounds the calls in flight to this provider from this
	// process, over every organization; a call waits for a turn within
	// its deadline. Default 8.
	MaxConcurrent int `yaml:"max_concurrent"`
	// MaxResponseBytes bounds a reply's body; a longer one fails the
	// call. Default 32MiB (256 embeddings of 3072 dimensions as JSON fit).
	MaxResponseBytes policy.ByteSize `yaml:"max_response_bytes"`
}

// Model kinds.
const (
	KindChat  = "chat"
	KindEmbed = "embed"
)

// ModelConfig is one model alias: the name grants and guests use, bound
// to a provider and the provider's own name of the model.
type ModelConfig struct {
	Provider string `yaml:"provider"`
	Model    string `yaml:"model"` // the provider's name of the model
	Kind     string `yaml:"kind"`  // chat or embed
	// MaxOutputTokens bounds a chat call's reply: a request asking for
	// more is refused, and one asking for none is sent with this. Default
	// 1024; at most abi.MaxAIOutputTokens.
	MaxOutputTokens int `yaml:"max_output_tokens"`
	// Dimensions, for an embed model, is the length of its vectors when
	// the operator wants it checked; a reply of another length fails the
	// call. 0: any length up to MaxDimensions.
	Dimensions int `yaml:"dimensions"`
}

// BudgetConfig holds the default daily token budgets (UTC days). Every
// model call is charged to its organization's and its module's budget of
// the day; an operator gives an organization other limits with moat ai
// budget set, which the database keeps (store.AIBudgetPut).
type BudgetConfig struct {
	// OrgDailyTokens bounds the tokens an organization's modules spend
	// together in a day. Default 1000000.
	OrgDailyTokens int `yaml:"org_daily_tokens"`
	// ModuleDailyTokens bounds what one module of an organization spends
	// in a day. Default 250000.
	ModuleDailyTokens int `yaml:"module_daily_tokens"`
}

// KnowledgeConfig turns on hybrid knowledge search: with an embedding
// model, knowledge.add embeds each document (a model call charged to the
// module's budgets) and knowledge.search fuses full-text and nearest-vector
// ranks. Without one, knowledge is full text alone.
type KnowledgeConfig struct {
	EmbeddingModel string `yaml:"embedding_model"`
	// MinSimilarity leaves out of a search's nearest documents those
	// whose cosine similarity to the query is not above it (0 to 1,
	// default 0: only those pointing away from the query). Embedding
	// models place unrelated texts at 0.1 to 0.3, so an operator who
	// wants a search to find nothing for an unrelated query sets it to
	// what the model shows.
	MinSimilarity float64 `yaml:"min_similarity"`
}

// Defaults and bounds of the configuration.
const (
	DefaultTimeout           = 60 * time.Second
	DefaultMaxConcurrent     = 8
	DefaultMaxResponseBytes  = 32 << 20
	DefaultMaxOutputTokens   = 1024
	DefaultOrgDailyTokens    = 1_000_000
	DefaultModuleDailyTokens = 250_000
	// MaxDailyTokens bounds a daily budget: sums of a day's usage stay far
	// from overflowing.
	MaxDailyTokens = 1 << 50
	// MaxDimensions bounds an embedding's length (and so what a vector
	// costs to store and to compare).
	MaxDimensions = store.MaxVectorDims
	// MaxConcurrentLimit bounds max_concurrent.
	MaxConcurrentLimit = 1024
)

// Enabled reports whether c configures any model.
func (c *Config) Enabled() bool { return len(c.Models) > 0 }

// FillDefaults sets every field left out to its default.
func (c *Config) FillDefaults() {
	for name, p := range c.Providers {
		if p.Timeout <= 0 {
			p.Timeout = policy.Duration(DefaultTimeout)
		}
		if p.MaxConcurrent == 0 {
			p.MaxConcurrent = DefaultMaxConcurrent
		}
		if p.MaxResponseBytes == 0 {
			p.MaxResponseBytes = DefaultMaxResponseBytes
		}
		c.Providers[name] = p
	}
	for name, m := range c.Models {
		if m.Kind == KindChat && m.MaxOutputTokens == 0 {
			m.MaxOutputTokens = DefaultMaxOutputTokens
		}
		c.Models[name] = m
	}
	if c.Budgets.OrgDailyTokens == 0 {
		c.Budgets.OrgDailyTokens = DefaultOrgDailyTokens
	}
	if c.Budgets.ModuleDailyTokens == 0 {
		c.Budgets.ModuleDailyTokens = DefaultModuleDailyTokens
	}
}

// ConfigError is a mistake in the configuration: Field is its path below
// ai (providers.local.base_url), Msg what is wrong and how to fix it.
type ConfigError struct {
	Field, Msg string
}

func (e *ConfigError) Error() string { return "ai." + e.Field + ": " + e.Msg }

// aliasRE is what a model alias may be: what a grant can name (policy's
// model names), so every alias can be granted.
var aliasRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$`)

// providerRE is a provider's name.
var providerRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// envRE is an environment variable's name.
var envRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// secretRE is a secret's name, as moat secrets names them.
var secretRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Validate checks c (with its defaults filled in) and returns the first
// mistake as a *ConfigError, in the order of the file's sections and, in
// each, of the names sorted. It reads nothing outside c: the keys an
// api_key_env names are checked by New, in the process that makes the
// calls (a command reading the server's configuration for another
// purpose need not hold them).
func (c *Config) Validate() error {
	fail := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	for _, name := range sortedKeys(c.Providers) {
		p := c.Providers[name]
		f := "providers." + name
		if !providerRE.MatchString(name) {
			return fail(f, "%q is not a provider name; use 1-64 characters a-z 0-9 _ -, like openai", name)
		}
		if err := checkBaseURL(p.BaseURL); err != nil {
			return fail(f+".base_url", "%v", err)
		}
		if p.APIKeySecret != "" && p.APIKeyEnv != "" {
			return fail(f, "give api_key_secret or api_key_env, not both")
		}
		if p.APIKeySecret != "" && !secretRE.MatchString(p.APIKeySecret) {
			return fail(f+".api_key_secret", "%q is not a secret name; use the NAME of moat secrets set NAME", p.APIKeySecret)
		}
		if p.APIKeyEnv != "" {
			if !envRE.MatchString(p.APIKeyEnv) {
				return fail(f+".api_key_env", "%q is not an environment variable's name, like OPENAI_API_KEY", p.APIKeyEnv)
			}
		}
		if d := p.Timeout.Std(); d < time.Second || d > 10*time.Minute {
			return fail(f+".timeout", "%s is outside 1s to 10m; leave it out for the default %s", p.Timeout, policy.Duration(DefaultTimeout))
		}
		if p.MaxConcurrent < 1 || p.MaxConcurrent > MaxConcurrentLimit {
			return fail(f+".max_concurrent", "%d is outside 1 to %d; leave it out for the default %d", p.MaxConcurrent, MaxConcurrentLimit, DefaultMaxConcurrent)
		}
		if p.MaxResponseBytes < 64<<10 || p.MaxResponseBytes > 1<<30 {
			return fail(f+".max_response_bytes", "%s is outside 64KiB to 1GiB; leave it out for the default %s", p.MaxResponseBytes, policy.ByteSize(DefaultMaxResponseBytes))
		}
	}
	for _, name := range sortedKeys(c.Models) {
		m := c.Models[name]
		f := "models." + name
		if !aliasRE.MatchString(name) {
			return fail(f, "%q is not a model alias; use letters, digits and . _ - : / @ + (what a grant can name), like small-chat", name)
		}
		if _, ok := c.Providers[m.Provider]; !ok {
			if m.Provider == "" {
				return fail(f+".provider", "missing; name one of the providers (%s)", names(c.Providers))
			}
			return fail(f+".provider", "%q is not a configured provider; name one of %s", m.Provider, names(c.Providers))
		}
		if m.Model == "" || len(m.Model) > 256 || strings.ContainsFunc(m.Model, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fail(f+".model", "give the provider's name of the model (1-256 printable characters), like gpt-4o-mini")
		}
		switch m.Kind {
		case KindChat:
			if m.MaxOutputTokens < 1 || m.MaxOutputTokens > abi.MaxAIOutputTokens {
				return fail(f+".max_output_tokens", "%d is outside 1 to %d; leave it out for the default %d", m.MaxOutputTokens, abi.MaxAIOutputTokens, DefaultMaxOutputTokens)
			}
			if m.Dimensions != 0 {
				return fail(f+".dimensions", "a chat model has no dimensions; remove the line, or make it kind: embed")
			}
		case KindEmbed:
			if m.MaxOutputTokens != 0 {
				return fail(f+".max_output_tokens", "an embed model writes no tokens; remove the line, or make it kind: chat")
			}
			if m.Dimensions < 0 || m.Dimensions > MaxDimensions {
				return fail(f+".dimensions", "%d is outside 1 to %d (or 0 for any length)", m.Dimensions, MaxDimensions)
			}
		case "":
			return fail(f+".kind", "missing; write kind: chat or kind: embed")
		default:
			return fail(f+".kind", "%q is not a kind; write chat or embed", m.Kind)
		}
	}
	b := c.Budgets
	if b.OrgDailyTokens < 1 || b.OrgDailyTokens > MaxDailyTokens {
		return fail("budgets.org_daily_tokens", "%d is outside 1 to %d; leave it out for the default %d", b.OrgDailyTokens, MaxDailyTokens, DefaultOrgDailyTokens)
	}
	if b.ModuleDailyTokens < 1 || b.ModuleDailyTokens > MaxDailyTokens {
		return fail("budgets.module_daily_tokens", "%d is outside 1 to %d; leave it out for the default %d", b.ModuleDailyTokens, MaxDailyTokens, DefaultModuleDailyTokens)
	}
	if ms := c.Knowledge.MinSimilarity; ms < 0 || ms >= 1 || ms != ms {
		return fail("knowledge.min_similarity", "%v is outside 0 to 1 (a cosine similarity); leave it out for 0", ms)
	}
	if name := c.Knowledge.EmbeddingModel; name != "" {
		m, ok := c.Models[name]
		switch {
		case !ok:
			return fail("knowledge.embedding_model", "%q is not a configured model; name one of the embed models under models", name)
		case m.Kind != KindEmbed:
			return fail("knowledge.embedding_model", "model %s is kind %s; knowledge needs a kind: embed model", name, m.Kind)
		}
	}
	return nil
}

// Ports are the TCP ports the providers' base URLs name (80 and 443 when
// they name none), for a confined server's connect rule.
func (c *Config) Ports() []uint16 {
	var ports []uint16
	for _, name := range sortedKeys(c.Providers) {
		u, err := url.Parse(c.Providers[name].BaseURL)
		if err != nil {
			continue
		}
		port := uint16(80)
		if u.Scheme == "https" {
			port = 443
		}
		if p := u.Port(); p != "" {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil {
				continue
			}
			port = uint16(n)
		}
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	return ports
}

// checkBaseURL checks a provider's base URL: http or https, a host, no
// user information (a key belongs in api_key_secret, where it is never
// logged), no query or fragment (the paths are appended).
func checkBaseURL(s string) error {
	if s == "" {
		return fmt.Errorf("missing; give the API's URL up to /v1, like https://api.openai.com/v1")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL; write it like https://api.openai.com/v1")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme %q: use http or https", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("no host; write it like https://api.openai.com/v1")
	case u.User != nil:
		return fmt.Errorf("holds user information; put the key in a secret (api_key_secret) rather than the URL, where it would be logged")
	case u.Port() != "" && !validPort(u.Port()):
		return fmt.Errorf("port %q is not a number from 1 to 65535", u.Port())
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return fmt.Errorf("has a query or fragment; give the base the API's paths are appended to, like https://api.openai.com/v1")
	}
	return nil
}

func validPort(p string) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0
}

// checkKey checks an API key before it goes into a header: visible ASCII
// only, so it can neither break the header nor smuggle another. The error
// never quotes the key.
func checkKey(k string) error {
	if len(k) == 0 || len(k) > 4096 {
		return fmt.Errorf("is %d bytes; an API key is 1 to 4096 bytes", len(k))
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("holds a space, a control character or a non-ASCII byte at offset %d; an API key is visible ASCII", i)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func names[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none is configured: add one under ai.providers"
	}
	return strings.Join(sortedKeys(m), ", ")
}
