package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/languages"
)

// MaxRunTests bounds the tests of one run: each is a run of its own.
const MaxRunTests = 100

// RunTest is one test of a run: the program runs on its stdin with its
// args, and its stdout is judged against ExpectedOutput when that is set.
type RunTest struct {
	Stdin          string   `json:"stdin,omitempty"`
	ExpectedOutput *string  `json:"expected_output,omitempty"`
	Args           []string `json:"args,omitempty"`
}

// Verdict is how one test ended: accepted, wrong-answer, or the run's
// status when the program did not end well (runtime-error, timeout, ...).
type Verdict string

const (
	VerdictAccepted    Verdict = "accepted"
	VerdictWrongAnswer Verdict = "wrong-answer"
	VerdictNotRun      Verdict = "not-run" // stop_on_failure, or the response's output budget
)

// TestResult is one test's verdict, output, time and memory.
type TestResult struct {
	Verdict    Verdict          `json:"verdict"`
	Status     languages.Status `json:"status,omitempty"`
	Stdout     string           `json:"stdout"`
	Stderr     string           `json:"stderr"`
	Encoding   string           `json:"encoding,omitempty"`
	ExitCode   int              `json:"exit_code"`
	Signal     string           `json:"signal,omitempty"`
	Message    string           `json:"message,omitempty"`
	RunTimeMS  float64          `json:"run_time_ms"`
	PeakMemory uint64           `json:"peak_memory_bytes"`
}

// judgeOutput compares a program's stdout with the expected output as
// Judge0 does (isolate_job.rb, strip): each line's trailing whitespace
// and then the text's trailing whitespace are ignored, so "1 \n2\n\n"
// matches "1\n2". Leading whitespace and blank lines between lines count.
func judgeOutput(expected, got string) bool {
	return judgeStrip(expected) == judgeStrip(got)
}

func judgeStrip(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r\n\v\f\x00")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), " \t\r\n\v\f\x00")
}

// verdictOf judges one run: the run's own status unless it ended well,
// then the output against the expectation (none: accepted).
func verdictOf(res *languages.ExecResult, expected *string) Verdict {
	if res.Status != languages.StatusOK {
		return Verdict(res.Status)
	}
	if expected == nil || judgeOutput(*expected, string(res.Stdout)) {
		return VerdictAccepted
	}
	return VerdictWrongAnswer
}

// runTests runs r's program once per test. The first test builds the
// program and the rest find the build in the executor's cache (its key
// is the source), so the program is compiled once however many tests
// there are; each test is a run of its own, a fresh instance or process
// with nothing left from the one before. A test that fails does not stop
// the rest unless stop_on_failure; a compile error stops them all.
func (s *Server) runTests(c echo.Context, info languages.Info, r RunRequest, src languages.Source, lim languages.ExecLimits, correlation string, budget *responseBudget) (*RunResult, error) {
	if n := len(r.Tests); n == 0 || n > MaxRunTests {
		return nil, problem(http.StatusBadRequest, "invalid_argument", "tests holds %d tests; give 1 to %d, or leave tests out for one run", n, MaxRunTests)
	}
	if len(r.FilesOut) > 0 {
		return nil, problem(http.StatusBadRequest, "invalid_argument", "files_out cannot be used with tests; run the program without tests to get its files")
	}
	out := &RunResult{Language: info.Name, Version: info.Version, Status: languages.StatusOK, CorrelationID: correlation, Tests: make([]TestResult, 0, len(r.Tests))}
	passed, stop := 0, false
	for i, t := range r.Tests {
		if stop || budget.spent() {
			why := "not run: an earlier test failed (stop_on_failure)"
			if !stop {
				why = fmt.Sprintf("not run: the tests before it used up the response's %d bytes of output (limits.max_run_response_bytes)", budget.limit)
			}
			out.Tests = append(out.Tests, TestResult{Verdict: VerdictNotRun, Message: why})
			continue
		}
		args := r.Args
		if t.Args != nil {
			args = t.Args
		}
		tl := lim
		tl.MaxOutputBytes = budget.outputCap(lim.MaxOutputBytes)
		res, err := s.execute(c, info, languages.ExecRequest{
			Language: info.Name, Source: src, Stdin: []byte(t.Stdin), Args: args, Env: r.Env, Limits: tl,
			Principal: principalOf(c), CorrelationID: correlation,
		})
		if err != nil {
			return nil, err
		}
		if i == 0 {
			out.Version, out.CompileOutput, out.BuildCached = res.Version, res.CompileOutput, res.BuildCached
			out.CompileTimeMS = float64(res.CompileTime) / 1e6
		}
		if res.Status == languages.StatusCompileError || res.Status == languages.StatusInvalid {
			// The program never ran: no test can.
			out.Status, out.Message, out.Violations, out.CompileOutput = res.Status, res.Message, res.Violations, res.CompileOutput
			out.Tests = out.Tests[:0]
			break
		}
		tr := TestResult{Verdict: verdictOf(res, t.ExpectedOutput), ExitCode: res.ExitCode, Signal: res.Signal, Message: res.Message,
			RunTimeMS: float64(res.RunTime) / 1e6, PeakMemory: res.PeakMemory}
		if res.Status != languages.StatusOK {
			tr.Status = res.Status
		}
		tr.Stdout, tr.Stderr, tr.Encoding = textOrBase64(res.Stdout, res.Stderr)
		one := RunResult{Stdout: tr.Stdout, Stderr: tr.Stderr, Message: tr.Message, Status: res.Status}
		budget.charge(&one)
		if one.Status == languages.StatusOutputLimit && res.Status != languages.StatusOutputLimit {
			tr.Stdout, tr.Stderr, tr.Encoding, tr.Message, tr.Verdict = "", "", "", one.Message, Verdict(languages.StatusOutputLimit)
		}
		out.RunTimeMS += tr.RunTimeMS
		out.PeakMemory = max(out.PeakMemory, tr.PeakMemory)
		if tr.Verdict == VerdictAccepted {
			passed++
		} else if r.StopOnFailure {
			stop = true
		}
		out.Tests = append(out.Tests, tr)
	}
	out.Passed = &passed
	return out, nil
}
