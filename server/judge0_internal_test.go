package server

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/languages"
)

// TestJudgeOutput holds the comparison to Judge0's strip (isolate_job.rb):
// trailing whitespace of each line and of the text is ignored, nothing
// else is.
func TestJudgeOutput(t *testing.T) {
	for _, tc := range []struct {
		expected, got string
		want          bool
	}{
		{"42", "42\n", true},
		{"42\n", "42", true},
		{"1\n2", "1 \n2\t\n\n\n", true},
		{"1\n2", "1\r\n2\r\n", true},
		{"42", " 42", false},
		{"1\n2", "1\n\n2", false},
		{"", "\n \n", true},
		{"a b", "a  b", false},
	} {
		if got := judgeOutput(tc.expected, tc.got); got != tc.want {
			t.Errorf("judgeOutput(%q, %q) = %v, want %v", tc.expected, tc.got, got, tc.want)
		}
	}
}

// TestRubyBase64: Judge0 answers with Ruby's Base64.encode64, 60
// characters a line, each line ending in a newline.
func TestRubyBase64(t *testing.T) {
	if got := rubyBase64([]byte("hello, Judge0\n")); got != "aGVsbG8sIEp1ZGdlMAo=\n" {
		t.Errorf("short: %q", got)
	}
	long := []byte(strings.Repeat("x", 100))
	got := rubyBase64(long)
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 3 || len(lines[0]) != 60 || len(lines[1]) != 60 || !strings.HasSuffix(got, "\n") {
		t.Errorf("long: %q", got)
	}
	if b, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(got, "\n", "")); err != nil || string(b) != string(long) {
		t.Errorf("round trip: %v", err)
	}
}

// TestFitOutcome: a result stays within what a task stores, however
// large the outputs and however many tests.
func TestFitOutcome(t *testing.T) {
	big := []byte(strings.Repeat("<", 1<<20))
	oc := &judge0Outcome{Stdout: big, Stderr: big, CompileOutput: big}
	for range MaxRunTests {
		oc.Tests = append(oc.Tests, judge0TestOutcome{Stdout: big, Stderr: big, Message: "m"})
	}
	fitOutcome(oc)
	if b, _ := jsonMarshal(oc); len(b) > 64<<10 {
		t.Errorf("%d bytes", len(b))
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// TestJudge0JudgeTable: each outcome of the executor in Judge0's status,
// as isolate_job.rb decides it — a compile stage that passed its time
// limit is a Compilation Error with Judge0's compile_output, not a Time
// Limit Exceeded.
func TestJudge0JudgeTable(t *testing.T) {
	exp := "42"
	for _, tc := range []struct {
		name    string
		res     languages.ExecResult
		want    int
		compile string
	}{
		{"accepted", languages.ExecResult{Status: languages.StatusOK, Stdout: []byte("42\n"), RunTime: time.Millisecond}, j0Accepted, ""},
		{"wrong answer", languages.ExecResult{Status: languages.StatusOK, Stdout: []byte("41\n"), RunTime: time.Millisecond}, j0WrongAnswer, ""},
		{"run time limit", languages.ExecResult{Status: languages.StatusTimeout, RunTime: time.Second}, j0TLE, ""},
		{"compile time limit", languages.ExecResult{Status: languages.StatusTimeout, Message: "compile stage: compile time limit 1m0s passed"}, j0CE, "Compilation time limit exceeded."},
		{"compile error", languages.ExecResult{Status: languages.StatusCompileError, CompileOutput: "main.c:1: error"}, j0CE, "main.c:1: error"},
		{"sigsegv", languages.ExecResult{Status: languages.StatusRuntimeError, Signal: "SIGSEGV", RunTime: time.Millisecond}, j0SIGSEGV, ""},
		{"nzec", languages.ExecResult{Status: languages.StatusRuntimeError, ExitCode: 3, RunTime: time.Millisecond}, j0NZEC, ""},
		{"wasm abort", languages.ExecResult{Status: languages.StatusRuntimeError, ExitCode: -1, Message: "_start: wasm error: unreachable", RunTime: time.Millisecond}, j0SIGABRT, ""},
		{"rust panic", languages.ExecResult{Status: languages.StatusRuntimeError, ExitCode: -1, Message: "_start: wasm error: unreachable",
			Stderr: []byte("thread 'main' panicked at 'index out of bounds', src/main.rs:2:1\n"), RunTime: time.Millisecond}, j0NZEC, ""},
		{"memory", languages.ExecResult{Status: languages.StatusMemoryLimit, RunTime: time.Millisecond}, j0Other, ""},
		{"output", languages.ExecResult{Status: languages.StatusOutputLimit, RunTime: time.Millisecond}, j0SIGXFSZ, ""},
	} {
		oc := judge0Judge(&tc.res, &exp)
		if oc.StatusID != tc.want || string(oc.CompileOutput) != tc.compile {
			t.Errorf("%s: status %d compile_output %q, want %d %q", tc.name, oc.StatusID, oc.CompileOutput, tc.want, tc.compile)
		}
	}
}
