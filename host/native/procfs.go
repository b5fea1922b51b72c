package native

import (
	"fmt"

	"github.com/moat-sandbox/moat/policy/kernel"
)

// Usable reports whether native jobs can be confined here with every
// layer this process can build, or why not: where the container runtime
// masks /proc, a job in a user namespace cannot mount a /proc of its own,
// and without the operator's kernel.ProcEnv=bind it is refused. The
// languages whose compiler or interpreter runs as a native job report
// themselves unavailable by it (GET /v1/languages, /readyz), rather than
// listing a language every run of which is refused.
func Usable() error {
	if err := nativeProc().Err; err != nil {
		return fmt.Errorf("native: %w", err)
	}
	return nil
}

// nativeProc is kernel.NativeProc; a test sets another plan.
var nativeProc = kernel.NativeProc

// procLayer applies the /proc plan to a job's root: a fresh proc, or the
// bound one with its note among the run's unavailable layers; or the
// refusal.
func procLayer(rs *kernel.RootSpec, res *Result) error {
	p := nativeProc()
	if p.Err != nil {
		return fmt.Errorf("native: %w", p.Err)
	}
	if p.Bind {
		rs.ProcBind = true
		res.Unavailable = append(res.Unavailable, p.Note)
	}
	return nil
}
