package sessions

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// A code context is a module of its own: the language's interpreter
// running the REPL below as a resident script (host/resident.go), with
// one instance (MaxIdle 1, one run at a time), so what a run leaves in
// the interpreter's globals is there for the next. Its one file grant is
// the workspace, mounted at /home/user as a granted directory is
// (host.Mount.Granted: os.Root beneath it, no symlink or ".." out, every
// change audited, the disk quota). It asks for no capability: no kv, no
// http, no ops beyond the workspace. An instance ended by a run's timeout
// or memory limit is replaced by a fresh one on the next run: the context
// restarts with empty globals (ContextInfo.Restarts counts it).

//go:embed repl.py
var replPython string

//go:embed repl.js
var replJavaScript string

//go:embed repl.rb
var replRuby string

// Languages are the languages a context may run, by the name a request
// gives, with their REPL's entry file.
var Languages = map[string]struct{ file, src string }{
	"python":     {"main.py", replPython},
	"javascript": {"main.js", replJavaScript},
	"ruby":       {"main.rb", replRuby},
}

var langAlias = map[string]string{"py": "python", "python3": "python", "js": "javascript", "node": "javascript", "rb": "ruby"}

// LanguageOf returns the canonical name of a context language, or "".
func LanguageOf(name string) string {
	if a, ok := langAlias[name]; ok {
		name = a
	}
	if _, ok := Languages[name]; ok {
		return name
	}
	return ""
}

// ContextInfo describes one code context.
type ContextInfo struct {
	Name      string    `json:"name"`
	Language  string    `json:"language"`
	CreatedAt time.Time `json:"created_at"`
	Runs      int       `json:"runs"`
}

type codeContext struct {
	info ContextInfo // Runs is runs's
	runs atomic.Int64
	mod  *host.Module
	mu   sync.Mutex // one run at a time: the one instance's
	// snap: the context's instance may be captured into an image and a
	// copy started from it (host.Module.Capturable: Python's, Ruby's).
	snap bool
	// depth is how many captures its state went through (fork.go).
	depth int
	// envInRuns: the session's variables go with each run, not in the
	// interpreter's environment, because its instance starts from an
	// image another session's context made (Python's base image, Ruby's
	// interpreter image: rubyInterpreter).
	envInRuns bool
}

// baseImages are the images new contexts start from: one per
// organization and language, made from the top level of the first such
// context (the REPL's imports, nothing of a workspace or of a session's
// variables). Two organizations never share one, as two organizations'
// plugins never share an image (host/snapshot.go, imageInputs).
//
// The image is made by a template: a context of no session, loaded with
// an empty workspace of its own, which stays loaded for the Manager's
// life so that the interpreter's machine code stays compiled for every
// context (the host frees a module's code with its last module).
type baseImages struct {
	mu   sync.Mutex
	base map[[2]string]*baseImage
}

type baseImage struct {
	once     sync.Once
	err      error
	template *host.Module
	img      *host.ResidentImage
}

// baseImage returns the image new contexts of org in lang start from,
// made once.
func (m *Manager) baseImage(ctx context.Context, h *host.Host, sp *languages.ScriptPlugin, sc host.Script, org, lang string) (*host.Module, *host.ResidentImage, error) {
	b := &m.images
	b.mu.Lock()
	if b.base == nil {
		b.base = map[[2]string]*baseImage{}
	}
	k := [2]string{org, lang}
	bi := b.base[k]
	if bi == nil {
		bi = &baseImage{}
		b.base[k] = bi
	}
	b.mu.Unlock()
	bi.once.Do(func() {
		dir, err := os.MkdirTemp(filepath.Join(m.cfg.Dir, ".repl"), "template-")
		if err != nil {
			bi.err = err
			return
		}
		sc.Mounts = slices.Clone(sc.Mounts)
		sc.Mounts[len(sc.Mounts)-1].HostDir = dir // the workspace's place, empty
		mf, err := m.manifest("session-template-"+lang, lang)
		if err != nil {
			bi.err = err
			return
		}
		mod, err := h.Load(context.WithoutCancel(ctx), sp.WASM, host.LoadOptions{Name: "session-template-" + lang, Manifest: mf, Script: &sc,
			MaxIdle: 1, Org: org, LocalCode: true, Template: true})
		if err != nil {
			bi.err = err
			return
		}
		bi.template, bi.img = mod, mod.ResidentImage(context.WithoutCancel(ctx))
	})
	if bi.err != nil {
		b.mu.Lock()
		if b.base[k] == bi { // the next context tries again
			delete(b.base, k)
		}
		b.mu.Unlock()
	}
	return bi.template, bi.img, bi.err
}

// close closes the templates.
func (b *baseImages) close(ctx context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, bi := range b.base {
		if bi.template != nil {
			_ = bi.template.Close(ctx)
		}
	}
	b.base = nil
}

func (cc *codeContext) close(ctx context.Context) {
	_ = cc.mod.Close(ctx)
}

// replBuilds builds each language's REPL once per Manager: the
// interpreter module and the Script serving it (its /src under the
// sessions directory, named by content).
type replBuilds struct {
	mu    sync.Mutex
	built map[string]*languages.ScriptPlugin
	dir   string
}

func (r *replBuilds) remove() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

func (m *Manager) buildREPL(ctx context.Context, lang string) (*languages.ScriptPlugin, error) {
	r := &m.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	if sp := r.built[lang]; sp != nil {
		return sp, nil
	}
	l, err := languages.Lookup(lang)
	if err != nil {
		return nil, err
	}
	e := Languages[lang]
	src, err := languages.PluginSource(l, map[string][]byte{e.file: []byte(e.src)})
	if err != nil {
		return nil, err
	}
	if r.dir == "" {
		r.dir = filepath.Join(m.cfg.Dir, ".repl")
		if err := os.MkdirAll(r.dir, 0o700); err != nil {
			return nil, err
		}
	}
	var b bundle.ScriptBuilder = bundle.Builder{ToolchainDir: m.cfg.ToolchainDir}
	if m.cfg.Scripts != nil {
		b = m.cfg.Scripts
	}
	sp, err := b.BuildScript(ctx, l, src, r.dir)
	if err != nil {
		return nil, err
	}
	if r.built == nil {
		r.built = map[string]*languages.ScriptPlugin{}
	}
	r.built[lang] = sp
	return sp, nil
}

// RunRequest is one run of code in a context.
type RunRequest struct {
	Language string
	Code     string
	// Context names the context ("" is the language's default context,
	// named for it).
	Context string
	Timeout time.Duration
	// Output, when set, is called with the run's stdout and stderr as the
	// code prints them (the REPL hands a line on as it ends, and whatever
	// is pending when the run ends or the code flushes), each stream at
	// most MaxRunOutputBytes: past it, the code's print raises. The
	// output is not kept: the result's Stdout and Stderr are empty. b is
	// not the callee's to keep.
	Output func(stream string, b []byte)
}

// RunResult is what a run printed and returned.
type RunResult struct {
	Context        string    `json:"context"`
	Language       string    `json:"language"`
	Stdout         string    `json:"stdout"`
	Stderr         string    `json:"stderr"`
	Result         *string   `json:"result"`
	Error          *RunError `json:"error"`
	ExecutionCount int       `json:"execution_count"`
	DurationMS     float64   `json:"duration_ms"`
	// Restarted: the context's interpreter was replaced since its last
	// run (a timeout or the memory limit ended it), so its globals are
	// gone.
	Restarted bool `json:"restarted,omitempty"`
}

// RunError is an exception the code raised (the context lives on).
type RunError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// MaxRunOutputBytes bounds what one run answers with (its stdout, stderr
// and result, as JSON) and, when it streams, each of its streamed stdout
// and stderr: past it the code's print raises (host.ErrOutputLimit).
const MaxRunOutputBytes = 16 << 20

var contextName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func (m *Manager) manifest(name, lang string) (*policy.Manifest, error) {
	y := fmt.Sprintf("name: %s\nversion: 0.1.0\nlanguage: %s\nkind: moat\n", name, lang)
	if m.cfg.MemoryBytes > 0 { // else the profile's
		y += fmt.Sprintf("limits: {memory: %dMiB}\n", max(m.cfg.MemoryBytes>>20, 16))
	}
	y += fmt.Sprintf("actions:\n  - {name: run, timeout: %dms}\n", m.cfg.RunTimeout.Milliseconds())
	y += "  - {name: park, timeout: 30s}\n" // the REPL's park: fork and pause capture the context there
	return policy.ParseManifest("moat.yaml", []byte(y))
}

// Run runs code in one of the session's contexts, making it on its first
// run.
func (s *Session) Run(ctx context.Context, correlation string, req RunRequest) (*RunResult, error) {
	m := s.m
	lang := LanguageOf(req.Language)
	if lang == "" {
		return nil, invalid("language: %q is not a context language; give python, javascript or ruby", req.Language)
	}
	if len(req.Code) > MaxCodeBytes {
		return nil, &Error{Code: "too_large", Session: s.id, Reason: fmt.Sprintf("code: %d bytes, at most %d", len(req.Code), MaxCodeBytes)}
	}
	name := req.Context
	if name == "" {
		name = lang
	}
	if !contextName.MatchString(name) {
		return nil, invalid("context: %q; give 1 to %d letters, digits, '.', '_' or '-'", req.Context, MaxContextName)
	}
	timeout := m.cfg.RunTimeout
	if req.Timeout > 0 {
		timeout = min(req.Timeout, timeout)
	}
	cc, err := s.context(ctx, correlation, name, lang)
	if err != nil {
		return nil, err
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	rq := map[string]any{"code": req.Code}
	if cc.envInRuns && len(s.env) > 0 {
		rq["env"] = s.env
	}
	if req.Output != nil {
		rq["stream"] = true // the REPL writes the output to fd 1 and 2 instead of returning it
	}
	in, _ := json.Marshal(rq)
	start := time.Now()
	res, err := cc.mod.Invoke(ctx, host.Request{Action: "run", Input: in, Principal: s.owner, CorrelationID: correlation,
		Limits: host.Limits{Timeout: timeout, MaxInputBytes: MaxCodeBytes + 1024, MaxOutputBytes: MaxRunOutputBytes}, Output: req.Output})
	dur := time.Since(start)
	s.touch()
	runs := cc.runs.Add(1)
	if err != nil {
		m.record(ctx, s, correlation, "run", audit.Deny, fmt.Sprintf("context %s: %v", name, err))
		code := abi.CodeOf(err)
		return nil, &Error{Code: string(code), Session: s.id, Reason: fmt.Sprintf("context %s: %v (the context restarts with empty globals on its next run)", name, err), Err: err}
	}
	var out RunResult
	if err := json.Unmarshal(res.Output, &out); err != nil {
		return nil, fmt.Errorf("session %s: context %s: the interpreter's answer: %w", s.id, name, err)
	}
	out.Context, out.Language, out.DurationMS = name, lang, float64(dur.Microseconds())/1000
	out.Restarted = out.ExecutionCount == 1 && runs > 1
	m.record(ctx, s, correlation, "run", audit.Allow, "context "+name)
	return &out, nil
}

func (s *Session) touch() {
	s.mu.Lock()
	s.lastUsed = time.Now().UTC()
	s.mu.Unlock()
}

// context returns the session's context name, loading it on first use.
func (s *Session) context(ctx context.Context, correlation, name, lang string) (*codeContext, error) {
	m := s.m
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, notFound(s.id)
	}
	if cc := s.contexts[name]; cc != nil {
		s.mu.Unlock()
		if cc.info.Language != lang {
			return nil, &Error{Code: "conflict", Session: s.id, Reason: fmt.Sprintf("context %s runs %s, not %s; name another context", name, cc.info.Language, lang)}
		}
		return cc, nil
	}
	pend := s.pending[name]
	if pend != nil && pend.info.Language != lang {
		s.mu.Unlock()
		return nil, &Error{Code: "conflict", Session: s.id, Reason: fmt.Sprintf("context %s runs %s, not %s; name another context", name, pend.info.Language, lang)}
	}
	if pend == nil && len(s.contexts)+len(s.pending) >= m.cfg.MaxContexts {
		s.mu.Unlock()
		return nil, &Error{Code: "resource_exhausted", Session: s.id, Reason: fmt.Sprintf("the session has %d contexts, the most it may have; run in one of them", len(s.contexts))}
	}
	s.mu.Unlock()

	sp, err := m.buildREPL(ctx, lang)
	if err != nil {
		return nil, fmt.Errorf("session %s: build the %s context: %w", s.id, lang, err)
	}
	modName := fmt.Sprintf("session-%s-%d", s.id, s.nextCtx.Add(1))
	mf, err := m.manifest(modName, lang)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", s.id, err)
	}
	sc := *sp.Script
	sc.Env = maps.Clone(sc.Env)
	if sc.Env == nil {
		sc.Env = map[string]string{}
	}
	if sc.Interpreter != nil {
		sc.Interpreter = m.rubyInterpreter(s.owner.Org, lang, sc.Interpreter)
	}
	ownImage := sc.Snapshot != nil && !sc.Snapshot.CaptureOnly // JavaScript's instances start cold; only a live one is captured
	envInRuns := ownImage || sc.Interpreter != nil
	if !envInRuns {
		maps.Copy(sc.Env, s.env)
	} // else the REPL sets them from its first run: an image holds the capture's environment
	sc.Env["HOME"] = WorkspacePath
	sc.Mounts = append(append([]host.Mount(nil), sc.Mounts...), host.Mount{HostDir: s.dir, GuestPath: WorkspacePath, Granted: true,
		MaxBytes: m.cfg.DiskQuotaBytes, MaxFiles: m.cfg.MaxFiles})
	h := m.cfg.HostFor(s.owner.Org)
	if h == nil {
		return nil, errors.New("sessions: no host for the organization")
	}
	opts := host.LoadOptions{Name: modName, Manifest: mf, Script: &sc,
		MaxIdle: 1, Org: s.owner.Org, LocalCode: true, CorrelationID: correlation}
	if ownImage {
		if opts.Like, opts.ResidentImage, err = m.baseImage(ctx, h, sp, sc, s.owner.Org, lang); err != nil {
			return nil, fmt.Errorf("session %s: start the %s context: %w", s.id, lang, err)
		}
	}
	info := ContextInfo{Name: name, Language: lang, CreatedAt: time.Now().UTC()}
	if pend != nil { // a copy's: it starts where the context it copies was (the host refuses a module that cannot)
		opts.ResidentImage, info = pend.img, pend.info
	}
	mod, err := h.Load(ctx, sp.WASM, opts)
	if err != nil {
		return nil, fmt.Errorf("session %s: start the %s context: %w", s.id, lang, err)
	}
	cc := &codeContext{info: info, mod: mod, snap: mod.Capturable(), envInRuns: envInRuns}
	if pend != nil {
		cc.runs.Store(int64(pend.info.Runs))
		cc.depth = pend.depth
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		_ = mod.Close(ctx)
		return nil, notFound(s.id)
	}
	if o := s.contexts[name]; o != nil { // made meanwhile by another run
		_ = mod.Close(ctx)
		return o, nil
	}
	if pend != nil {
		delete(s.pending, name)
	}
	s.contexts[name] = cc
	return cc, nil
}

// CloseContext ends the context name: its interpreter and globals go; a
// later run of that name starts a fresh one (E2B's removeCodeContext, and
// with that run its restartCodeContext).
func (s *Session) CloseContext(ctx context.Context, correlation, name string) error {
	s.mu.Lock()
	cc := s.contexts[name]
	if cc != nil {
		delete(s.contexts, name)
	}
	s.mu.Unlock()
	if cc == nil {
		return &Error{Code: "not_found", Session: s.id, Reason: fmt.Sprintf("no context %.64q in this session", name)}
	}
	cc.mu.Lock() // after the run in progress, if any
	cc.close(ctx)
	cc.mu.Unlock()
	s.m.record(ctx, s, correlation, "context.close", audit.Allow, "context "+name)
	return nil
}
