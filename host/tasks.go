package host

import "github.com/moat-sandbox/moat/host/audit"

// Background tasks: a module's invocation enqueues a run of one of its
// own actions (task.enqueue), or a schedule in its manifest does at each
// tick; a runner of package host/tasks claims due tasks from the store
// and invokes each on the module's current version through Module.Invoke.
// The task family's view of a module (the actions a task may run) is the
// family's own (ops.Family.Attach in host/ops/task.go), and its
// configuration (ops.TasksConfig: the queue bound, the origin) its
// provisioned service. What is here is what the runner needs of the host.
// The runner is a client of Module, not part of it.

// Audit is the audit log of the host that loaded m: where a client acting
// on m's behalf outside an invocation (host/tasks: a task's failed
// attempts, a schedule's ticks) records what it did.
func (m *Module) Audit() *audit.Log { return m.host.audit }
