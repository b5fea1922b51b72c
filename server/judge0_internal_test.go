package server

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
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
