package ai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// provider is one OpenAI-compatible API: its own HTTP client (no proxy
// from the environment, no redirects followed, every phase under a
// timeout, TLS as Go's defaults verify it), its bound on calls in flight,
// and the key from the environment when that is where it comes from.
type provider struct {
	name   string
	cfg    ProviderConfig
	base   string // BaseURL without its trailing slash
	client *http.Client
	slots  chan struct{}
	envKey string
}

func newProvider(name string, cfg ProviderConfig) *provider {
	timeout := cfg.Timeout.Std()
	tr := &http.Transport{
		Proxy:                  nil, // never $HTTP_PROXY: the operator named the address
		DialContext:            (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  timeout,
		MaxIdleConnsPerHost:    cfg.MaxConcurrent,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      true,
	}
	p := &provider{
		name: name, cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/"),
		client: &http.Client{
			Transport: tr,
			Timeout:   timeout,
			// A provider that redirects is misconfigured; following it
			// would send the prompt, and the key, somewhere the operator
			// did not name.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		slots: make(chan struct{}, cfg.MaxConcurrent),
	}
	if cfg.APIKeyEnv != "" {
		p.envKey = lookupEnv(cfg.APIKeyEnv)
	}
	return p
}

// callError is a provider call that failed: err is what the guest sees
// (never the key, never the provider's address), detail what the
// operator's log gets (scrubbed of the key too), and answered whether the
// provider replied at all: a request that got no reply may still have
// been processed, and is charged its input's estimate (see settle).
type callError struct {
	err      *abi.Error
	detail   string
	answered bool
}

func (e *callError) Error() string { return e.err.Error() }

// chat wire types: the subset of OpenAI's chat completions moat sends
// and reads.
type chatRequest struct {
	Model          string          `json:"model"`
	Messages       []abi.AIMessage `json:"messages"`
	MaxTokens      int             `json:"max_tokens"`
	Temperature    *float64        `json:"temperature,omitempty"`
	ResponseFormat *responseFormat `json:"response_format,omitempty"`
}

type responseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *schemaSpec `json:"json_schema,omitempty"`
}

type schemaSpec struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage `json:"usage"`
}

type wireUsage struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
}

type embedRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
}

type embedResponse struct {
	Data []struct {
		Embedding []float64 `json:"embedding"`
		Index     *int      `json:"index"`
	} `json:"data"`
	Usage *wireUsage `json:"usage"`
}

// maxReplyText bounds a chat reply's text: it goes back to the guest in
// one op reply.
const maxReplyText = 1 << 20

// post sends body to path with key and decodes the reply into out. Every
// failure is a *callError.
func (p *provider) post(ctx context.Context, op, path, key string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return &callError{err: abi.Errorf(abi.CodeInternal, "%s: the request could not be encoded", op), detail: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+path, bytes.NewReader(b))
	if err != nil {
		return &callError{err: abi.Errorf(abi.CodeInternal, "%s: provider %s: the request could not be made", op, p.name), detail: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "moat")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		why := "is unreachable"
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			why = "did not answer in time"
		}
		// The URL is the operator's; the guest hears the provider's name.
		return &callError{err: abi.Errorf(abi.CodeUnavailable, "%s: provider %s %s; retry later", op, p.name, why), detail: scrub(err.Error(), key)}
	}
	defer resp.Body.Close()
	max := int64(p.cfg.MaxResponseBytes)
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return &callError{err: abi.Errorf(abi.CodeUnavailable, "%s: provider %s broke off its reply; retry later", op, p.name), detail: scrub(err.Error(), key), answered: true}
	}
	if int64(len(data)) > max {
		return &callError{err: abi.Errorf(abi.CodeUnavailable, "%s: provider %s sent a reply over %d bytes (the operator's max_response_bytes)", op, p.name, max),
			detail: "reply too large", answered: true}
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(op, p.name, resp, data, key)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &callError{err: abi.Errorf(abi.CodeUnavailable, "%s: provider %s sent a reply that is not the API's JSON", op, p.name),
			detail: scrub(err.Error(), key), answered: true}
	}
	return nil
}

// statusError maps a provider's refusal to a code: 429 says when to
// retry, 401 and 403 that the operator's key was refused (the guest can
// do nothing about it; the provider's words are not passed on, since
// some providers quote the key they refused), 400-class request errors
// are the guest's to fix and carry the provider's message (scrubbed,
// cut), and everything else is unavailable.
func statusError(op, name string, resp *http.Response, body []byte, key string) *callError {
	msg := providerMessage(body, key)
	detail := fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg)
	e := &callError{detail: detail, answered: true}
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests:
		after := "later"
		if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
			after = "after " + d.String()
		}
		e.err = abi.Errorf(abi.CodeUnavailable, "%s: provider %s is limiting this host's requests (HTTP 429); retry %s", op, name, after)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		e.err = abi.Errorf(abi.CodeUnavailable, "%s: provider %s refused the operator's key (HTTP %d); the operator must fix it", op, name, code)
	case code == http.StatusRequestEntityTooLarge:
		e.err = abi.Errorf(abi.CodeTooLarge, "%s: provider %s refused the request as too large (HTTP 413); send less", op, name)
	case code == http.StatusBadRequest || code == http.StatusUnprocessableEntity:
		e.err = abi.Errorf(abi.CodeInvalidArgument, "%s: provider %s refused the request (HTTP %d): %s", op, name, code, cut(msg, 300))
	case code >= 300 && code < 400:
		e.err = abi.Errorf(abi.CodeUnavailable, "%s: provider %s answered with a redirect (HTTP %d), which the host does not follow; the operator's base_url is wrong", op, name, code)
	default:
		e.err = abi.Errorf(abi.CodeUnavailable, "%s: provider %s failed (HTTP %d); retry later", op, name, code)
	}
	return e
}

// providerMessage is the error message of an OpenAI-style error body
// ({"error": {"message": ...}}), or the start of the body, scrubbed of
// the key.
func providerMessage(body []byte, key string) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil && len(e.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &obj) == nil && obj.Message != "" {
			msg = obj.Message
		} else {
			_ = json.Unmarshal(e.Error, &msg)
		}
	}
	if msg == "" {
		msg = string(body[:min(len(body), 512)])
	}
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(msg, "?"))
	return cut(scrub(msg, key), 512)
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 && n < 86400*7 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t).Round(time.Second); d > 0 && d < 7*24*time.Hour {
			return d, true
		}
		return 0, true
	}
	return 0, false
}

// scrub removes key from s, and every piece of it of 6 bytes or more
// (some providers quote the start and end of a key they refused), so
// that no message the host writes or passes on holds it.
func scrub(s, key string) string {
	if key == "" || s == "" {
		return s
	}
	s = strings.ReplaceAll(s, key, "[key]")
	const piece = 6
	for i := 0; i+piece <= len(key); i++ {
		if strings.Contains(s, key[i:i+piece]) {
			s = strings.ReplaceAll(s, key[i:i+piece], "[key]")
		}
	}
	return s
}

// cut shortens s to n bytes at a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// usageOf reads a reply's usage: ok false when it is missing or not
// counts (negative, or past what a budget can hold), in which case the
// caller charges its estimate.
func usageOf(u *wireUsage, wantOutput bool) (abi.AIUsage, bool) {
	if u == nil || u.PromptTokens == nil || wantOutput && u.CompletionTokens == nil {
		return abi.AIUsage{}, false
	}
	in, out := *u.PromptTokens, int64(0)
	if u.CompletionTokens != nil {
		out = *u.CompletionTokens
	}
	if in < 0 || out < 0 || in > 1<<40 || out > 1<<40 {
		return abi.AIUsage{}, false
	}
	return abi.AIUsage{InputTokens: in, OutputTokens: out}, true
}

// complete sends a chat completion and returns its text and usage (ok
// false: the provider said none).
func (p *provider) complete(ctx context.Context, key string, req *chatRequest) (string, abi.AIUsage, bool, error) {
	var resp chatResponse
	if err := p.post(ctx, abi.OpAIComplete, "/chat/completions", key, req, &resp); err != nil {
		return "", abi.AIUsage{}, false, err
	}
	bad := func(what string) error {
		return &callError{err: abi.Errorf(abi.CodeUnavailable, "%s: provider %s sent a reply %s", abi.OpAIComplete, p.name, what), detail: what, answered: true}
	}
	usage, ok := usageOf(resp.Usage, true)
	if len(resp.Choices) == 0 {
		return "", usage, ok, bad("with no choices")
	}
	c := resp.Choices[0]
	if c.Message.Content == nil {
		if c.Message.Refusal != nil {
			return "", usage, ok, &callError{err: abi.Errorf(abi.CodeUnavailable, "%s: model refused: %s", abi.OpAIComplete, cut(scrub(*c.Message.Refusal, key), 300)),
				detail: "refusal", answered: true}
		}
		return "", usage, ok, bad("with no text (finish_reason " + strconv.Quote(cut(c.FinishReason, 32)) + ")")
	}
	text := *c.Message.Content
	if len(text) > maxReplyText {
		return "", usage, ok, bad(fmt.Sprintf("of %d bytes of text, over the %d a guest receives", len(text), maxReplyText))
	}
	// A server that echoes its request (a debugging proxy posing as a
	// provider) would hand the guest the operator's key: never.
	if key != "" {
		text = strings.ReplaceAll(text, key, "[key]")
	}
	return text, usage, ok, nil
}

// embed sends inputs for embedding and returns one vector per input, in
// order.
func (p *provider) embed(ctx context.Context, key, model string, inputs []string, dims int) ([][]float32, abi.AIUsage, bool, error) {
	var resp embedResponse
	if err := p.post(ctx, abi.OpAIEmbed, "/embeddings", key, &embedRequest{Model: model, Input: inputs, EncodingFormat: "float"}, &resp); err != nil {
		return nil, abi.AIUsage{}, false, err
	}
	usage, ok := usageOf(resp.Usage, false)
	bad := func(format string, args ...any) error {
		what := fmt.Sprintf(format, args...)
		return &callError{err: abi.Errorf(abi.CodeUnavailable, "%s: provider %s sent a reply %s", abi.OpAIEmbed, p.name, what), detail: what, answered: true}
	}
	if len(resp.Data) != len(inputs) {
		return nil, usage, ok, bad("with %d vectors for %d inputs", len(resp.Data), len(inputs))
	}
	out := make([][]float32, len(inputs))
	n := -1
	for i, d := range resp.Data {
		at := i
		if d.Index != nil {
			at = *d.Index
		}
		if at < 0 || at >= len(out) || out[at] != nil {
			return nil, usage, ok, bad("with a vector at index %d twice or out of range", at)
		}
		switch {
		case len(d.Embedding) == 0 || len(d.Embedding) > MaxDimensions:
			return nil, usage, ok, bad("with a vector of %d values (1 to %d)", len(d.Embedding), MaxDimensions)
		case n >= 0 && len(d.Embedding) != n:
			return nil, usage, ok, bad("with vectors of %d and %d values", n, len(d.Embedding))
		case dims > 0 && len(d.Embedding) != dims:
			return nil, usage, ok, bad("with vectors of %d values, not the %d the operator configured", len(d.Embedding), dims)
		}
		n = len(d.Embedding)
		v := make([]float32, n)
		for j, x := range d.Embedding {
			if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > math.MaxFloat32 {
				return nil, usage, ok, bad("with a value that is not a finite float32")
			}
			v[j] = float32(x)
		}
		out[at] = v
	}
	return out, usage, ok, nil
}
