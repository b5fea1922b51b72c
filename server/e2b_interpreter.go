package server

// E2B's code interpreter (port 49999) on moat: POST /execute runs code in
// one of the session's code contexts and answers lines of JSON as the
// @e2b/code-interpreter SDK parses them (stdout, stderr, result, error,
// number_of_executions, end_of_execution); /contexts makes, lists,
// removes and restarts contexts. A context id is the session's context
// name; a context made here is named for its language and a random
// suffix ("python-3f9a..."), and started at once, as E2B starts a kernel.
//
// The run's output comes as the code prints it: a stdout or stderr line
// for each line the REPL hands on (sessions.RunRequest.Output), before
// the run's result and end_of_execution, as E2B's kernel streams them to
// the SDK's onStdout and onStderr.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/moat-sandbox/moat/server/sessions"
)

func init() {
	interpreterRoutes = append(interpreterRoutes, func(s *Server, mux *http.ServeMux) {
		mux.Handle("POST /execute", e2bStream(http.HandlerFunc(s.e2bExecute), e2bMaxStream))
		mux.HandleFunc("POST /contexts", s.e2bCreateContext)
		mux.HandleFunc("GET /contexts", s.e2bListContexts)
		mux.HandleFunc("DELETE /contexts/{id}", s.e2bRemoveContext)
		mux.HandleFunc("POST /contexts/{id}/restart", s.e2bRestartContext)
		mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	})
}

// e2bLanguage is the name E2B's SDKs give a context's language.
func e2bLanguage(lang string) string {
	if lang == "javascript" {
		return "js"
	}
	return lang
}

// e2bContext is E2B's Context.
type e2bContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	CWD      string `json:"cwd"`
}

// e2bReadJSON reads a small JSON request body into v (empty is {}).
func e2bReadJSON(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, sessions.MaxCodeBytes+64<<10))
	if err != nil {
		return problem(http.StatusRequestEntityTooLarge, "too_large", "the body: %v (code is at most %d bytes)", err, sessions.MaxCodeBytes)
	}
	if len(b) == 0 {
		return nil
	}
	if err := decodeJSONBody(b, v, false); err != nil {
		return problem(http.StatusBadRequest, "invalid_argument", "the body: %v", err)
	}
	return nil
}

type e2bExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// e2bLine is one line of /execute's answer.
type e2bLine struct {
	Type           string   `json:"type"`
	Text           *string  `json:"text,omitempty"`
	IsMainResult   *bool    `json:"is_main_result,omitempty"`
	Name           string   `json:"name,omitempty"`
	Value          string   `json:"value,omitempty"`
	Traceback      string   `json:"traceback,omitempty"`
	ExecutionCount *int     `json:"execution_count,omitempty"`
	Timestamp      *float64 `json:"timestamp,omitempty"`
}

// e2bRunRefused are the sessions refusals /execute answers as HTTP
// errors (the request was wrong); the rest (a timeout, the memory limit)
// are the run's, answered as its error line.
var e2bRunRefused = map[string]bool{"not_found": true, "invalid_argument": true, "conflict": true,
	"resource_exhausted": true, "too_large": true, "denied": true}

func (s *Server) e2bExecute(w http.ResponseWriter, r *http.Request) {
	sb := sandboxOf(r.Context())
	var req e2bExecuteRequest
	if err := e2bReadJSON(w, r, &req); err != nil {
		envdError(w, err)
		return
	}
	if len(req.EnvVars) > 0 {
		envdError(w, problem(http.StatusBadRequest, "invalid_argument", "env_vars: moat takes a sandbox's environment when it is created (envs of Sandbox.create), not per run"))
		return
	}
	lang := req.Language
	if req.ContextID != "" {
		if req.Language != "" {
			envdError(w, problem(http.StatusBadRequest, "invalid_argument", "give context_id or language, not both"))
			return
		}
		lang = e2bContextLanguage(req.ContextID)
	}
	if lang == "" {
		lang = "python"
	}
	if sessions.LanguageOf(lang) == "" {
		envdError(w, problem(http.StatusBadRequest, "invalid_argument", "language: %.32q; moat's code contexts run python and js (javascript)", lang))
		return
	}
	// The lines go out as the code prints: the status line with the
	// first (a refusal before any output is still an HTTP error), each
	// line flushed before the code's print returns (backpressure: nothing
	// queues here). A client that goes away ends the run as a timeout
	// does (the context restarts with empty globals).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var mu sync.Mutex
	started := false
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	line := func(l e2bLine) {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if enc.Encode(l) != nil || rc.Flush() != nil {
			cancel()
		}
	}
	text := func(s string) *string { return &s }
	output := func(stream string, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		line(e2bLine{Type: stream, Text: text(strings.ToValidUTF8(string(b), "\uFFFD"))})
	}
	res, err := sb.Session.Run(ctx, sb.Correlation, sessions.RunRequest{Language: lang, Code: req.Code, Context: req.ContextID, Output: output})
	mu.Lock()
	defer mu.Unlock()
	var se *sessions.Error
	if err != nil && !started && (!errors.As(err, &se) || e2bRunRefused[se.Code]) {
		envdError(w, err)
		return
	}
	if err != nil { // the run failed: a timeout, the memory limit
		name, reason := "Error", err.Error()
		if se != nil {
			name, reason = strings.ToUpper(se.Code[:1])+se.Code[1:]+"Error", se.Reason
		}
		line(e2bLine{Type: "error", Name: name, Value: reason})
		line(e2bLine{Type: "end_of_execution"})
		return
	}
	if res.Result != nil {
		main := true
		line(e2bLine{Type: "result", Text: res.Result, IsMainResult: &main})
	}
	if res.Error != nil {
		line(e2bLine{Type: "error", Name: res.Error.Name, Value: res.Error.Value, Traceback: res.Error.Traceback})
	}
	n := res.ExecutionCount
	line(e2bLine{Type: "number_of_executions", ExecutionCount: &n})
	line(e2bLine{Type: "end_of_execution"})
}

// e2bContextLanguage is the language a context id names: the default
// contexts are named for theirs, and those /contexts makes begin with it.
func e2bContextLanguage(id string) string {
	lang, _, _ := strings.Cut(id, "-")
	return sessions.LanguageOf(lang)
}

func (s *Server) e2bCreateContext(w http.ResponseWriter, r *http.Request) {
	sb := sandboxOf(r.Context())
	var req struct {
		Language string `json:"language"`
		CWD      string `json:"cwd"`
	}
	if err := e2bReadJSON(w, r, &req); err != nil {
		envdError(w, err)
		return
	}
	if req.Language == "" {
		req.Language = "python"
	}
	lang := sessions.LanguageOf(req.Language)
	if lang == "" {
		envdError(w, problem(http.StatusBadRequest, "invalid_argument", "language: %.32q; moat's code contexts run python and js (javascript)", req.Language))
		return
	}
	if req.CWD != "" && req.CWD != sessions.WorkspacePath {
		envdError(w, problem(http.StatusBadRequest, "invalid_argument", "cwd: %.64q; a context runs in %s, the sandbox's workspace (leave cwd out)", req.CWD, sessions.WorkspacePath))
		return
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := lang + "-" + hex.EncodeToString(b)
	// Start it now, as E2B starts a kernel: an empty run loads the
	// interpreter, so the first run of the agent's code is fast.
	if _, err := sb.Session.Run(r.Context(), sb.Correlation, sessions.RunRequest{Language: lang, Context: id}); err != nil {
		envdError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(e2bContext{ID: id, Language: e2bLanguage(lang), CWD: sessions.WorkspacePath})
}

func (s *Server) e2bListContexts(w http.ResponseWriter, r *http.Request) {
	sb := sandboxOf(r.Context())
	in, err := s.sessions.Info(sb.Owner, sb.Session.ID())
	if err != nil {
		envdError(w, err)
		return
	}
	out := []e2bContext{}
	for _, c := range in.Contexts {
		out = append(out, e2bContext{ID: c.Name, Language: e2bLanguage(c.Language), CWD: sessions.WorkspacePath})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) e2bRemoveContext(w http.ResponseWriter, r *http.Request) {
	sb := sandboxOf(r.Context())
	if err := sb.Session.CloseContext(r.Context(), sb.Correlation, r.PathValue("id")); err != nil {
		envdError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bRestartContext ends the context's interpreter and starts a fresh
// one under the same id: its globals are gone.
func (s *Server) e2bRestartContext(w http.ResponseWriter, r *http.Request) {
	sb := sandboxOf(r.Context())
	id := r.PathValue("id")
	in, err := s.sessions.Info(sb.Owner, sb.Session.ID())
	if err != nil {
		envdError(w, err)
		return
	}
	lang := ""
	for _, c := range in.Contexts {
		if c.Name == id {
			lang = c.Language
		}
	}
	if lang == "" {
		envdError(w, &sessions.Error{Code: "not_found", Session: sb.Session.ID(), Reason: fmt.Sprintf("no context %.64q in this session", id)})
		return
	}
	if err := sb.Session.CloseContext(r.Context(), sb.Correlation, id); err != nil {
		envdError(w, err)
		return
	}
	if _, err := sb.Session.Run(r.Context(), sb.Correlation, sessions.RunRequest{Language: lang, Context: id}); err != nil {
		envdError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
