package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
)

// TestProfileExec: exec: bounds code-execution jobs; what it leaves out
// takes DefaultExecLimits; a zero, negative or oversized value is refused
// naming the field.
func TestProfileExec(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       policy.ExecLimits
		err        string
	}{
		{name: "absent: the defaults", yaml: "name: p\n", want: policy.DefaultExecLimits},
		{name: "all set", yaml: "name: p\nexec: {timeout: 2s, compile_timeout: 20s, memory: 64MiB, output: 4KiB, scratch: 8MiB, scratch_files: 100}\n",
			want: policy.ExecLimits{Timeout: policy.Duration(2 * time.Second), CompileTimeout: policy.Duration(20 * time.Second), Memory: 64 << 20, Output: 4 << 10, Scratch: 8 << 20, ScratchFiles: 100}},
		{name: "some set", yaml: "name: p\nexec: {memory: 1GiB}\n",
			want: policy.ExecLimits{Timeout: policy.DefaultExecLimits.Timeout, CompileTimeout: policy.DefaultExecLimits.CompileTimeout, Memory: 1 << 30, Output: policy.DefaultExecLimits.Output,
				Scratch: policy.DefaultExecLimits.Scratch, ScratchFiles: policy.DefaultExecLimits.ScratchFiles}},
		{name: "zero scratch", yaml: "name: p\nexec: {scratch: 0}\n", err: "exec.scratch: must be more than 0"},
		{name: "zero scratch files", yaml: "name: p\nexec: {scratch_files: 0}\n", err: "exec.scratch_files: must be more than 0"},
		{name: "negative scratch files", yaml: "name: p\nexec: {scratch_files: -3}\n", err: "exec.scratch_files: must be more than 0"},
		{name: "zero timeout", yaml: "name: p\nexec: {timeout: 0s}\n", err: "test.yaml:2: exec.timeout: must be more than 0"},
		{name: "negative compile timeout", yaml: "name: p\nexec: {compile_timeout: -1s}\n", err: `exec.compile_timeout: "-1s" is negative`},
		{name: "zero memory", yaml: "name: p\nexec: {memory: 0}\n", err: "exec.memory: must be more than 0"},
		{name: "output over the ceiling", yaml: "name: p\nexec: {output: 1GiB}\n", err: "exec.output: 1 GiB is more than 256 MiB: the server holds a job's output in memory"},
		{name: "unknown field", yaml: "name: p\nexec: {pids: 5}\n", err: "exec.pids"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.ParseProfile("test.yaml", []byte(tt.yaml))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.ExecMaxima(); got != tt.want {
				t.Fatalf("ExecMaxima %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := (*policy.Profile)(nil).ExecMaxima(); got != policy.DefaultExecLimits {
		t.Fatalf("nil profile: %+v", got)
	}
}
