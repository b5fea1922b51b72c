package host

import (
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
)

// Background tasks: a module's invocation enqueues a run of one of its
// own actions (task.enqueue), or a schedule in its manifest does at each
// tick; a runner of package host/tasks claims due tasks from the store
// and invokes each on the module's current version through Module.Invoke.
// What is here is the module's side: the task family's view of it. The
// family's configuration (ops.TasksConfig: the queue bound, the origin)
// is its provisioned service. The runner is a client of Module, not part
// of it.

// taskConfig is the task family's view of m (ops.Env.Tasks).
func (m *Module) taskConfig() *ops.ModuleTasks {
	return &ops.ModuleTasks{CheckAction: m.checkTaskAction}
}

// checkTaskAction refuses an action a task of m cannot run.
func (m *Module) checkTaskAction(action string) error {
	if _, ok := m.acts.publicIdx[action]; !ok {
		return abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: module %s has no action %q; its actions are: %s",
			m.name, clipName(action), strings.Join(m.acts.public, ", "))
	}
	if mf := m.policy.manifest; mf != nil {
		if a, ok := mf.Action(action); ok && a.Confirm {
			return abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: action %s needs confirmation (confirm: true), which a background task cannot give", action)
		}
	}
	return nil
}

func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Audit is the audit log of the host that loaded m: where a client acting
// on m's behalf outside an invocation (host/tasks: a task's failed
// attempts, a schedule's ticks) records what it did.
func (m *Module) Audit() *audit.Log { return m.host.audit }
