// Command moat-confine is the small wrapper moat's native runner executes
// to confine a child: it joins the job's cgroup, applies rlimits, drops to
// the job uid, applies Landlock and the seccomp filter, and execs the
// target (see policy/kernel/child.ConfineMain). It exists because every
// microsecond of its start-up is paid by every native run: re-executing
// the whole moat binary costs several times as much (see the README's
// spawn figures). Without MOAT_CONFINE set it does nothing useful.
package main

import (
	"fmt"
	"os"

	"github.com/moat-sandbox/moat/policy/kernel/child"
)

func main() {
	child.ConfineMain()
	fmt.Fprintln(os.Stderr, "moat-confine: this is moat's confinement wrapper; moat's native runner starts it with "+child.ConfineEnv+" set")
	os.Exit(2)
}
