package server

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// RunRequest is a code-execution job for POST /v1/runs.
type RunRequest struct {
	Language string            `json:"language"`
	Version  string            `json:"version,omitempty"`
	Files    []RunFile         `json:"files"`
	Main     string            `json:"main,omitempty"`
	Stdin    string            `json:"stdin,omitempty"`
	Args     []string          `json:"args,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Limits   RunLimits         `json:"limits,omitempty"`
	// FilesOut are patterns naming files the run writes in its working
	// directory (its scratch directory) that the result returns
	// (RunResult.FilesOut): "out.txt", "*.png", "plots/*.svg".
	FilesOut []string `json:"files_out,omitempty"`
	// Tests run the program once per test, compiled once (runs_tests.go).
	Tests         []RunTest `json:"tests,omitempty"`
	StopOnFailure bool      `json:"stop_on_failure,omitempty"`
}

// RunFile is one source file; Encoding is utf8 (the default) or base64.
type RunFile struct {
	Name     string `json:"name"`
	Content  string `json:"content"`
	Encoding string `json:"encoding,omitempty"`
}

// RunLimits are a job's limits in the units of `moat exec`: durations as
// text ("2s"), sizes in bytes. Each is at most what the caller's profile
// allows (its exec: limits, policy.Profile.ExecMaxima): more is a 400
// naming the field and the maximum. Left out (or zero), a limit is that
// maximum.
type RunLimits struct {
	Timeout        string `json:"timeout,omitempty"`
	CompileTimeout string `json:"compile_timeout,omitempty"`
	MemoryBytes    int64  `json:"memory_bytes,omitempty"`
	MaxOutputBytes int64  `json:"max_output_bytes,omitempty"`
	// ScratchBytes and ScratchFiles bound what the run may keep in its
	// working directory, its scratch directory (exec.scratch,
	// exec.scratch_files).
	ScratchBytes int64 `json:"scratch_bytes,omitempty"`
	ScratchFiles int64 `json:"scratch_files,omitempty"`
}

// RunResult is the outcome of a job: languages.ExecResult with the output
// as text (base64 when it is not UTF-8, with Encoding saying so).
type RunResult struct {
	Language      string                `json:"language"`
	Version       string                `json:"version"`
	Status        languages.Status      `json:"status"`
	Stdout        string                `json:"stdout"`
	Stderr        string                `json:"stderr"`
	Encoding      string                `json:"encoding,omitempty"`
	ExitCode      int                   `json:"exit_code"`
	Signal        string                `json:"signal,omitempty"`
	Message       string                `json:"message,omitempty"`
	CompileOutput string                `json:"compile_output,omitempty"`
	Violations    []languages.Violation `json:"violations,omitempty"`
	CompileTimeMS float64               `json:"compile_time_ms"`
	RunTimeMS     float64               `json:"run_time_ms"`
	PeakMemory    uint64                `json:"peak_memory_bytes"`
	BuildCached   bool                  `json:"build_cached"`
	CorrelationID string                `json:"correlation_id"`
	// ScratchFull names the limit of the run's scratch directory a write
	// was refused for ("bytes", "files": the program got ENOSPC).
	ScratchFull string `json:"scratch_full,omitempty"`
	// FilesOut are the files FilesOut's patterns named, each with its
	// content (Encoding utf-8 or base64) or why it is not returned.
	FilesOut []languages.OutFile `json:"files_out,omitempty"`
	// Tests are the verdicts of the request's tests, in order, and Passed
	// how many were accepted (runs_tests.go).
	Tests  []TestResult `json:"tests,omitempty"`
	Passed *int         `json:"passed,omitempty"`
}

// maxBatch bounds the jobs of one batch submission.
const maxBatch = 32

// MaxRunResponseBytes is the default of limits.max_run_response_bytes,
// which bounds the output one POST /v1/runs answers with,
// over all the jobs of a batch: stdout, stderr and compile output as they
// are encoded in JSON (where one control byte or '<' is six bytes). Each
// job's max_output_bytes (or the executor's default) is lowered to what is
// left of it; a job whose encoded output would still pass it keeps its
// status and exit code but loses its output (status output-limit), and the
// jobs after the budget is spent are not run. 32 jobs of 1 MiB of '<' on
// both streams once made an 89 MB response.
const MaxRunResponseBytes = 8 << 20

// runOverhead is the JSON of a result without its outputs, generously.
const runOverhead = 1 << 10

// fileOverhead is the JSON of a returned file without its name, content
// and reason, generously.
const fileOverhead = 96

// responseBudget is what is left of limits.max_run_response_bytes for a
// request.
type responseBudget struct{ left, limit int64 }

// outputCap is the max_output_bytes (per stream) a job may run with: what
// it asked for, or the executor's default (0), lowered to half of what is
// left of the response.
func (b *responseBudget) outputCap(asked int64) int64 {
	share := max(0, (b.left-runOverhead)/2)
	switch {
	case asked > 0:
		return min(asked, share)
	case languages.DefaultExecLimits.MaxOutputBytes <= share:
		return 0 // the executor's default fits
	default:
		return share
	}
}

// charge takes a job's result out of the budget, dropping its outputs when
// their encoded size does not fit.
func (b *responseBudget) charge(res *RunResult) {
	size := int64(runOverhead + jsonLen(res.Stdout) + jsonLen(res.Stderr) + jsonLen(res.CompileOutput) + jsonLen(res.Message))
	files := int64(0)
	for _, f := range res.FilesOut {
		files += int64(fileOverhead + jsonLen(f.Name) + jsonLen(f.Content) + jsonLen(f.Omitted))
	}
	if size+files > b.left {
		// The files' contents go first: the outputs say what happened.
		files = 0
		for i := range res.FilesOut {
			f := &res.FilesOut[i]
			if f.Omitted == "" {
				f.Encoding, f.Content = "", ""
				f.Omitted = fmt.Sprintf("the response's outputs are limited to %d bytes over all jobs, encoded as JSON (limits.max_run_response_bytes)", b.limit)
			}
			files += int64(fileOverhead + jsonLen(f.Name) + jsonLen(f.Omitted))
		}
	}
	size += files
	if size > b.left {
		res.Stdout, res.Stderr, res.Encoding = "", "", ""
		res.CompileOutput = res.CompileOutput[:min(len(res.CompileOutput), 1024)]
		res.Status = languages.StatusOutputLimit
		res.Message = fmt.Sprintf("the output was dropped: the response's outputs are limited to %d bytes over all jobs, encoded as JSON (limits.max_run_response_bytes)", b.limit)
		size = int64(runOverhead + jsonLen(res.CompileOutput) + jsonLen(res.Message))
	}
	b.left -= size
}

// spent reports whether no further job can run: less than its overhead left.
func (b *responseBudget) spent() bool { return b.left < 2*runOverhead }

// jsonLen is the length of s encoded as a JSON string by encoding/json
// with HTML escaping on (as echo encodes): quotes, backslashes and common
// control characters take 2 bytes, other control characters, <, >, &,
// U+2028, U+2029 and invalid UTF-8 take 6, anything else its own size.
func jsonLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}

// runs runs one job ({"language": ...}) or a batch ({"runs": [...]}),
// the batch's jobs one after another, each with its own result.
func (s *Server) runs(c echo.Context) error {
	if s.exec == nil {
		return problem(http.StatusNotImplemented, "not_implemented", "this server has no code executor; run it with the languages executor (moat serve does)")
	}
	body, err := readBody(c, int64(s.cfg.Limits.MaxRequestBytes), "limits.max_request_bytes")
	if err != nil {
		return err
	}
	var probe struct {
		Runs []RunRequest `json:"runs"`
	}
	dec := func(v any) error {
		if err := decodeJSONBody(body, v, true); err != nil {
			return problem(http.StatusBadRequest, "invalid_argument", "the body is not a run request: %v", err)
		}
		return nil
	}
	if isBatch(body) {
		if err := dec(&probe); err != nil {
			return err
		}
		if len(probe.Runs) == 0 || len(probe.Runs) > maxBatch {
			return problem(http.StatusBadRequest, "invalid_argument", "runs holds %d jobs; a batch holds 1 to %d", len(probe.Runs), maxBatch)
		}
		out := make([]RunResult, 0, len(probe.Runs))
		limit := int64(s.cfg.Limits.MaxRunResponseBytes)
		budget := &responseBudget{left: limit, limit: limit}
		for i, r := range probe.Runs {
			corr := fmt.Sprintf("%s.%d", correlationID(c), i)
			if budget.spent() {
				out = append(out, RunResult{Language: r.Language, Status: languages.StatusOutputLimit, CorrelationID: corr,
					Message: fmt.Sprintf("not run: the jobs before it used up the response's %d bytes of output (limits.max_run_response_bytes)", limit)})
				continue
			}
			res, err := s.run(c, r, corr, budget, nil)
			if err != nil {
				if p, ok := err.(*Problem); ok {
					p.Detail = fmt.Sprintf("runs[%d]: %s", i, p.Detail)
				}
				return err
			}
			out = append(out, *res)
		}
		return c.JSON(http.StatusOK, map[string]any{"runs": out})
	}
	var r RunRequest
	if err := dec(&r); err != nil {
		return err
	}
	limit := int64(s.cfg.Limits.MaxRunResponseBytes)
	if wantsSSE(c) {
		return s.streamRun(c, r, &responseBudget{left: limit, limit: limit})
	}
	res, err := s.run(c, r, correlationID(c), &responseBudget{left: limit, limit: limit}, nil)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

func (s *Server) run(c echo.Context, r RunRequest, correlation string, budget *responseBudget, output func(string, []byte)) (*RunResult, error) {
	bad := func(format string, args ...any) (*RunResult, error) {
		return nil, problem(http.StatusBadRequest, "invalid_argument", format, args...)
	}
	info, ok := s.findLanguage(r.Language, r.Version)
	if !ok {
		var hint string
		var ule *languages.UnknownLanguageError
		if _, err := languages.Lookup(r.Language); errors.As(err, &ule) && ule.Suggestion != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", ule.Suggestion)
		}
		return bad("language %q version %q is not offered here%s; GET /v1/languages lists them", r.Language, r.Version, hint)
	}
	src := languages.Source{Main: r.Main}
	for i, f := range r.Files {
		content := []byte(f.Content)
		switch f.Encoding {
		case "", "utf8":
		case "base64":
			b, err := base64.StdEncoding.DecodeString(f.Content)
			if err != nil {
				return bad("files[%d].content is not base64: %v", i, err)
			}
			content = b
		default:
			return bad("files[%d].encoding %q: use utf8 or base64", i, f.Encoding)
		}
		src.Files = append(src.Files, languages.File{Name: f.Name, Content: content})
	}
	if len(src.Files) == 0 {
		return bad("files is empty; send at least the program's source")
	}
	if err := languages.ValidateFilesOut(r.FilesOut); err != nil {
		return bad("%v", err)
	}
	lim, err := s.jobLimits(principalOf(c), r.Limits)
	if err != nil {
		return nil, err
	}
	lim.MaxOutputBytes = budget.outputCap(lim.MaxOutputBytes)
	if r.Tests != nil {
		return s.runTests(c, info, r, src, lim, correlation, budget)
	}
	res, err := s.execute(c, info, languages.ExecRequest{
		Language: info.Name, Source: src, Stdin: []byte(r.Stdin), Args: r.Args, Env: r.Env, Limits: lim,
		Principal: principalOf(c), CorrelationID: correlation, FilesOut: r.FilesOut, Output: output,
		Preparing: preparingEvents(info, output), // runs_stream.go
	})
	if err != nil {
		return nil, err
	}
	out := NewRunResult(res, correlation)
	budget.charge(out)
	return out, nil
}

// NewRunResult is the API's form of a job's result: what POST /v1/runs
// answers with, and what `moat exec --lang --json` prints, so that the CLI
// and the HTTP API name the same things alike.
func NewRunResult(res *languages.ExecResult, correlation string) *RunResult {
	out := &RunResult{
		Language: res.Language, Version: res.Version, Status: res.Status, ExitCode: res.ExitCode, Signal: res.Signal,
		Message: res.Message, CompileOutput: res.CompileOutput, Violations: res.Violations,
		CompileTimeMS: float64(res.CompileTime) / 1e6, RunTimeMS: float64(res.RunTime) / 1e6,
		PeakMemory: res.PeakMemory, BuildCached: res.BuildCached, CorrelationID: correlation,
		ScratchFull: res.ScratchFull, FilesOut: res.Files,
	}
	out.Stdout, out.Stderr, out.Encoding = textOrBase64(res.Stdout, res.Stderr)
	return out
}

// execProfile is the profile whose exec: limits bound p's jobs: the one
// the server applies to p's organization.
func (s *Server) execProfile(p policy.Principal) *policy.Profile {
	if h := s.hostFor(p.Org); h != nil {
		return h.Profile()
	}
	return nil
}

// jobLimits resolves the limits a /v1/runs job asks for against the
// maxima of the caller's profile. A limit left out, or zero, is the
// maximum; one above it is refused, never lowered in silence: a client
// asking for an hour should learn it gets ten seconds.
func (s *Server) jobLimits(p policy.Principal, asked RunLimits) (languages.ExecLimits, error) {
	prof := s.execProfile(p)
	m := prof.ExecMaxima()
	name := "built-in defaults"
	if prof != nil {
		name = prof.Name
	}
	out := languages.ExecLimits{Timeout: time.Duration(m.Timeout), CompileTimeout: time.Duration(m.CompileTimeout),
		MemoryBytes: int64(m.Memory), MaxOutputBytes: int64(m.Output), ScratchBytes: int64(m.Scratch), ScratchFiles: int64(m.ScratchFiles)}
	over := func(field, got, maximum, knob string) error {
		return problem(http.StatusBadRequest, "invalid_argument",
			"%s: %s is more than the %s the profile %s allows for organization %s (exec.%s); ask for at most %s, or leave it out to get %s",
			field, got, maximum, name, p.Org, knob, maximum, maximum)
	}
	for _, d := range []struct {
		field, knob, v string
		max            policy.Duration
		dst            *time.Duration
	}{
		{"limits.timeout", "timeout", asked.Timeout, m.Timeout, &out.Timeout},
		{"limits.compile_timeout", "compile_timeout", asked.CompileTimeout, m.CompileTimeout, &out.CompileTimeout},
	} {
		if d.v == "" {
			continue
		}
		v, err := policy.ParseDuration(d.v)
		if err != nil {
			return out, problem(http.StatusBadRequest, "invalid_argument", "%s: %v", d.field, err)
		}
		switch {
		case v > d.max:
			return out, over(d.field, v.String(), d.max.String(), d.knob)
		case v > 0:
			*d.dst = time.Duration(v)
		}
	}
	for _, b := range []struct {
		field, knob string
		v           int64
		max         policy.ByteSize
		dst         *int64
	}{
		{"limits.memory_bytes", "memory", asked.MemoryBytes, m.Memory, &out.MemoryBytes},
		{"limits.max_output_bytes", "output", asked.MaxOutputBytes, m.Output, &out.MaxOutputBytes},
		{"limits.scratch_bytes", "scratch", asked.ScratchBytes, m.Scratch, &out.ScratchBytes},
	} {
		switch {
		case b.v < 0:
			return out, problem(http.StatusBadRequest, "invalid_argument", "%s: %d is negative; give bytes, at most %d (%s), or leave it out", b.field, b.v, int64(b.max), b.max)
		case b.v > int64(b.max):
			return out, over(b.field, fmt.Sprintf("%d (%s)", b.v, policy.ByteSize(b.v)), fmt.Sprintf("%d (%s)", int64(b.max), b.max), b.knob)
		case b.v > 0:
			*b.dst = b.v
		}
	}
	switch n, maxFiles := asked.ScratchFiles, int64(m.ScratchFiles); {
	case n < 0:
		return out, problem(http.StatusBadRequest, "invalid_argument", "limits.scratch_files: %d is negative; give a number of files, at most %d, or leave it out", n, maxFiles)
	case n > maxFiles:
		return out, over("limits.scratch_files", strconv.FormatInt(n, 10), strconv.FormatInt(maxFiles, 10), "scratch_files")
	case n > 0:
		out.ScratchFiles = n
	}
	return out, nil
}

func (s *Server) execute(c echo.Context, info languages.Info, req languages.ExecRequest) (*languages.ExecResult, error) {
	res, err := s.execJob(c.Request().Context(), req)
	if err != nil {
		s.metrics.runs.WithLabelValues(info.Name, "error").Inc()
		return nil, problem(http.StatusServiceUnavailable, "unavailable", "%s: %v", info.Name, err)
	}
	s.metrics.runs.WithLabelValues(info.Name, string(res.Status)).Inc()
	return res, nil
}

func textOrBase64(stdout, stderr []byte) (string, string, string) {
	if isText(stdout) && isText(stderr) {
		return string(stdout), string(stderr), ""
	}
	return base64.StdEncoding.EncodeToString(stdout), base64.StdEncoding.EncodeToString(stderr), "base64"
}

func isText(b []byte) bool { return strings.ToValidUTF8(string(b), "\uFFFD") == string(b) }

// findLanguage finds a language by name or alias and, when version is not
// empty or "*", by version: an exact version, or a prefix of it at a dot
// ("3" and "3.12" select 3.12.0), as Piston's semver selectors mostly are.
func (s *Server) findLanguage(name, version string) (languages.Info, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, l := range s.languages() {
		match := l.Name == name
		for _, a := range l.Aliases {
			match = match || a == name
		}
		if !match {
			continue
		}
		v := strings.TrimPrefix(version, "=")
		if v == "" || v == "*" || v == l.Version || strings.HasPrefix(l.Version, v+".") {
			return l, true
		}
	}
	return languages.Info{}, false
}

// The Piston-compatible routes. Their requests and responses are Piston's
// API v2, field for field, so that existing clients work unchanged; their
// errors are Piston's {"message": "..."} rather than problem details,
// because that is what those clients parse.

type pistonFile struct {
	Name     string  `json:"name"`
	Content  *string `json:"content"`
	Encoding string  `json:"encoding"`
}

type pistonRequest struct {
	Language           string       `json:"language"`
	Version            string       `json:"version"`
	Files              []pistonFile `json:"files"`
	Stdin              string       `json:"stdin"`
	Args               []string     `json:"args"`
	CompileTimeout     *int64       `json:"compile_timeout"`      // ms
	RunTimeout         *int64       `json:"run_timeout"`          // ms
	CompileMemoryLimit *int64       `json:"compile_memory_limit"` // bytes, -1 for the maximum
	RunMemoryLimit     *int64       `json:"run_memory_limit"`     // bytes, -1 for the maximum
}

// pistonStage is one stage of a Piston result. Code is null when the
// program was killed by a signal; Signal and Status are null when there is
// nothing to say, as in Piston.
type pistonStage struct {
	Stdout  string  `json:"stdout"`
	Stderr  string  `json:"stderr"`
	Output  string  `json:"output"`
	Code    *int    `json:"code"`
	Signal  *string `json:"signal"`
	Message *string `json:"message"`
	Status  *string `json:"status"`
	CPUTime int64   `json:"cpu_time"`  // ms
	Wall    int64   `json:"wall_time"` // ms
	Memory  uint64  `json:"memory"`    // bytes
}

type pistonResponse struct {
	Language string       `json:"language"`
	Version  string       `json:"version"`
	Run      *pistonStage `json:"run,omitempty"`
	Compile  *pistonStage `json:"compile,omitempty"`
}

type pistonRuntime struct {
	Language string   `json:"language"`
	Version  string   `json:"version"`
	Aliases  []string `json:"aliases"`
	Runtime  string   `json:"runtime,omitempty"`
}

// pistonGate admits Piston requests from the allowed networks only, and
// within the Piston principal's rate.
func (s *Server) pistonGate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a := s.cfg.HTTP.clientAddr(c.Request()); !a.IsValid() || !s.cfg.Piston.allowed(a) {
			s.metrics.denials.WithLabelValues("piston_network").Inc()
			return c.JSON(http.StatusForbidden, map[string]string{"message": "this address may not use the Piston API; the operator lists allowed networks in piston.allow"})
		}
		ok, wait, err := s.piston.take(c.Request().Context(), "piston", time.Now())
		if err != nil {
			s.log.Error("piston rate: the shared bucket is unavailable", "err", err)
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"message": "the rate limit cannot be checked (the database is unavailable); retry later"})
		}
		if !ok {
			secs := max(1, int((wait+time.Second-1)/time.Second))
			c.Response().Header().Set("Retry-After", fmt.Sprint(secs))
			s.metrics.denials.WithLabelValues("rate_limited").Inc()
			return c.JSON(http.StatusTooManyRequests, map[string]string{"message": fmt.Sprintf("too many requests; retry after %d s (piston.limits.rate)", secs)})
		}
		pc := s.cfg.Piston.Principal
		stateOf(c).principal = policy.Principal{User: pc.User, Org: pc.Org, Roles: pc.Roles}
		return next(c)
	}
}

func (s *Server) pistonRuntimes(c echo.Context) error {
	out := []pistonRuntime{}
	if s.exec != nil {
		for _, l := range s.languages() {
			aliases := l.Aliases
			if aliases == nil {
				aliases = []string{}
			}
			out = append(out, pistonRuntime{Language: l.Name, Version: l.Version, Aliases: aliases})
		}
	}
	return c.JSON(http.StatusOK, out)
}

// pistonExecute takes the body as JSON whatever its Content-Type: Piston
// clients send it as application/json or, from browsers avoiding a CORS
// preflight, as text/plain.
func (s *Server) pistonExecute(c echo.Context) error {
	if s.exec == nil {
		return c.JSON(http.StatusNotImplemented, map[string]string{"message": "this server has no code executor"})
	}
	body, err := readBody(c, int64(s.cfg.Limits.MaxRequestBytes), "limits.max_request_bytes")
	if err != nil {
		return c.JSON(http.StatusRequestEntityTooLarge, map[string]string{"message": err.(*Problem).Detail})
	}
	var r pistonRequest
	if err := decodeJSONBody(body, &r, false); err != nil {
		return c.JSON(http.StatusBadRequest, map[string]string{"message": "the body is not a Piston request: " + err.Error()})
	}
	msg := func(format string, args ...any) error {
		return c.JSON(http.StatusBadRequest, map[string]string{"message": fmt.Sprintf(format, args...)})
	}
	if r.Language == "" {
		return msg("language is required as a string")
	}
	if r.Version == "" {
		return msg("version is required as a string")
	}
	if r.Files == nil {
		return msg("files is required as an array")
	}
	lim := s.cfg.Piston.Limits
	src := languages.Source{}
	for i, f := range r.Files {
		if f.Content == nil {
			return msg("files[%d].content is required as a string", i)
		}
		content := []byte(*f.Content)
		switch f.Encoding {
		case "", "utf8":
		case "base64":
			b, err := base64.StdEncoding.DecodeString(*f.Content)
			if err != nil {
				return msg("files[%d].content is not base64", i)
			}
			content = b
		case "hex":
			b, err := hex.DecodeString(*f.Content)
			if err != nil {
				return msg("files[%d].content is not hex", i)
			}
			content = b
		default:
			return msg("files[%d].encoding must be base64, hex or utf8", i)
		}
		src.Files = append(src.Files, languages.File{Name: f.Name, Content: content})
	}
	info, ok := s.findLanguage(r.Language, r.Version)
	if !ok {
		return msg("%s-%s runtime is unknown", r.Language, r.Version)
	}
	for i := range src.Files {
		if src.Files[i].Name == "" {
			// Piston names unnamed files itself; the entry needs the
			// language's extension to build.
			ext := ""
			if len(info.Extensions) > 0 {
				ext = info.Extensions[0]
			}
			src.Files[i].Name = fmt.Sprintf("file%d%s", i, ext)
		}
	}
	// The maxima are piston.limits, lowered to the Piston principal's
	// profile (exec:), as every other principal's jobs are.
	pm := s.execProfile(principalOf(c)).ExecMaxima()
	lim.RunTimeout = min(lim.RunTimeout, pm.Timeout)
	lim.CompileTimeout = min(lim.CompileTimeout, pm.CompileTimeout)
	lim.Memory = min(lim.Memory, pm.Memory)
	lim.MaxOutput = min(lim.MaxOutput, pm.Output)
	el := languages.ExecLimits{Timeout: time.Duration(lim.RunTimeout), CompileTimeout: time.Duration(lim.CompileTimeout),
		MemoryBytes: int64(lim.Memory), MaxOutputBytes: int64(lim.MaxOutput),
		ScratchBytes: int64(pm.Scratch), ScratchFiles: int64(pm.ScratchFiles)} // Piston has no field for them
	for _, t := range []struct {
		name string
		v    *int64
		max  time.Duration
		dst  *time.Duration
	}{{"compile_timeout", r.CompileTimeout, time.Duration(lim.CompileTimeout), &el.CompileTimeout}, {"run_timeout", r.RunTimeout, time.Duration(lim.RunTimeout), &el.Timeout}} {
		if t.v == nil {
			continue
		}
		if d := time.Duration(*t.v) * time.Millisecond; d > t.max {
			return msg("%s cannot exceed the configured limit of %d", t.name, t.max.Milliseconds())
		} else if d > 0 {
			*t.dst = d
		}
	}
	for _, m := range []struct {
		name string
		v    *int64
	}{{"compile_memory_limit", r.CompileMemoryLimit}, {"run_memory_limit", r.RunMemoryLimit}} {
		if m.v == nil || *m.v < 0 {
			continue
		}
		if *m.v > int64(lim.Memory) {
			return msg("%s cannot exceed the configured limit of %d", m.name, int64(lim.Memory))
		}
		if *m.v > 0 && m.name == "run_memory_limit" {
			el.MemoryBytes = *m.v
		}
	}
	res, err := s.execJob(c.Request().Context(), languages.ExecRequest{
		Language: info.Name, Source: src, Stdin: []byte(r.Stdin), Args: r.Args, Limits: el,
		Principal: principalOf(c), CorrelationID: correlationID(c),
	})
	if err != nil {
		s.metrics.runs.WithLabelValues(info.Name, "error").Inc()
		return c.JSON(http.StatusInternalServerError, map[string]string{"message": err.Error()})
	}
	s.metrics.runs.WithLabelValues(info.Name, string(res.Status)).Inc()
	return c.JSON(http.StatusOK, pistonResult(info, res))
}

// pistonResult maps a moat result onto Piston's stages. Piston runs the
// compile stage only for compiled languages and leaves out the run stage
// when compiling failed; its output is stdout and stderr as they came,
// which moat keeps apart, so output is stdout followed by stderr.
func pistonResult(info languages.Info, res *languages.ExecResult) pistonResponse {
	out := pistonResponse{Language: info.Name, Version: res.Version}
	if out.Version == "" {
		out.Version = info.Version
	}
	str := func(s string) *string { return &s }
	if info.Path == languages.PathCompiled || res.Status == languages.StatusCompileError {
		code := 0
		st := &pistonStage{Stderr: res.CompileOutput, Output: res.CompileOutput, Code: &code, Wall: res.CompileTime.Milliseconds()}
		if res.Status == languages.StatusCompileError {
			code = 1
			st.Status, st.Message = str("RE"), str(res.Message)
			out.Compile = st
			return out
		}
		out.Compile = st
	}
	if res.Status == languages.StatusInvalid {
		var b strings.Builder
		for _, v := range res.Violations {
			b.WriteString(v.String() + "\n")
		}
		code := 1
		out.Run = &pistonStage{Stderr: b.String(), Output: b.String(), Code: &code, Message: str(res.Message), Status: str("RE")}
		return out
	}
	run := &pistonStage{Stdout: string(res.Stdout), Stderr: string(res.Stderr), Output: string(res.Stdout) + string(res.Stderr),
		Wall: res.RunTime.Milliseconds(), Memory: res.PeakMemory}
	code := res.ExitCode
	run.Code = &code
	if res.Signal != "" {
		run.Signal, run.Code = str(res.Signal), nil
	}
	switch res.Status {
	case languages.StatusRuntimeError:
		run.Status = str("RE")
		if res.Signal != "" {
			run.Status = str("SG")
		}
	case languages.StatusTimeout:
		run.Status, run.Signal, run.Code = str("TO"), str("SIGKILL"), nil
	case languages.StatusMemoryLimit:
		run.Status, run.Signal, run.Code = str("SG"), str("SIGKILL"), nil
	case languages.StatusOutputLimit:
		run.Status = str("OL")
	}
	if res.Message != "" && res.Status != languages.StatusOK {
		run.Message = str(res.Message)
	}
	out.Run = run
	return out
}

// isBatch reports whether body is a batch: an object with a runs key (in
// any case, as encoding/json matches it), wherever in the object it is.
func isBatch(body []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return false
	}
	for k := range top {
		if strings.EqualFold(k, "runs") {
			return true
		}
	}
	return false
}
