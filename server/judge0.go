package server

// The Judge0-compatible API (Judge0 CE 1.13): submissions judged against
// an expected output into Judge0's status ids, under judge0.prefix. Its
// requests and responses are Judge0's, field for field, so that a site
// built on Judge0 switches its base URL and key and nothing else; its
// errors are Judge0's ({"error": "..."}, or {"field": ["message"]} for a
// submission that does not validate), because that is what its clients
// parse.
//
// A submission is a task of the store's task queue (origin judge0Origin,
// module judge0Module, the caller's organization): it is durable, any
// replica on the store runs it (judge0_worker.go) and any answers for it,
// and a token of another organization is not found, as any task of
// another organization is not. The token is the task's id.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// Judge0Config turns on the Judge0-compatible routes under Prefix.
// Requests authenticate with an API key as Judge0's X-Auth-Token header
// (or Authorization: Bearer), and run as that key's principal, under its
// organization's profile.
type Judge0Config struct {
	Enabled bool `yaml:"enabled"`
	// Prefix is where the routes live. Default /judge0.
	Prefix string `yaml:"prefix"`
	// Concurrency bounds the submissions this replica runs at once; each
	// also takes a run slot of its organization (admission.*). Default 2.
	Concurrency int `yaml:"concurrency"`
	// Callbacks are the targets a submission's callback_url may name
	// (judge0_callback.go): URLs whose scheme, host and port a callback
	// must have and whose path it must be under, such as
	// https://grader.example.com/judge0/. Empty: callback_url is refused.
	// A loopback or private address is reached only when a target names
	// it as an address.
	Callbacks []string `yaml:"callbacks"`
}

func (j *Judge0Config) fillDefaults() {
	if j.Prefix == "" {
		j.Prefix = "/judge0"
	}
	if j.Concurrency == 0 {
		j.Concurrency = 2
	}
}

func (j *Judge0Config) validate(fail failFunc) error {
	if !strings.HasPrefix(j.Prefix, "/") || strings.HasSuffix(j.Prefix, "/") || j.Prefix == "/v1" || strings.HasPrefix(j.Prefix, "/v1/") {
		return fail("judge0.prefix", "%q must start with / and not end with one, outside /v1; the default is /judge0", j.Prefix)
	}
	if j.Concurrency < 1 || j.Concurrency > 256 {
		return fail("judge0.concurrency", "%d is outside 1..256; remove the line for the default 2", j.Concurrency)
	}
	if len(j.Callbacks) > 64 {
		return fail("judge0.callbacks", "%d targets; list at most 64", len(j.Callbacks))
	}
	if _, i, err := parseCallbackGrants(j.Callbacks); err != nil {
		return fail(fmt.Sprintf("judge0.callbacks[%d]", i), "%v", err)
	}
	return nil
}

const (
	judge0Origin = "judge0"     // store.Task.Origin of submissions
	judge0Module = "judge0"     // store.Task.Module: the scope of submissions in an organization
	judge0Action = "submission" // store.Task.Action

	// judge0MaxBatch is Judge0's MAX_SUBMISSION_BATCH_SIZE.
	judge0MaxBatch = 20
	// judge0MaxArgs is Judge0's bound on command_line_arguments and
	// compiler_options.
	judge0MaxArgs = 512
)

// Judge0's defaults and maxima (app/helpers/config.rb), each lowered to
// the caller's profile (exec:).
const (
	j0CPUTime       = 5.0
	j0MaxCPUTime    = 15.0
	j0WallTime      = 10.0
	j0MaxWallTime   = 20.0
	j0MemoryKB      = 128000
	j0MaxMemoryKB   = 512000
	j0StackKB       = 64000
	j0MaxStackKB    = 128000
	j0Procs         = 60
	j0MaxProcs      = 120
	j0MaxFileSizeKB = 1024
	j0MaxRuns       = 20
)

// judge0Status is one of Judge0's statuses.
type judge0Status struct {
	ID          int    `json:"id"`
	Description string `json:"description"`
}

// judge0Statuses is Judge0's status table (app/enumerations/status.rb).
var judge0Statuses = []judge0Status{
	{1, "In Queue"}, {2, "Processing"}, {3, "Accepted"}, {4, "Wrong Answer"}, {5, "Time Limit Exceeded"},
	{6, "Compilation Error"}, {7, "Runtime Error (SIGSEGV)"}, {8, "Runtime Error (SIGXFSZ)"}, {9, "Runtime Error (SIGFPE)"},
	{10, "Runtime Error (SIGABRT)"}, {11, "Runtime Error (NZEC)"}, {12, "Runtime Error (Other)"}, {13, "Internal Error"},
	{14, "Exec Format Error"},
}

const (
	j0InQueue     = 1
	j0Processing  = 2
	j0Accepted    = 3
	j0WrongAnswer = 4
	j0TLE         = 5
	j0CE          = 6
	j0SIGSEGV     = 7
	j0SIGXFSZ     = 8
	j0SIGFPE      = 9
	j0SIGABRT     = 10
	j0NZEC        = 11
	j0Other       = 12
	j0Internal    = 13
)

func judge0StatusOf(id int) judge0Status {
	if id >= 1 && id <= len(judge0Statuses) {
		return judge0Statuses[id-1]
	}
	return judge0Statuses[j0Internal-1]
}

// judge0Language is a Judge0 language id and the moat language it runs
// on. The ids are Judge0 CE's (1.13): a site keeps the ids it stored.
// Several ids (GCC 7, 8, 9, Clang) name one moat language, which has one
// compiler; a language moat has not registered (java until it is) is
// left out of GET /languages and refused, by the table being read
// against the executor's languages on each request.
type judge0Language struct {
	ID     int
	Name   string // Judge0's name without its version: "C (GCC", "Python ("
	Moat   string // the moat language's name
	Source string // Judge0's source_file
}

var judge0Languages = []judge0Language{
	{46, "Bash", "bash", "script.sh"},
	{48, "C (GCC 7.4.0)", "c", "main.c"},
	{49, "C (GCC 8.3.0)", "c", "main.c"},
	{50, "C (GCC 9.2.0)", "c", "main.c"},
	{75, "C (Clang 7.0.1)", "c", "main.c"},
	{52, "C++ (GCC 7.4.0)", "cpp", "main.cpp"},
	{53, "C++ (GCC 8.3.0)", "cpp", "main.cpp"},
	{54, "C++ (GCC 9.2.0)", "cpp", "main.cpp"},
	{76, "C++ (Clang 7.0.1)", "cpp", "main.cpp"},
	{60, "Go (1.13.5)", "go", "main.go"},
	{95, "Go (1.18.5)", "go", "main.go"},
	{62, "Java (OpenJDK 13.0.1)", "java", "Main.java"},
	{91, "Java (JDK 17.0.6)", "java", "Main.java"},
	{63, "JavaScript (Node.js 12.14.0)", "javascript", "script.js"},
	{93, "JavaScript (Node.js 18.15.0)", "javascript", "script.js"},
	{64, "Lua (5.3.5)", "lua", "script.lua"},
	{68, "PHP (7.4.1)", "php", "script.php"},
	{85, "Perl (5.28.1)", "perl", "script.pl"},
	{71, "Python (3.8.1)", "python", "script.py"},
	{92, "Python (3.11.2)", "python", "script.py"},
	{72, "Ruby (2.7.0)", "ruby", "script.rb"},
	{73, "Rust (1.40.0)", "rust", "main.rs"},
	{74, "TypeScript (3.7.4)", "typescript", "script.ts"},
	{94, "TypeScript (5.0.3)", "typescript", "script.ts"},
	{78, "Kotlin (1.3.70)", "kotlin", "Main.kt"},
	{81, "Scala (2.13.2)", "scala", "Main.scala"},
}

// judge0Lang finds id among the languages this server runs.
func (s *Server) judge0Lang(id int) (judge0Language, languages.Info, bool) {
	for _, l := range judge0Languages {
		if l.ID != id {
			continue
		}
		if info, ok := s.findLanguage(l.Moat, ""); ok {
			return l, info, true
		}
	}
	return judge0Language{}, languages.Info{}, false
}

// j0Num is a number a Judge0 client sends as a JSON number, a numeric
// string ("language_id": "4", as Judge0's own docs do) or null.
type j0Num struct {
	set bool
	v   float64
}

func (n *j0Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return nil
		}
		b = []byte(strings.TrimSpace(s))
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("not a number: %.40s", b)
	}
	n.set, n.v = true, v
	return nil
}

func (n j0Num) MarshalJSON() ([]byte, error) {
	if !n.set {
		return []byte("null"), nil
	}
	return json.Marshal(n.v)
}

// j0Bool is a boolean sent as true/false or "true"/"false", or null.
type j0Bool struct{ set, v bool }

func (b *j0Bool) UnmarshalJSON(d []byte) error {
	switch strings.Trim(string(d), `"`) {
	case "null", "":
	case "true", "1":
		b.set, b.v = true, true
	case "false", "0":
		b.set = true
	default:
		return fmt.Errorf("not a boolean: %.40s", d)
	}
	return nil
}

// judge0Request is a submission as a Judge0 client sends it.
type judge0Request struct {
	SourceCode                *string   `json:"source_code"`
	LanguageID                j0Num     `json:"language_id"`
	CompilerOptions           *string   `json:"compiler_options"`
	CommandLineArguments      *string   `json:"command_line_arguments"`
	NumberOfRuns              j0Num     `json:"number_of_runs"`
	Stdin                     *string   `json:"stdin"`
	ExpectedOutput            *string   `json:"expected_output"`
	CPUTimeLimit              j0Num     `json:"cpu_time_limit"`
	CPUExtraTime              j0Num     `json:"cpu_extra_time"`
	WallTimeLimit             j0Num     `json:"wall_time_limit"`
	MemoryLimit               j0Num     `json:"memory_limit"`
	StackLimit                j0Num     `json:"stack_limit"`
	MaxProcessesAndOrThreads  j0Num     `json:"max_processes_and_or_threads"`
	PerProcessAndThreadTime   j0Bool    `json:"enable_per_process_and_thread_time_limit"`
	PerProcessAndThreadMemory j0Bool    `json:"enable_per_process_and_thread_memory_limit"`
	MaxFileSize               j0Num     `json:"max_file_size"`
	RedirectStderrToStdout    j0Bool    `json:"redirect_stderr_to_stdout"`
	CallbackURL               *string   `json:"callback_url"`
	AdditionalFiles           *string   `json:"additional_files"`
	EnableNetwork             j0Bool    `json:"enable_network"`
	Tests                     []RunTest `json:"tests"` // moat's extension: one compile, many tests
	StopOnFailure             bool      `json:"stop_on_failure"`
}

// judge0Job is a submission as it is stored (the task's input): what the
// request asked, decoded, with its limits resolved when it was accepted.
type judge0Job struct {
	LanguageID    int                  `json:"language_id"`
	Language      string               `json:"language"` // moat's name
	SourceName    string               `json:"source_name"`
	Source        []byte               `json:"source_code"`
	Stdin         []byte               `json:"stdin,omitempty"`
	Expected      []byte               `json:"expected_output,omitempty"`
	HasExpected   bool                 `json:"has_expected,omitempty"`
	Args          string               `json:"command_line_arguments,omitempty"`
	Files         []languages.File     `json:"additional_files,omitempty"`
	CPUTime       float64              `json:"cpu_time_limit"`
	CPUExtra      float64              `json:"cpu_extra_time"`
	WallTime      float64              `json:"wall_time_limit"`
	MemoryKB      int64                `json:"memory_limit"`
	StackKB       int64                `json:"stack_limit"`
	MaxProcs      int64                `json:"max_processes_and_or_threads"`
	MaxFileSizeKB int64                `json:"max_file_size"`
	NumberOfRuns  int64                `json:"number_of_runs"`
	Redirect      bool                 `json:"redirect_stderr_to_stdout"`
	CallbackURL   string               `json:"callback_url,omitempty"`
	Limits        languages.ExecLimits `json:"limits"`
	Tests         []RunTest            `json:"tests,omitempty"`
	StopOnFailure bool                 `json:"stop_on_failure,omitempty"`
}

// judge0Outcome is a finished submission (the task's result).
type judge0Outcome struct {
	StatusID      int                 `json:"status_id"`
	Stdout        []byte              `json:"stdout,omitempty"`
	Stderr        []byte              `json:"stderr,omitempty"`
	CompileOutput []byte              `json:"compile_output,omitempty"`
	Message       string              `json:"message,omitempty"`
	Time          float64             `json:"time"`      // s
	WallTime      float64             `json:"wall_time"` // s
	MemoryKB      int64               `json:"memory"`
	ExitCode      *int                `json:"exit_code,omitempty"`
	ExitSignal    *int                `json:"exit_signal,omitempty"`
	Ran           bool                `json:"ran"` // the program ran: time and memory mean something
	Tests         []judge0TestOutcome `json:"tests,omitempty"`
}

// judge0TestOutcome is one test of the tests extension.
type judge0TestOutcome struct {
	StatusID int     `json:"status_id"`
	Stdout   []byte  `json:"stdout,omitempty"`
	Stderr   []byte  `json:"stderr,omitempty"`
	Message  string  `json:"message,omitempty"`
	Time     float64 `json:"time"`
	MemoryKB int64   `json:"memory"`
	ExitCode int     `json:"exit_code"`
}

// judge0Fields are the fields of a submission in the order Judge0's
// serializer lists them; judge0DefaultFields those it answers with when
// the request names none.
var (
	judge0Fields = []string{"source_code", "language_id", "stdin", "expected_output", "stdout", "status_id", "created_at",
		"finished_at", "time", "memory", "stderr", "token", "number_of_runs", "cpu_time_limit", "cpu_extra_time", "wall_time_limit",
		"memory_limit", "stack_limit", "max_processes_and_or_threads", "enable_per_process_and_thread_time_limit",
		"enable_per_process_and_thread_memory_limit", "max_file_size", "compile_output", "exit_code", "exit_signal", "message",
		"wall_time", "compiler_options", "command_line_arguments", "redirect_stderr_to_stdout", "callback_url", "additional_files",
		"enable_network", "started_at", "queued_at", "updated_at", "queue_host", "execution_host", "status", "language", "tests"}
	judge0DefaultFields = []string{"token", "time", "memory", "stdout", "stderr", "compile_output", "message", "status"}
)

// j0Error is Judge0's error body.
func j0Error(c echo.Context, status int, format string, args ...any) error {
	return c.JSON(status, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// judge0Routes mounts the routes under the prefix.
func (s *Server) judge0Routes(e *echo.Echo) {
	p := s.cfg.Judge0.Prefix
	auth := s.judge0Auth
	e.GET(p+"/about", s.judge0About)
	e.GET(p+"/version", s.judge0Version)
	e.GET(p+"/statuses", s.judge0ListStatuses, auth)
	e.GET(p+"/languages", s.judge0ListLanguages, auth)
	e.GET(p+"/languages/all", s.judge0ListLanguages, auth)
	e.GET(p+"/languages/:id", s.judge0GetLanguage, auth)
	e.GET(p+"/config_info", s.judge0ConfigInfo, auth)
	e.POST(p+"/submissions", s.judge0Create, auth)
	e.GET(p+"/submissions/batch", s.judge0BatchShow, auth)
	e.POST(p+"/submissions/batch", s.judge0BatchCreate, auth)
	e.GET(p+"/submissions/:token", s.judge0Show, auth)
}

// judge0Auth takes the API key from Judge0's X-Auth-Token header (what
// Judge0 clients send) or from Authorization: Bearer, and then
// authenticates as every other route does: the key's principal, its rate
// and its organization's. A refusal is Judge0's 401 with its error body.
func (s *Server) judge0Auth(next echo.HandlerFunc) echo.HandlerFunc {
	inner := s.authenticate(next)
	return func(c echo.Context) error {
		h := c.Request().Header
		if tok := strings.TrimSpace(h.Get("X-Auth-Token")); tok != "" && h.Get(echo.HeaderAuthorization) == "" {
			h.Set(echo.HeaderAuthorization, "Bearer "+tok)
		}
		err := inner(c)
		var p *Problem
		if errors.As(err, &p) && (p.Status == http.StatusUnauthorized || p.Status == http.StatusTooManyRequests || p.Status == http.StatusServiceUnavailable) {
			if p.Status == http.StatusUnauthorized {
				return j0Error(c, p.Status, "send a moat API key as X-Auth-Token: <key> (or Authorization: Bearer <key>): %s", p.Detail)
			}
			return j0Error(c, p.Status, "%s", p.Detail)
		}
		return err
	}
}

func (s *Server) judge0About(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"version": "1.13.1", "homepage": "https://github.com/moat-sandbox/moat",
		"source_code": "https://github.com/moat-sandbox/moat", "maintainer": "moat (Judge0-compatible API)"})
}

func (s *Server) judge0Version(c echo.Context) error { return c.String(http.StatusOK, "1.13.1") }

func (s *Server) judge0ListStatuses(c echo.Context) error {
	return c.JSON(http.StatusOK, judge0Statuses)
}

func (s *Server) judge0ListLanguages(c echo.Context) error {
	type lang struct {
		ID   int    `json:"id"`
		Name string `json:"name"`
	}
	out := []lang{}
	if s.exec != nil {
		for _, l := range judge0Languages {
			if _, _, ok := s.judge0Lang(l.ID); ok {
				out = append(out, lang{l.ID, l.Name})
			}
		}
	}
	slices.SortFunc(out, func(a, b lang) int { return strings.Compare(a.Name, b.Name) })
	return c.JSON(http.StatusOK, out)
}

func (s *Server) judge0GetLanguage(c echo.Context) error {
	id, err := strconv.Atoi(c.Param("id"))
	if err != nil || s.exec == nil {
		return j0Error(c, http.StatusNotFound, "Couldn't find Language with 'id'=%s", c.Param("id"))
	}
	l, info, ok := s.judge0Lang(id)
	if !ok {
		return j0Error(c, http.StatusNotFound, "Couldn't find Language with 'id'=%d", id)
	}
	var compile *string
	if info.Path == languages.PathCompiled {
		cmd := "moat builds " + info.Name + " " + info.Version
		compile = &cmd
	}
	return c.JSON(http.StatusOK, map[string]any{"id": l.ID, "name": l.Name, "is_archived": false, "source_file": l.Source,
		"compile_cmd": compile, "run_cmd": "moat runs " + info.Name + " " + info.Version + " (" + string(info.Path) + ")"})
}

// judge0ConfigInfo is Judge0's GET /config_info: the defaults and maxima
// of the caller's organization.
func (s *Server) judge0ConfigInfo(c echo.Context) error {
	m := s.execProfile(principalOf(c)).ExecMaxima()
	maxCPU := min(j0MaxCPUTime, time.Duration(m.Timeout).Seconds())
	maxMem := min(j0MaxMemoryKB, int64(m.Memory)/1024)
	return c.JSON(http.StatusOK, map[string]any{
		"maintenance_mode": false, "enable_wait_result": true, "enable_compiler_options": false,
		"allowed_languages_for_compile_options": []string{}, "enable_command_line_arguments": true,
		"enable_submission_delete": false, "enable_callbacks": len(s.cfg.Judge0.Callbacks) > 0, "callbacks_max_tries": judge0CallbackTries, "callbacks_timeout": judge0CallbackTimeout.Seconds(),
		"enable_additional_files": true, "max_queue_size": s.cfg.Tasks.MaxQueued,
		"cpu_time_limit": min(j0CPUTime, maxCPU), "max_cpu_time_limit": maxCPU, "cpu_extra_time": 0, "max_cpu_extra_time": 0,
		"wall_time_limit": min(j0WallTime, maxCPU), "max_wall_time_limit": min(j0MaxWallTime, maxCPU),
		"memory_limit": min(j0MemoryKB, maxMem), "max_memory_limit": maxMem, "stack_limit": j0StackKB, "max_stack_limit": j0MaxStackKB,
		"max_processes_and_or_threads": j0Procs, "max_max_processes_and_or_threads": j0MaxProcs,
		"enable_per_process_and_thread_time_limit": false, "allow_enable_per_process_and_thread_time_limit": false,
		"enable_per_process_and_thread_memory_limit": false, "allow_enable_per_process_and_thread_memory_limit": false,
		"max_file_size": j0MaxFileSizeKB, "max_max_file_size": j0MaxFileSizeKB, "number_of_runs": 1, "max_number_of_runs": j0MaxRuns,
		"redirect_stderr_to_stdout": false, "max_extract_size": int64(s.cfg.Limits.Archive.MaxBytes) / 1024,
		"enable_batched_submissions": true, "max_submission_batch_size": judge0MaxBatch, "submission_cache_duration": 0,
		"use_docs_as_homepage": false, "allow_enable_network": false, "enable_network": false,
	})
}

// j0Invalid collects a submission's validation errors as Judge0 reports
// them: {"field": ["message", ...]}.
type j0Invalid map[string][]string

func (v j0Invalid) add(field, format string, args ...any) {
	v[field] = append(v[field], fmt.Sprintf(format, args...))
}

// judge0Decode turns a request into the job to store, or says what is
// wrong with it, field by field.
func (s *Server) judge0Decode(p policy.Principal, r *judge0Request, b64 bool) (*judge0Job, j0Invalid) {
	bad := j0Invalid{}
	dec := func(field string, v *string) []byte {
		if v == nil {
			return nil
		}
		if !b64 {
			return []byte(*v)
		}
		// Ruby's Base64.decode64, which Judge0 uses, skips newlines and
		// anything outside the alphabet; the strict decoder of the
		// stripped text is its equivalent for what clients send.
		clean := strings.Map(func(r rune) rune {
			if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
				return -1
			}
			return r
		}, *v)
		b, err := base64.StdEncoding.DecodeString(clean)
		if err != nil {
			if b, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(clean, "=")); err != nil {
				bad.add(field, "is not base64 (base64_encoded=true): %v", err)
				return nil
			}
		}
		return b
	}
	job := &judge0Job{}
	job.Source = dec("source_code", r.SourceCode)
	job.Stdin = dec("stdin", r.Stdin)
	if r.ExpectedOutput != nil {
		job.Expected, job.HasExpected = dec("expected_output", r.ExpectedOutput), true
	}
	if r.SourceCode == nil || len(job.Source) == 0 && len(bad["source_code"]) == 0 {
		bad.add("source_code", "can't be blank")
	}
	if !r.LanguageID.set {
		bad.add("language_id", "can't be blank")
	} else {
		id := int(r.LanguageID.v)
		l, info, ok := s.judge0Lang(id)
		if !ok || float64(id) != r.LanguageID.v {
			bad.add("language_id", "language with id %s doesn't exist", strconv.FormatFloat(r.LanguageID.v, 'f', -1, 64))
		} else {
			job.LanguageID, job.Language, job.SourceName = id, info.Name, l.Source
			if len(info.Extensions) > 0 && !strings.HasSuffix(job.SourceName, info.Extensions[0]) {
				job.SourceName = "main" + info.Extensions[0]
			}
		}
	}
	// The limits: Judge0's ranges, each maximum lowered to the profile
	// of the caller's organization (exec:), so that a submission never
	// gets more than a /v1/runs job of the same caller would.
	m := s.execProfile(p).ExecMaxima()
	profSecs := time.Duration(m.Timeout).Seconds()
	profKB := int64(m.Memory) / 1024
	num := func(field string, n j0Num, def, lo, hi float64, loIncl bool) float64 {
		if !n.set {
			return min(def, hi)
		}
		switch {
		case n.v > hi:
			bad.add(field, "must be less than or equal to %s", strconv.FormatFloat(hi, 'f', -1, 64))
		case loIncl && n.v < lo:
			bad.add(field, "must be greater than or equal to %s", strconv.FormatFloat(lo, 'f', -1, 64))
		case !loIncl && n.v <= lo:
			bad.add(field, "must be greater than %s", strconv.FormatFloat(lo, 'f', -1, 64))
		}
		return n.v
	}
	job.CPUTime = num("cpu_time_limit", r.CPUTimeLimit, j0CPUTime, 0, min(j0MaxCPUTime, profSecs), true)
	job.CPUExtra = num("cpu_extra_time", r.CPUExtraTime, 0, 0, 5, true)
	job.WallTime = num("wall_time_limit", r.WallTimeLimit, j0WallTime, 1, min(j0MaxWallTime, profSecs), true)
	job.MemoryKB = int64(num("memory_limit", r.MemoryLimit, j0MemoryKB, 2048, float64(min(j0MaxMemoryKB, profKB)), true))
	job.StackKB = int64(num("stack_limit", r.StackLimit, j0StackKB, 0, j0MaxStackKB, true))
	job.MaxProcs = int64(num("max_processes_and_or_threads", r.MaxProcessesAndOrThreads, j0Procs, 0, j0MaxProcs, false))
	job.MaxFileSizeKB = int64(num("max_file_size", r.MaxFileSize, j0MaxFileSizeKB, 0, j0MaxFileSizeKB, true))
	job.NumberOfRuns = int64(num("number_of_runs", r.NumberOfRuns, 1, 0, j0MaxRuns, false))
	if r.PerProcessAndThreadTime.v {
		bad.add("enable_per_process_and_thread_time_limit", "this option cannot be enabled")
	}
	if r.PerProcessAndThreadMemory.v {
		bad.add("enable_per_process_and_thread_memory_limit", "this option cannot be enabled")
	}
	job.Redirect = r.RedirectStderrToStdout.v
	if r.EnableNetwork.v {
		// A run has no network in moat (no socket for WASM, an empty
		// network namespace for a native process): refused, as a Judge0
		// host with ALLOW_ENABLE_NETWORK=false refuses it.
		bad.add("enable_network", "enabling network is not allowed")
	}
	if r.CompilerOptions != nil && strings.TrimSpace(*r.CompilerOptions) != "" {
		bad.add("compiler_options", "setting compiler options is not allowed")
	}
	if r.CallbackURL != nil && strings.TrimSpace(*r.CallbackURL) != "" {
		if u, err := s.judge0CallbackAllowed(strings.TrimSpace(*r.CallbackURL)); err != nil {
			bad.add("callback_url", "%v", err)
		} else {
			job.CallbackURL = u
		}
	}
	if r.CommandLineArguments != nil {
		if len(*r.CommandLineArguments) > judge0MaxArgs {
			bad.add("command_line_arguments", "is too long (maximum is %d characters)", judge0MaxArgs)
		}
		job.Args = *r.CommandLineArguments
	}
	if r.AdditionalFiles != nil && *r.AdditionalFiles != "" {
		job.Files = s.judge0Files(*r.AdditionalFiles, job.SourceName, bad)
	}
	if r.Tests != nil {
		if n := len(r.Tests); n == 0 || n > MaxRunTests {
			bad.add("tests", "holds %d tests; give 1 to %d, or leave tests out", n, MaxRunTests)
		}
		if b64 {
			for i := range r.Tests {
				t := &r.Tests[i]
				t.Stdin = string(dec(fmt.Sprintf("tests[%d].stdin", i), &t.Stdin))
				if t.ExpectedOutput != nil {
					e := string(dec(fmt.Sprintf("tests[%d].expected_output", i), t.ExpectedOutput))
					t.ExpectedOutput = &e
				}
			}
		}
		job.Tests, job.StopOnFailure = r.Tests, r.StopOnFailure
	}
	if len(bad) > 0 {
		return nil, bad
	}
	// Judge0 gives a program cpu_time_limit (+ cpu_extra_time) of CPU and
	// wall_time_limit of wall clock; moat bounds the run by one deadline,
	// the smaller of the two. Output past max_file_size is SIGXFSZ.
	job.Limits = languages.ExecLimits{
		Timeout:        time.Duration(min(job.CPUTime+job.CPUExtra, job.WallTime) * float64(time.Second)),
		CompileTimeout: time.Duration(m.CompileTimeout),
		MemoryBytes:    job.MemoryKB * 1024,
		MaxOutputBytes: max(1024, job.MaxFileSizeKB*1024),
		ScratchBytes:   int64(m.Scratch), ScratchFiles: int64(m.ScratchFiles),
	}
	if job.Limits.Timeout <= 0 {
		job.Limits.Timeout = time.Duration(min(j0CPUTime, profSecs) * float64(time.Second))
	}
	return job, nil
}

// judge0Files unpacks additional_files, a base64 zip, under the archive
// limits uploads have (limits.archive): files the program finds beside
// its source, as Judge0 unpacks them in its working directory. A name
// that is the source's own is refused, not overwritten.
func (s *Server) judge0Files(b64, source string, bad j0Invalid) []languages.File {
	raw, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\n", "", "\r", "").Replace(b64))
	if err != nil {
		bad.add("additional_files", "is not base64: %v", err)
		return nil
	}
	if !bytes.HasPrefix(raw, []byte("PK\x03\x04")) {
		bad.add("additional_files", "is not a zip archive; send a base64-encoded .zip")
		return nil
	}
	files, err := unpackZipTree(raw, s.cfg.Limits.Archive)
	var ae *ArchiveError
	switch {
	case errors.As(err, &ae) && ae.Entry != "":
		// The entry first, and the fix in a zip's terms, not a plugin's.
		why := strings.Replace(ae.Reason, "archive the plugin directory with relative names", "zip the files with names relative to the working directory", 1)
		bad.add("additional_files", "%s: %s", quoteName(ae.Entry), why)
		return nil
	case err != nil:
		bad.add("additional_files", "%v", err)
		return nil
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]languages.File, 0, len(names))
	for _, n := range names {
		if strings.EqualFold(n, source) {
			bad.add("additional_files", "%q: the submission's source is named so; rename the file in the zip", n)
			return nil
		}
		out = append(out, languages.File{Name: n, Content: files[n]})
	}
	return out
}

// judge0Base64 reads base64_encoded: Judge0 CE 1.13 takes and answers
// plain text unless it is "true".
func judge0Base64(c echo.Context) bool { return c.QueryParam("base64_encoded") == "true" }

// judge0Fields reads ?fields=: Judge0's names, "*" for all; an unknown
// name is a 400 naming it.
// The error is the message of Judge0's 400.
func judge0RequestedFields(c echo.Context) ([]string, error) {
	raw := c.QueryParam("fields")
	if len(raw) > 2048 {
		return nil, errors.New("invalid fields: the list is over 2048 characters")
	}
	var invalid []string
	var out []string
	all := false
	for _, f := range strings.Split(raw, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
		case f == "*":
			all = true
		case slices.Contains(judge0Fields, f):
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		default:
			invalid = append(invalid, f)
		}
	}
	if len(invalid) > 0 {
		if len(invalid) > 10 {
			invalid = append(invalid[:10], "...")
		}
		return nil, fmt.Errorf("invalid fields: [%s]", strings.Join(invalid, ", "))
	}
	switch {
	case all:
		return judge0Fields, nil
	case len(out) == 0:
		out = judge0DefaultFields
	}
	return judge0Ordered(out), nil
}

// judge0Ordered puts fields in the order Judge0's serializer answers
// with, whatever the order asked: its columns', which judge0Fields keeps.
func judge0Ordered(fields []string) []string {
	ordered := make([]string, 0, len(fields))
	for _, f := range judge0Fields {
		if slices.Contains(fields, f) {
			ordered = append(ordered, f)
		}
	}
	return ordered
}

// readJudge0Body reads a submission body under limits.max_request_bytes
// into v. When it cannot, it has answered (ok false) with Judge0's error.
func (s *Server) readJudge0Body(c echo.Context, v any) (ok bool, err error) {
	body, err := readBody(c, int64(s.cfg.Limits.MaxRequestBytes), "limits.max_request_bytes")
	if err != nil {
		var p *Problem
		if !errors.As(err, &p) {
			return false, err
		}
		return false, j0Error(c, p.Status, "%s", p.Detail)
	}
	if err := decodeJSONBody(body, v, false); err != nil {
		return false, j0Error(c, http.StatusBadRequest, "the body is not a Judge0 submission (JSON): %v", err)
	}
	return true, nil
}

// judge0Enqueue stores a job as a task of the caller's organization.
func (s *Server) judge0Enqueue(c echo.Context, job *judge0Job) (string, error) {
	input, err := json.Marshal(job)
	if err != nil {
		return "", err
	}
	p := principalOf(c)
	id, _, err := s.store.TaskEnqueue(c.Request().Context(), store.NewTask{
		Org: p.Org, Module: judge0Module, Action: judge0Action, Input: input, User: p.User, Roles: p.Roles,
		CorrelationID: correlationID(c), MaxAttempts: 3, Origin: judge0Origin,
	}, s.cfg.Tasks.MaxQueued)
	if err != nil {
		return "", err
	}
	s.judge0Wake()
	return id, nil
}

// judge0EnqueueError is a refused enqueue as Judge0 says it.
func (s *Server) judge0EnqueueError(c echo.Context, err error) error {
	var ae *abi.Error
	if errors.As(err, &ae) && ae.Code == abi.CodeTooLarge {
		if strings.Contains(ae.Message, "input") {
			return c.JSON(http.StatusUnprocessableEntity, j0Invalid{"source_code": {fmt.Sprintf(
				"the submission (source_code, stdin, expected_output, additional_files and tests together) is over the %d bytes a stored submission holds; send less",
				abi.MaxTaskInputLen)}})
		}
		return j0Error(c, http.StatusServiceUnavailable, "queue is full")
	}
	s.log.Error("judge0: storing a submission", "err", err)
	return j0Error(c, http.StatusServiceUnavailable, "the submission could not be stored; retry later")
}

func (s *Server) judge0Create(c echo.Context) error {
	if s.exec == nil {
		return j0Error(c, http.StatusNotImplemented, "this server has no code executor")
	}
	wait := c.QueryParam("wait") == "true"
	b64 := judge0Base64(c)
	fields, err := judge0RequestedFields(c)
	if err != nil {
		return j0Error(c, http.StatusBadRequest, "%v", err)
	}
	var r judge0Request
	if ok, err := s.readJudge0Body(c, &r); !ok {
		return err
	}
	job, bad := s.judge0Decode(principalOf(c), &r, b64)
	if bad != nil {
		return c.JSON(http.StatusUnprocessableEntity, bad)
	}
	id, err := s.judge0Enqueue(c, job)
	if err != nil {
		return s.judge0EnqueueError(c, err)
	}
	if !wait {
		return c.JSON(http.StatusCreated, map[string]string{"token": id})
	}
	t, err := s.judge0Await(c.Request().Context(), principalOf(c).Org, id, job)
	if err != nil {
		return j0Error(c, http.StatusServiceUnavailable, "the submission %s was stored, but reading it failed: %v; GET it later", id, err)
	}
	obj, err := judge0Render(t, fields, b64)
	if err != nil {
		return c.JSON(http.StatusCreated, map[string]string{"token": id, "error": err.Error()})
	}
	return c.JSON(http.StatusCreated, obj)
}

// judge0Await waits for a submission to finish (wait=true): until its
// compile and run bounds and a margin for the queue have passed, then
// it answers with the submission as it is (In Queue or Processing), as a
// client polling would see it.
func (s *Server) judge0Await(ctx context.Context, org, id string, job *judge0Job) (*store.Task, error) {
	runs := max(1, len(job.Tests))
	bound := job.Limits.CompileTimeout + time.Duration(runs)*job.Limits.Timeout + 30*time.Second
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	defer s.judge0Forget(id)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		t, err := s.store.TaskGet(context.WithoutCancel(ctx), store.Scope{Org: org, Module: judge0Module}, id)
		if err != nil || t.Finished() {
			return t, err
		}
		select {
		case <-ctx.Done():
			return t, nil
		case <-s.judge0Done(id):
		case <-time.After(delay):
		}
	}
}

func (s *Server) judge0Show(c echo.Context) error {
	fields, err := judge0RequestedFields(c)
	if err != nil {
		return j0Error(c, http.StatusBadRequest, "%v", err)
	}
	t, err := s.store.TaskGet(c.Request().Context(), store.Scope{Org: principalOf(c).Org, Module: judge0Module}, c.Param("token"))
	if errors.Is(err, store.ErrTaskNotFound) || err == nil && t.Origin != judge0Origin {
		return j0Error(c, http.StatusNotFound, "Not Found")
	}
	if err != nil {
		return j0Error(c, http.StatusServiceUnavailable, "reading the submission failed; retry later")
	}
	obj, err := judge0Render(t, fields, judge0Base64(c))
	if err != nil {
		return j0Error(c, http.StatusBadRequest, "%s", err.Error())
	}
	return c.JSON(http.StatusOK, obj)
}

func (s *Server) judge0BatchCreate(c echo.Context) error {
	if s.exec == nil {
		return j0Error(c, http.StatusNotImplemented, "this server has no code executor")
	}
	var body struct {
		Submissions []judge0Request `json:"submissions"`
	}
	if ok, err := s.readJudge0Body(c, &body); !ok {
		return err
	}
	switch n := len(body.Submissions); {
	case n > judge0MaxBatch:
		return j0Error(c, http.StatusBadRequest, "number of submissions in a batch should be less than or equal to %d", judge0MaxBatch)
	case n == 0:
		return j0Error(c, http.StatusBadRequest, "there should be at least one submission in a batch")
	}
	b64 := judge0Base64(c)
	out := make([]any, 0, len(body.Submissions))
	created := false
	for i := range body.Submissions {
		job, bad := s.judge0Decode(principalOf(c), &body.Submissions[i], b64)
		if bad != nil {
			out = append(out, bad)
			continue
		}
		id, err := s.judge0Enqueue(c, job)
		if err != nil {
			var ae *abi.Error
			if errors.As(err, &ae) && ae.Code == abi.CodeTooLarge && strings.Contains(ae.Message, "input") {
				out = append(out, j0Invalid{"source_code": {fmt.Sprintf("the submission is over the %d bytes a stored submission holds; send less", abi.MaxTaskInputLen)}})
				continue
			}
			return s.judge0EnqueueError(c, err)
		}
		created = true
		out = append(out, map[string]string{"token": id})
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusUnprocessableEntity
	}
	return c.JSON(status, out)
}

func (s *Server) judge0BatchShow(c echo.Context) error {
	fields, err := judge0RequestedFields(c)
	if err != nil {
		return j0Error(c, http.StatusBadRequest, "%v", err)
	}
	raw := c.QueryParam("tokens")
	if raw == "" {
		raw = c.Request().Header.Get("tokens")
	}
	var tokens []string
	for _, t := range strings.Split(strings.TrimSpace(raw), ",") {
		if t != "" {
			tokens = append(tokens, t)
		}
		if len(tokens) > judge0MaxBatch {
			break
		}
	}
	switch n := len(tokens); {
	case n > judge0MaxBatch:
		return j0Error(c, http.StatusBadRequest, "number of submissions in a batch should be less than or equal to %d", judge0MaxBatch)
	case n == 0:
		return j0Error(c, http.StatusBadRequest, "there should be at least one submission in a batch")
	}
	b64 := judge0Base64(c)
	out := make([]any, 0, len(tokens))
	for _, tok := range tokens {
		t, err := s.store.TaskGet(c.Request().Context(), store.Scope{Org: principalOf(c).Org, Module: judge0Module}, tok)
		if errors.Is(err, store.ErrTaskNotFound) || err == nil && t.Origin != judge0Origin {
			out = append(out, nil)
			continue
		}
		if err != nil {
			return j0Error(c, http.StatusServiceUnavailable, "reading the submissions failed; retry later")
		}
		obj, err := judge0Render(t, fields, b64)
		if err != nil {
			return j0Error(c, http.StatusBadRequest, "some attributes for one or more submissions cannot be converted to UTF-8, use base64_encoded=true query parameter")
		}
		out = append(out, obj)
	}
	return c.JSON(http.StatusOK, map[string]any{"submissions": out})
}

// rubyBase64 is Ruby's Base64.encode64, which Judge0 answers with: lines
// of 60 characters, each ending in a newline.
func rubyBase64(b []byte) string {
	s := base64.StdEncoding.EncodeToString(b)
	var out strings.Builder
	out.Grow(len(s) + len(s)/60 + 1)
	for len(s) > 60 {
		out.WriteString(s[:60])
		out.WriteByte('\n')
		s = s[60:]
	}
	out.WriteString(s)
	out.WriteByte('\n')
	return out.String()
}

// errNotUTF8 is Judge0's refusal of output that is not text.
var errNotUTF8 = errors.New("some attributes for this submission cannot be converted to UTF-8, use base64_encoded=true query parameter")

// judge0Render is a stored submission in Judge0's shape, with the
// requested fields in Judge0's order.
func judge0Render(t *store.Task, fields []string, b64 bool) (*orderedJSON, error) {
	var job judge0Job
	if err := json.Unmarshal(t.Input, &job); err != nil {
		return nil, fmt.Errorf("the stored submission is unreadable: %w", err)
	}
	var oc judge0Outcome
	status := j0InQueue
	switch t.State {
	case abi.TaskRunning:
		status = j0Processing
	case abi.TaskDone:
		if err := json.Unmarshal(t.Result, &oc); err != nil {
			oc = judge0Outcome{StatusID: j0Internal, Message: "the stored result is unreadable"}
		}
		status = oc.StatusID
	case abi.TaskFailed, abi.TaskCancelled:
		status, oc.Message = j0Internal, t.Error
	}
	text := func(b []byte, set bool) (any, error) {
		if !set {
			return nil, nil
		}
		if b64 {
			return rubyBase64(b), nil
		}
		if !isText(b) {
			return nil, errNotUTF8
		}
		return string(b), nil
	}
	str := func(s string) any {
		if s == "" {
			return nil
		}
		if b64 {
			return rubyBase64([]byte(s))
		}
		return s
	}
	dec := func(v float64, set bool) any {
		if !set {
			return nil
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	ts := func(tm time.Time) any {
		if tm.IsZero() {
			return nil
		}
		return tm.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	ran := t.State == abi.TaskDone && oc.Ran
	obj := &orderedJSON{}
	for _, f := range fields {
		var v any
		var err error
		switch f {
		case "source_code":
			v, err = text(job.Source, true)
		case "language_id":
			v = job.LanguageID
		case "stdin":
			v, err = text(job.Stdin, job.Stdin != nil)
		case "expected_output":
			v, err = text(job.Expected, job.HasExpected)
		case "stdout":
			v, err = text(oc.Stdout, ran)
		case "stderr":
			v, err = text(oc.Stderr, ran && len(oc.Stderr) > 0)
		case "compile_output":
			v, err = text(oc.CompileOutput, len(oc.CompileOutput) > 0)
		case "status_id":
			v = status
		case "status":
			v = judge0StatusOf(status)
		case "created_at", "queued_at":
			v = ts(t.CreatedAt)
		case "started_at":
			if t.State != abi.TaskQueued {
				v = ts(t.UpdatedAt)
			}
		case "updated_at":
			v = ts(t.UpdatedAt)
		case "finished_at":
			v = ts(t.FinishedAt)
		case "time":
			v = dec(oc.Time, ran)
		case "wall_time":
			v = dec(oc.WallTime, ran)
		case "memory":
			if ran {
				v = oc.MemoryKB
			}
		case "token":
			v = t.ID
		case "number_of_runs":
			v = job.NumberOfRuns
		case "cpu_time_limit":
			v = strconv.FormatFloat(job.CPUTime, 'f', 1, 64)
		case "cpu_extra_time":
			v = strconv.FormatFloat(job.CPUExtra, 'f', 1, 64)
		case "wall_time_limit":
			v = strconv.FormatFloat(job.WallTime, 'f', 1, 64)
		case "memory_limit":
			v = job.MemoryKB
		case "stack_limit":
			v = job.StackKB
		case "max_processes_and_or_threads":
			v = job.MaxProcs
		case "enable_per_process_and_thread_time_limit", "enable_per_process_and_thread_memory_limit", "enable_network":
			v = false
		case "max_file_size":
			v = job.MaxFileSizeKB
		case "exit_code":
			if oc.ExitCode != nil {
				v = *oc.ExitCode
			}
		case "exit_signal":
			if oc.ExitSignal != nil {
				v = *oc.ExitSignal
			}
		case "message":
			v = str(oc.Message)
		case "compiler_options", "queue_host", "execution_host":
			v = nil
		case "callback_url":
			if job.CallbackURL != "" {
				v = job.CallbackURL
			}
		case "command_line_arguments":
			v = str(job.Args)
		case "redirect_stderr_to_stdout":
			v = job.Redirect
		case "additional_files":
			v = nil
			if len(job.Files) > 0 {
				v = fmt.Sprintf("%d files", len(job.Files))
			}
		case "language":
			name := ""
			for _, l := range judge0Languages {
				if l.ID == job.LanguageID {
					name = l.Name
				}
			}
			v = map[string]any{"id": job.LanguageID, "name": name}
		case "tests":
			if job.Tests == nil {
				continue // moat's extension: only where it was asked for
			}
			tests := make([]map[string]any, 0, len(oc.Tests))
			for _, tr := range oc.Tests {
				out, e1 := text(tr.Stdout, true)
				serr, e2 := text(tr.Stderr, len(tr.Stderr) > 0)
				if err = errors.Join(e1, e2); err != nil {
					break
				}
				tests = append(tests, map[string]any{"status": judge0StatusOf(tr.StatusID), "stdout": out, "stderr": serr,
					"message": str(tr.Message), "time": dec(tr.Time, true), "memory": tr.MemoryKB, "exit_code": tr.ExitCode})
			}
			v = tests
		}
		if err != nil {
			return nil, err
		}
		obj.add(f, v)
	}
	return obj, nil
}

// orderedJSON is a JSON object whose keys keep the order they were added
// in: Judge0's serializer's order, which a diff against Judge0 shows.
type orderedJSON struct {
	keys []string
	vals []any
}

func (o *orderedJSON) add(k string, v any) { o.keys, o.vals = append(o.keys, k), append(o.vals, v) }

// Get returns the value of k (tests).
func (o *orderedJSON) Get(k string) (any, bool) {
	for i, key := range o.keys {
		if key == k {
			return o.vals[i], true
		}
	}
	return nil, false
}

func (o *orderedJSON) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
