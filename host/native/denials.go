package native

import "fmt"

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
