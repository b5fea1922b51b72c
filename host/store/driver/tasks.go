package driver

import "context"

// TaskRow is a background task as stored (package store's Task). Times
// are unix nanoseconds, 0 for "not set"; Roles is a JSON array; Claim is
// the token of the attempt in flight ("" unless running).
type TaskRow struct {
	ID, Org, Module, Action string
	Input                   []byte
	User, Roles             string
	CorrelationID           string
	Key, Schedule           string
	State                   string
	Attempts, MaxAttempts   int
	RunAt, LeaseUntil       int64
	Claim                   string
	Result                  []byte
	Error, Code             string
	CreatedAt, UpdatedAt    int64
	FinishedAt              int64
	// Origin is where the task runs: "" for the store's own modules
	// (any runner that loads modules from the store), else a name only
	// the runner of that origin claims (store.Task.Origin).
	Origin string
}

// TaskFilter selects tasks: of Org (every organization when empty),
// and of Module, State and ID when they are not empty. Rows come back
// newest first (CreatedAt, then ID, descending), after (BeforeCreated,
// BeforeID) in that order when HasBefore, at most Limit of them.
type TaskFilter struct {
	Org, Module, State, ID string
	User                   string // the enqueuer's user; "" for any
	Origin                 string // the tasks of this origin only; "" for any
	BeforeCreated          int64
	BeforeID               string
	HasBefore              bool
	Limit                  int
}

// TaskUpdate is how TaskFinish ends an attempt: the task's new State
// (done, failed, or queued to run again at RunAt), and what it keeps.
// AttemptsDelta is added to the attempts (-1 gives back an attempt that
// never ran). FinishedAt is set for a final state.
type TaskUpdate struct {
	State         string
	Result        []byte
	Error, Code   string
	RunAt         int64
	AttemptsDelta int
	At            int64 // updated_at
	FinishedAt    int64
}

// TaskStatser is implemented by a backend that can count its tasks for
// the operator's metrics (store.TaskStats). Optional: without it a
// server exports no task gauges.
type TaskStatser interface {
	// TaskStats counts the tasks by state, and returns the earliest
	// run_at (unix nanoseconds) of a queued task due at now, 0 when none
	// is due.
	TaskStats(ctx context.Context, now int64) (byState map[string]int64, oldestDue int64, err error)
}

// TaskBackend is the task queue and the schedule ticks of a backend. Its
// atomicity holds across processes and replicas sharing one database:
// an enqueue's idempotency key and quota, a claim (a task is claimed by
// one caller at a time, and a claim whose lease expired can be claimed
// again), a schedule's tick (fired once).
type TaskBackend interface {
	// TaskEnqueue stores t, unless t.Key is not empty and a task of
	// (t.Org, t.Module) already holds it: then it returns that task's
	// id and existing true, and stores nothing. Otherwise, when
	// maxActive > 0 and the scope already has maxActive tasks queued or
	// running, it stores nothing and returns ErrOverQuota. The lookup,
	// the count and the insert are one transaction, serialized with
	// every other enqueue of the scope.
	TaskEnqueue(ctx context.Context, t TaskRow, maxActive int) (id string, existing bool, err error)
	// TaskGet returns the task id of org, and of module unless module is
	// empty; ErrNotFound when there is none.
	TaskGet(ctx context.Context, org, module, id string) (*TaskRow, error)
	TaskList(ctx context.Context, f TaskFilter) ([]TaskRow, error)
	// TaskClaim first fails (state failed, error expiredError, code
	// expiredCode, finished at now) every running task whose lease
	// expired before now with no attempt left; then it claims at most
	// limit tasks, each queued with RunAt <= now or running with an
	// expired lease, the longest due first: state running, one more
	// attempt, LeaseUntil leaseUntil, Claim claim. It returns them as
	// claimed. A task is claimed by one caller at a time, across
	// processes. Only tasks whose Origin is origin are failed or
	// claimed: a runner never takes a task of a module it cannot run.
	TaskClaim(ctx context.Context, origin string, now, leaseUntil int64, claim string, limit int, expiredError, expiredCode string) ([]TaskRow, error)
	// TaskExtend moves the lease of a task still running under claim
	// to leaseUntil; ErrNotFound when the claim is lost (the task was
	// cancelled, or its lease expired and another caller claimed it).
	TaskExtend(ctx context.Context, id, claim string, leaseUntil int64) error
	// TaskFinish applies u to a task still running under claim and
	// clears its lease; ErrNotFound when the claim is lost.
	TaskFinish(ctx context.Context, id, claim string, u TaskUpdate) error
	// TaskCancel cancels the task id of org (and of module unless
	// empty) when it is queued or running, and returns it as it is
	// after the call, with changed true when it was cancelled now;
	// ErrNotFound when there is no such task.
	TaskCancel(ctx context.Context, org, module, id string, at int64) (t *TaskRow, changed bool, err error)
	// TaskRetry queues the task id of org again, from its first
	// attempt and to run at at, when it failed or was cancelled, and
	// returns it as it is after the call, with changed true when it
	// was queued now; ErrNotFound when there is no such task.
	TaskRetry(ctx context.Context, org, id string, at int64) (t *TaskRow, changed bool, err error)
	// TaskPrune deletes at most limit tasks that finished before
	// finishedBefore, and the schedule ticks before ticksBefore; it
	// returns how many tasks it deleted.
	TaskPrune(ctx context.Context, finishedBefore, ticksBefore int64, limit int) (int, error)
	// ScheduleFire records the tick of schedule for (t.Org, t.Module)
	// and enqueues t, in one transaction, unless the tick is recorded
	// already (fired false: another caller fired it). Over maxActive
	// (as TaskEnqueue) the tick is still recorded, t is not stored, and
	// the error is ErrOverQuota.
	ScheduleFire(ctx context.Context, t TaskRow, schedule string, tick int64, maxActive int) (fired bool, err error)
}
