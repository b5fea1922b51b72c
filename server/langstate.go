package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// A language's first run on a server does work later runs do not repeat:
// Go builds its standard library for WASI (about 15 s), an interpreter
// WASM (Python, Ruby, QuickJS) is compiled to machine code (seconds). The
// executor reports that work as it starts and ends (ExecRequest.Preparing,
// the same hook `moat exec` shows its "preparing" line from); the server
// passes a preparer of its own on every job it runs — runs, Piston
// executions and the warming of languages.warm — and so knows, without
// guessing, which languages have done that work in this process, which
// are doing it now and since when, and which have not started it.
// GET /v1/languages reports it as each language's state.

// Language states in GET /v1/languages.
const (
	// LangReady: a job of the language has reached its run stage on this
	// server (so its build tools and interpreter are compiled and loaded),
	// or the language has no first-time work (a native interpreter).
	LangReady = "ready"
	// LangCold: the next job pays the first-time work (FirstRun says
	// what).
	LangCold = "cold"
	// LangPreparing: a job is doing the first-time work now (Since, Stage).
	LangPreparing = "preparing"
	// LangUnavailable: its toolchain or interpreter WASM is missing here
	// (Missing, Fix).
	LangUnavailable = "unavailable"
)

// LanguageJSON is one language in GET /v1/languages.
type LanguageJSON struct {
	Name       string         `json:"name"`
	Version    string         `json:"version"`
	Aliases    []string       `json:"aliases"`
	Path       languages.Path `json:"path"`
	Extensions []string       `json:"extensions"`
	Toolchain  string         `json:"toolchain"`
	// State is ready, cold, preparing or unavailable.
	State string `json:"state"`
	// Since is when the first-time work in flight began (preparing).
	Since *time.Time `json:"since,omitempty"`
	// Stage is the work in flight: build (a first build: Go's standard
	// library) or load (an interpreter's compile to machine code).
	Stage string `json:"stage,omitempty"`
	// FirstRun says what the first-time work is (cold, preparing).
	FirstRun string `json:"first_run,omitempty"`
	// Missing says what is missing, and Fix how to get it (unavailable).
	Missing string `json:"missing,omitempty"`
	Fix     string `json:"fix,omitempty"`
}

// langStates tracks each language's first-time work in this process.
type langStates struct {
	mu sync.Mutex
	m  map[string]*langState // by canonical name
}

type langState struct {
	ready bool
	// stages counts the first-time work in flight (jobs of the language
	// between a Preparing call and its done); since is when the oldest
	// of them began, stage what it is.
	stages int
	since  time.Time
	stage  string
}

func (ls *langStates) get(name string) *langState {
	if ls.m == nil {
		ls.m = map[string]*langState{}
	}
	st := ls.m[name]
	if st == nil {
		st = &langState{}
		ls.m[name] = st
	}
	return st
}

// preparer is the ExecRequest.Preparing of a job of lang.
func (ls *langStates) preparer(lang string) func(stage string) func() {
	return func(stage string) func() {
		ls.mu.Lock()
		st := ls.get(lang)
		if st.stages == 0 {
			st.since, st.stage = time.Now().UTC(), stage
		}
		st.stages++
		ls.mu.Unlock()
		var once sync.Once
		return func() {
			once.Do(func() {
				ls.mu.Lock()
				st.stages--
				ls.mu.Unlock()
			})
		}
	}
}

// ran records a job's outcome: one that reached its run stage (it has a
// run time) has done the language's first-time work.
func (ls *langStates) ran(lang string, res *languages.ExecResult) {
	if res == nil || res.RunTime <= 0 {
		return
	}
	ls.mu.Lock()
	ls.get(lang).ready = true
	ls.mu.Unlock()
}

// state fills l's State and the fields that go with it.
func (ls *langStates) state(l *LanguageJSON) {
	if l.Path == languages.PathNative {
		// A confined native interpreter: nothing to build or compile.
		l.State = LangReady
		return
	}
	ls.mu.Lock()
	st := ls.get(l.Name)
	ready, stages, since, stage := st.ready, st.stages, st.since, st.stage
	ls.mu.Unlock()
	switch {
	case ready:
		l.State = LangReady
	case stages > 0:
		l.State, l.Since, l.Stage = LangPreparing, &since, stage
		l.FirstRun = firstRun(l)
	default:
		l.State, l.FirstRun = LangCold, firstRun(l)
	}
}

// firstRun says what a language's first run on this server does once.
func firstRun(l *LanguageJSON) string {
	switch {
	case l.Name == "go":
		return "the first run builds Go's standard library for WASI (about 15 s, once per machine, or per data directory where the toolchains' state is not the server's own; `moat toolchains install` builds it ahead), then compiles the program"
	case l.Path == languages.PathInterpreted:
		return fmt.Sprintf("the first run compiles the interpreter WASM (%s) to machine code and makes the image of its start: up to a minute, once per machine (per cache directory where the toolchains' state is not the server's own; `moat toolchains install` does it ahead), or less when the caches have it from an earlier start", l.Toolchain)
	default:
		return fmt.Sprintf("the first run starts %s and compiles its output to machine code: seconds", l.Toolchain)
	}
}

// exec runs a job through the executor with the server's preparer, and
// records whether it did its language's first-time work. Every job the
// server runs goes through it.
func (s *Server) execJob(ctx context.Context, req languages.ExecRequest) (*languages.ExecResult, error) {
	prep := s.langs.preparer(req.Language)
	if outer := req.Preparing; outer != nil {
		req.Preparing = func(stage string) func() {
			a, b := prep(stage), outer(stage)
			return func() { b(); a() }
		}
	} else {
		req.Preparing = prep
	}
	res, err := s.exec.Exec(ctx, req)
	if err == nil {
		s.langs.ran(req.Language, res)
	}
	return res, err
}

func (s *Server) listLanguages(c echo.Context) error {
	out := []LanguageJSON{}
	if s.exec != nil {
		for _, l := range s.exec.Languages() {
			j := LanguageJSON{Name: l.Name, Version: l.Version, Aliases: l.Aliases, Path: l.Path, Extensions: l.Extensions, Toolchain: l.Toolchain}
			if j.Aliases == nil {
				j.Aliases = []string{}
			}
			if !l.Available {
				j.State, j.Missing, j.Fix = LangUnavailable, l.Missing, "moat toolchains install "+l.Name
			} else {
				s.langs.state(&j)
			}
			out = append(out, j)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"languages": out})
}

// warmPrincipal is who languages.warm's jobs run as, in the audit trail.
var warmPrincipal = policy.Principal{User: "moat-warm", Org: "local"}

// startWarming warms the languages of languages.warm, one after another,
// in the background: each runs its smallest program (languages.WarmRequest)
// through execJob, so its state reads preparing while it runs and ready
// after. Close stops it.
func (s *Server) startWarming() {
	names := s.cfg.Languages.Warm
	if s.exec == nil || len(names) == 0 {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stopWarm, s.warmDone = stop, make(chan struct{})
	avail := map[string]languages.LanguageStatus{}
	for _, l := range s.exec.Languages() {
		avail[l.Name] = l
	}
	go func() {
		defer close(s.warmDone)
		for _, name := range names {
			req, _ := languages.WarmRequest(name) // validate checked the name
			if st := avail[req.Language]; !st.Available {
				s.log.Warn("languages.warm: "+req.Language+" is not available here; run `moat toolchains install "+req.Language+"`", "language", req.Language, "missing", st.Missing)
				continue
			}
			req.Principal, req.CorrelationID = warmPrincipal, "warm-"+req.Language
			began := time.Now()
			res, err := s.execJob(ctx, req)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				s.log.Warn("languages.warm: "+req.Language+" failed", "language", req.Language, "err", err)
			case res.Status != languages.StatusOK:
				s.log.Warn("languages.warm: "+req.Language+" failed", "language", req.Language, "status", res.Status, "message", res.Message, "compile_output", res.CompileOutput)
			default:
				s.log.Info("languages.warm: "+req.Language+" is ready", "language", req.Language, "duration", time.Since(began).Round(time.Millisecond).String())
			}
		}
	}()
}

// checkWarm checks a name of languages.warm.
func checkWarm(name string) error {
	if _, err := languages.Lookup(name); err != nil {
		return err // names the languages and suggests one
	}
	if _, ok := languages.WarmRequest(name); !ok {
		return fmt.Errorf("%s has no first-time work to do ahead; drop it", name)
	}
	return nil
}
