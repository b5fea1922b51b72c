package host_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestRunBudget: Module.Run (a WASI command, such as an interpreter
// running a script, with the device file) gets a budget of its own, made
// from the run's and the module's limits: past a limit the guest meets the
// refusal, and its first hit of each limit is a deny decision on the
// audit trail under the run's correlation id, as for Module.Invoke.
func TestRunBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHost(t, nil)
	// The module's own budget: 7 log records per run.
	m, err := h.Load(ctx, testwasm.BuildGo(t, "./testdata/devcmd", false), host.LoadOptions{Name: "devcmd",
		Limits: host.Limits{Budget: budget.Limits{LogRecords: 7}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		budget budget.Limits
		stdout string
		stderr string // a refusal's message, as the guest read it
		knob   string // the limit whose first hit is audited, once
	}{
		// EAGAIN ("Try again" in Go's wasip1), which a guest can retry after a close.
		{name: "descriptors past the run's limit", args: []string{"open", "10"}, budget: budget.Limits{OpenDevices: 3},
			stdout: "opened 3: open /dev/moat/ops: Try again\n", knob: budget.KnobOpenDevices},
		{name: "descriptors within the default", args: []string{"open", "10"}, stdout: "opened 10\n"},
		{name: "log records past the module's limit", args: []string{"log", "20"},
			stdout: "ok=7 resource_exhausted=13\n", stderr: "log.write: this invocation wrote its 7 log records; the limit is 7 (limits.budget.log_records)", knob: budget.KnobLogRecords},
		{name: "log records past the run's limit", args: []string{"log", "20"}, budget: budget.Limits{LogRecords: 2},
			stdout: "ok=2 resource_exhausted=18\n", stderr: "the limit is 2 (limits.budget.log_records)", knob: budget.KnobLogRecords},
		{name: "a line past the held bytes", args: []string{"line", "1000000"}, budget: budget.Limits{HeldBytes: 256 << 10},
			stdout: "resource_exhausted=1\n", stderr: "the limit is 262144 (limits.budget.held_bytes)", knob: budget.KnobHeldBytes},
		{name: "a line over 4 MiB", args: []string{"line", "5000000"},
			stdout: "too_large=1\n", stderr: "a request line is limited to 4195328 bytes"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			corr := fmt.Sprintf("run-budget-%d", i)
			var stdout, stderr bytes.Buffer
			res, err := m.Run(ctx, host.RunRequest{Args: tt.args, Stdout: &stdout, Stderr: &stderr, Principal: ann, CorrelationID: corr,
				Ops: true, Limits: host.Limits{Budget: tt.budget}})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exit %d, %v; stderr %s", res.ExitCode, err, stderr.String())
			}
			if stdout.String() != tt.stdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tt.stderr)
			}
			if err := host.AuditOf(h).Flush(ctx); err != nil {
				t.Fatal(err)
			}
			evs, err := host.AuditOf(h).Query(ctx, audit.Filter{CorrelationID: corr})
			if err != nil {
				t.Fatal(err)
			}
			var denials []audit.Event
			var inv *audit.Event
			for _, e := range evs {
				switch e.Kind {
				case audit.KindDecision:
					denials = append(denials, e)
				case audit.KindInvocation:
					inv = &e
				}
			}
			if tt.knob == "" {
				if len(denials) != 0 {
					t.Errorf("decisions %+v, want none", denials)
				}
			} else if len(denials) != 1 || denials[0].Rule != tt.knob || denials[0].Decision != audit.Deny ||
				denials[0].Code != string(abi.CodeResourceExhausted) || denials[0].Module != "devcmd" || denials[0].Org != ann.Org {
				t.Errorf("decisions %+v, want one deny with rule %s and code resource_exhausted", denials, tt.knob)
			}
			switch {
			case inv == nil:
				t.Errorf("no invocation event among %+v", evs)
			case inv.Attrs["budget_exhausted"] != tt.knob:
				t.Errorf("invocation event attrs %v, want budget_exhausted=%q", inv.Attrs, tt.knob)
			}
		})
	}
}
