package moat

import (
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// TaskQueue enqueues background runs of this module's own actions and
// follows them. Use the package variable [Tasks]. A task runs later, on
// whichever host claims it, as the principal whose invocation enqueued
// it; failures are retried with backoff up to its MaxAttempts. The
// module needs the tasks capability (capabilities: {tasks: true}).
//
// A task runs at least once: a host that dies mid-run leaves it to be
// run again, so an action a task runs should be safe to repeat (an
// idempotency key on what it writes helps).
type TaskQueue struct{}

// Tasks is the module's task queue.
var Tasks TaskQueue

// TaskOptions tune an enqueue; the zero value runs the task as soon as
// a runner is free, with abi.DefaultTaskAttempts attempts.
type TaskOptions struct {
	// Delay runs the task this long from now (at most 30 days); At at
	// that time. Set at most one.
	Delay time.Duration
	At    time.Time
	// MaxAttempts is 1 to abi.MaxTaskAttempts (0: the default).
	MaxAttempts int
	// Key makes the enqueue idempotent: while a task of this module and
	// organization holds the key, Enqueue returns that task's id.
	Key string
}

// Enqueue queues a run of action with input and returns the task's id.
// existing is true when opts.Key named a task enqueued before (nothing
// new is queued).
func (TaskQueue) Enqueue(action string, input []byte, opts TaskOptions) (id string, existing bool, err error) {
	req := abi.TaskEnqueueRequest{Action: action, Input: input, MaxAttempts: opts.MaxAttempts, Key: opts.Key}
	if opts.Delay != 0 {
		req.Delay = opts.Delay.String()
	}
	if !opts.At.IsZero() {
		req.At = opts.At.UTC().Format(time.RFC3339Nano)
	}
	var resp abi.TaskEnqueueResponse
	if err := Call(abi.OpTaskEnqueue, req, &resp); err != nil {
		return "", false, err
	}
	return resp.ID, resp.Existing, nil
}

// Status returns the state of a task of this module: abi.TaskQueued,
// TaskRunning, TaskDone (Result holds the action's output), TaskFailed
// (Error holds the last failure) or TaskCancelled. An id of no task of
// this module and organization is an *abi.Error with abi.CodeNotFound.
func (TaskQueue) Status(id string) (*abi.TaskStatusResponse, error) {
	var resp abi.TaskStatusResponse
	if err := Call(abi.OpTaskStatus, abi.TaskIDRequest{ID: id}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Cancel cancels a queued or running task of this module and reports
// whether it did; a task that already finished is left as it is (its
// state is returned either way).
func (TaskQueue) Cancel(id string) (cancelled bool, state string, err error) {
	var resp abi.TaskCancelResponse
	if err := Call(abi.OpTaskCancel, abi.TaskIDRequest{ID: id}, &resp); err != nil {
		return false, "", err
	}
	return resp.Cancelled, resp.State, nil
}
