// Package aitest is a real HTTP server speaking the OpenAI chat
// completions and embeddings protocol, in the test's own process: the one
// kind of stand-in the project allows, for a paid external service.
//
// It checks each request's shape (method, path, content type, the
// Authorization header against its key, the fields a provider requires)
// and answers from the input, never with constants: a completion is the
// model's name and the last message's words (as JSON when a json_schema
// asks for it), cut to max_tokens words; an embedding is a bag of the
// input's words, each hashed to a dimension after Synonyms maps it to its
// concept, so two texts that share concepts but no word are near; usage
// counts words. It can be told to fail the next requests in the ways
// providers fail (FailNext).
package aitest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
)

// Fault is a way the server fails a request.
type Fault int

const (
	// RateLimited answers 429 with Retry-After: 7.
	RateLimited Fault = iota + 1
	// ServerError answers 500.
	ServerError
	// Slow holds the request until the client gives up (or 30s pass).
	Slow
	// Huge answers 200 with a 64 MiB body.
	Huge
	// Malformed answers 200 with a body that is not JSON.
	Malformed
	// NoUsage answers as usual without the usage object.
	NoUsage
	// NoChoices answers a completion with an empty choices list.
	NoChoices
	// Redirect answers 307 to another path.
	Redirect
	// WrongDims answers an embedding with vectors one value short.
	WrongDims
	// BadRequest answers 400 with a message that quotes the key the
	// request carried, its start and its end, as careless providers do.
	BadRequest
	// EchoKey answers a completion with the request's Authorization
	// header as its text, as a debugging proxy posing as a provider
	// would.
	EchoKey
)

// Request is what the server received.
type Request struct {
	Path          string
	Authorization string
	Body          map[string]any
}

// Server is the running server. Its fields are set before the first
// request.
type Server struct {
	// URL is the base URL a provider is configured with (ending in /v1).
	URL string
	// Key is the API key the server accepts; a request without it gets
	// 401 with a message quoting the key it sent, as OpenAI's does.
	Key string
	// Synonyms maps a word (lower case) to its concept for embeddings.
	Synonyms map[string]string
	// Dims is the length of the vectors (default 256).
	Dims int

	srv      *httptest.Server
	mu       sync.Mutex
	faults   []Fault
	requests []Request
}

// New starts a server accepting key ("" accepts any request without an
// Authorization header) and stops it when t ends.
func New(t testing.TB, key string) *Server {
	s := &Server{Key: key, Dims: 256, Synonyms: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(s.srv.Close)
	return s
}

// FailNext makes the next requests fail, one fault each, in order.
func (s *Server) FailNext(faults ...Fault) {
	s.mu.Lock()
	s.faults = append(s.faults, faults...)
	s.mu.Unlock()
}

// Requests returns what the server received, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	rec := Request{Path: r.URL.Path, Authorization: r.Header.Get("Authorization")}
	var fields map[string]any
	_ = json.Unmarshal(body, &fields)
	rec.Body = fields
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	var fault Fault
	if len(s.faults) > 0 {
		fault, s.faults = s.faults[0], s.faults[1:]
	}
	s.mu.Unlock()

	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
	}
	switch {
	case r.Method != http.MethodPost:
		fail(http.StatusMethodNotAllowed, "use POST")
		return
	case r.Header.Get("Content-Type") != "application/json":
		fail(http.StatusBadRequest, "Content-Type must be application/json")
		return
	case s.Key != "" && rec.Authorization != "Bearer "+s.Key:
		// OpenAI quotes the key it refused; so does this server, whole.
		fail(http.StatusUnauthorized, fmt.Sprintf("Incorrect API key provided: %s. You can find your API key in your account settings.", strings.TrimPrefix(rec.Authorization, "Bearer ")))
		return
	case s.Key == "" && rec.Authorization != "":
		fail(http.StatusBadRequest, "this server takes no key")
		return
	case fields == nil:
		fail(http.StatusBadRequest, "the body is not a JSON object")
		return
	}
	switch fault {
	case RateLimited:
		w.Header().Set("Retry-After", "7")
		fail(http.StatusTooManyRequests, "Rate limit reached for requests; key "+s.Key)
		return
	case ServerError:
		fail(http.StatusInternalServerError, "The server had an error while processing your request.")
		return
	case Slow:
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	case Huge:
		w.Header().Set("Content-Type", "application/json")
		chunk := []byte(strings.Repeat(`{"x":"0123456789abcdef"},`, 4096))
		for n := 0; n < 64<<20; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		return
	case Malformed:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices": [{"message": {"content": "unterminated`)
		return
	case Redirect:
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		return
	case BadRequest:
		k := strings.TrimPrefix(rec.Authorization, "Bearer ")
		fail(http.StatusBadRequest, fmt.Sprintf("context length exceeded for key %s (%s...%s)", k, k[:min(len(k), 8)], k[max(len(k)-6, 0):]))
		return
	}
	model, _ := fields["model"].(string)
	if model == "" {
		fail(http.StatusBadRequest, "you must provide a model parameter")
		return
	}
	var reply map[string]any
	var err error
	switch r.URL.Path {
	case "/v1/chat/completions":
		reply, err = s.complete(model, fields, fault)
	case "/v1/embeddings":
		reply, err = s.embed(model, fields, fault)
	default:
		fail(http.StatusNotFound, "no route "+r.URL.Path)
		return
	}
	if err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	if fault == EchoKey && r.URL.Path == "/v1/chat/completions" {
		reply["choices"] = []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "you sent " + rec.Authorization}}}
	}
	if fault == NoUsage {
		delete(reply, "usage")
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(reply)
}

// Words splits text the way the server counts and embeds it: runs of
// letters and digits, lower-cased.
func Words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// PromptTokens is the usage the server reports for a conversation: the
// words of every message, plus 4 per message.
func PromptTokens(contents ...string) int64 {
	n := int64(0)
	for _, c := range contents {
		n += int64(len(Words(c))) + 4
	}
	return n
}

// Reply is the text the server answers a completion with, before
// max_tokens cuts it: "<model> heard: <the last message's words>".
func Reply(model, last string) string {
	return model + " heard: " + strings.Join(Words(last), " ")
}

func (s *Server) complete(model string, f map[string]any, fault Fault) (map[string]any, error) {
	msgs, _ := f["messages"].([]any)
	if len(msgs) == 0 {
		return nil, fmt.Errorf("messages must be a non-empty array")
	}
	var contents []string
	for i, m := range msgs {
		mm, _ := m.(map[string]any)
		role, _ := mm["role"].(string)
		content, ok := mm["content"].(string)
		if role != "system" && role != "user" && role != "assistant" || !ok {
			return nil, fmt.Errorf("messages[%d] needs a role and a string content", i)
		}
		contents = append(contents, content)
	}
	maxTokens, ok := f["max_tokens"].(float64)
	if !ok || maxTokens < 1 {
		return nil, fmt.Errorf("max_tokens must be a positive integer")
	}
	if t, ok := f["temperature"]; ok {
		if v, ok := t.(float64); !ok || v < 0 || v > 2 {
			return nil, fmt.Errorf("temperature must be 0 to 2")
		}
	}
	last := contents[len(contents)-1]
	words := strings.Fields(Reply(model, last))
	finish := "stop"
	if len(words) > int(maxTokens) {
		words, finish = words[:int(maxTokens)], "length"
	}
	text := strings.Join(words, " ")
	if rf, ok := f["response_format"].(map[string]any); ok {
		js, _ := rf["json_schema"].(map[string]any)
		if rf["type"] != "json_schema" || js == nil || js["name"] == "" {
			return nil, fmt.Errorf("response_format must be {type: json_schema, json_schema: {name, schema}}")
		}
		if _, ok := js["schema"].(map[string]any); !ok {
			return nil, fmt.Errorf("response_format.json_schema.schema must be an object")
		}
		if !strings.Contains(last, "NOT JSON") {
			b, _ := json.Marshal(map[string]string{"model": model, "heard": strings.Join(Words(last), " ")})
			text = string(b)
		}
	}
	reply := map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
			"message": map[string]any{"role": "assistant", "content": text}}},
		"usage": map[string]any{"prompt_tokens": PromptTokens(contents...), "completion_tokens": len(strings.Fields(text)),
			"total_tokens": PromptTokens(contents...) + int64(len(strings.Fields(text)))},
	}
	if fault == NoChoices {
		reply["choices"] = []any{}
	}
	return reply, nil
}

// Vector is the embedding the server gives text: for each word (its
// concept in Synonyms, when it has one) one more in the dimension its
// hash picks.
func (s *Server) Vector(text string) []float64 {
	v := make([]float64, s.Dims)
	for _, w := range Words(text) {
		if c, ok := s.Synonyms[w]; ok {
			w = c
		}
		h := fnv.New32a()
		h.Write([]byte(w))
		v[int(h.Sum32())%s.Dims]++
	}
	return v
}

func (s *Server) embed(model string, f map[string]any, fault Fault) (map[string]any, error) {
	var inputs []string
	switch in := f["input"].(type) {
	case string:
		inputs = []string{in}
	case []any:
		for i, x := range in {
			str, ok := x.(string)
			if !ok || str == "" {
				return nil, fmt.Errorf("input[%d] must be a non-empty string", i)
			}
			inputs = append(inputs, str)
		}
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("input must be a string or a non-empty array of strings")
	}
	if enc, ok := f["encoding_format"]; ok && enc != "float" {
		return nil, fmt.Errorf("this server speaks encoding_format float")
	}
	data := make([]any, len(inputs))
	tokens := int64(0)
	for i, in := range inputs {
		v := s.Vector(in)
		if fault == WrongDims {
			v = v[:len(v)-1]
		}
		// Out of order, as the protocol allows: the index says where.
		data[len(inputs)-1-i] = map[string]any{"object": "embedding", "index": i, "embedding": v}
		tokens += int64(len(Words(in)))
	}
	return map[string]any{"object": "list", "model": model, "data": data,
		"usage": map[string]any{"prompt_tokens": tokens, "total_tokens": tokens}}, nil
}
