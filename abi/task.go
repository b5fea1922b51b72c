package abi

// The task family: durable background invocations of the calling module's
// own actions. A task runs later, on any replica, as the principal whose
// invocation enqueued it, and carries that invocation's correlation id, so
// the audit trail ties an action to the tasks it started.
const (
	OpTaskEnqueue = "task.enqueue"
	OpTaskStatus  = "task.status"
	OpTaskCancel  = "task.cancel"
)

// Task states. A task is queued until a runner claims it, running while an
// attempt is in flight, and then done, failed (after its last attempt, or
// at once for an error no retry can fix) or cancelled. A failed attempt
// with attempts left goes back to queued, to run again after a backoff.
const (
	TaskQueued    = "queued"
	TaskRunning   = "running"
	TaskDone      = "done"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
)

// Task limits, enforced by the host on every enqueue. An operator may
// lower the attempts and the queue, never raise them past these.
const (
	// MaxTaskInputLen bounds a task's input: it is stored until the
	// task has run, and kept for a while after (a task is an argument,
	// not a payload; put large data in kv and pass its key).
	MaxTaskInputLen = 64 << 10
	// MaxTaskDelay bounds how far ahead a task may be scheduled
	// (delay, or at), in seconds: 30 days.
	MaxTaskDelay = 30 * 24 * 60 * 60
	// MaxTaskAttempts bounds max_attempts; DefaultTaskAttempts is what
	// an enqueue that names none gets.
	MaxTaskAttempts     = 25
	DefaultTaskAttempts = 3
	// MaxTaskKeyLen bounds an idempotency key.
	MaxTaskKeyLen = 256
	// MaxTaskResultLen bounds the result (the action's output) a task
	// keeps; a longer output is cut, and the cut is said in the error.
	MaxTaskResultLen = 64 << 10
	// MaxTaskErrorLen bounds the error message a task keeps.
	MaxTaskErrorLen = 4 << 10
)

// TaskEnqueueRequest enqueues one run of Action (an action of the calling
// module) with Input, as the calling principal. At most one of Delay and
// At may be set; neither runs it as soon as a runner is free. Delay is a
// duration in Go's syntax ("90s", "15m", "2h30m"), At an RFC 3339 time (a
// time already past runs at once); both at most MaxTaskDelay ahead.
// InputText is the input as text, for a caller that would otherwise write
// base64 by hand; give Input or InputText, not both. MaxAttempts is
// 1..MaxTaskAttempts (0: DefaultTaskAttempts). A non-empty
// Key makes the enqueue idempotent: while a task of the module and
// organization with that key is kept, enqueuing it again returns that
// task's id (Existing true) and enqueues nothing.
type TaskEnqueueRequest struct {
	Action      string `json:"action"`
	Input       []byte `json:"input,omitempty"`      // base64 in JSON
	InputText   string `json:"input_text,omitempty"` // the input as text, in place of Input
	Delay       string `json:"delay,omitempty"`
	At          string `json:"at,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	Key         string `json:"key,omitempty"`
}

// TaskEnqueueResponse names the task.
type TaskEnqueueResponse struct {
	ID       string `json:"id"`
	Existing bool   `json:"existing,omitempty"` // the key named a task enqueued before
}

// TaskIDRequest names a task of the calling module and organization, for
// task.status and task.cancel. Any other id, another organization's or
// module's included, is not_found.
type TaskIDRequest struct {
	ID string `json:"id"`
}

// TaskStatusResponse is a task's state. Result is the output of the run
// that succeeded (base64 in JSON); Error the last failure.
type TaskStatusResponse struct {
	State       string `json:"state"`
	Attempts    int    `json:"attempts"`
	MaxAttempts int    `json:"max_attempts"`
	Result      []byte `json:"result,omitempty"`
	Error       string `json:"error,omitempty"`
	Code        string `json:"code,omitempty"`   // the abi.Code of Error
	RunAt       string `json:"run_at,omitempty"` // RFC 3339: when a queued task runs next
}

// TaskCancelResponse says what a cancel did: Cancelled when the task was
// queued or running and is now cancelled (an attempt in flight is asked
// to stop, and whatever it returns is discarded); State is the task's
// state after the call either way.
type TaskCancelResponse struct {
	Cancelled bool   `json:"cancelled"`
	State     string `json:"state"`
}
