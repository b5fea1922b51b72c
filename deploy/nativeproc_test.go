package deploy_test

import "fmt"

// checkNativeProc holds the moat container's MOAT_NATIVE_PROC to the one
// value kernel.NativeProc accepts ("bind": native jobs get the pod's
// /proc where the runtime masks it): another value makes moat refuse
// every native job, naming the variable, which a manifest should not
// ship. Unset is allowed: native jobs and their languages are then
// refused in a masked pod, by the operator's choice.
func checkNativeProc(b *bundle) []string {
	c := b.moatContainer()
	if c == nil {
		return []string{"no container moat"}
	}
	for _, e := range c.Env {
		if e.Name != "MOAT_NATIVE_PROC" {
			continue
		}
		if e.ValueFrom != nil || e.Value != "bind" {
			return []string{fmt.Sprintf("env MOAT_NATIVE_PROC: %q, want bind (or remove it to refuse native jobs where /proc is masked)", e.Value)}
		}
	}
	return nil
}
