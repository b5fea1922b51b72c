package native

import (
	"context"
	"fmt"

	"github.com/moat-sandbox/moat/host/audit"
)

// Denial is a refusal by a kernel layer that the host observed in a run:
// the audit trail records each, correlated with the invocation.
type Denial struct {
	Rule   string // the layer and the limit, e.g. "kernel: cgroup memory limit"
	Reason string
}

// Denials lists what the kernel layers refused during the run, as far as
// the host can observe it: an OOM kill, the pids limit, the deadline, a
// confinement that refused to start. (A Landlock or seccomp refusal inside
// the child shows only as the child's own error output and exit code.)
func (r *Result) Denials(spec *Spec) []Denial {
	var d []Denial
	if r.Status == StatusMemoryLimit {
		d = append(d, Denial{"kernel: cgroup memory limit", fmt.Sprintf("the job was OOM-killed at its memory limit (peak %d bytes)", r.PeakMemory)})
	}
	if r.PidsLimitHit {
		d = append(d, Denial{"kernel: cgroup pids limit", "the job tried to create more processes than its pids limit"})
	}
	if r.Status == StatusTimeout {
		d = append(d, Denial{"kernel: wall-clock timeout", fmt.Sprintf("the job ran past its deadline and was killed after %s", r.Wall.Round(1e6))})
	}
	if r.Status == StatusRefused {
		d = append(d, Denial{"kernel: confinement", "the confined child refused to start: " + r.Reason})
	}
	return d
}

// AuditDenials returns an OnDenial hook (WorkerSpec.OnDenial) that records
// each denial in the audit trail as a deny decision of the template event's
// module, action and principal, under the invocation's correlation id.
func AuditDenials(a *audit.Log, template audit.Event) func(Denial, string) {
	return func(d Denial, correlationID string) {
		ev := template
		ev.Kind, ev.Decision = audit.KindDecision, audit.Deny
		ev.Rule, ev.Reason = d.Rule, d.Reason
		if correlationID != "" {
			ev.CorrelationID = correlationID
		}
		a.Record(context.Background(), ev)
	}
}
