package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// Task is a durable background invocation of one of a module's actions,
// run later, by whichever process claims it, as the principal (User,
// Roles) whose invocation enqueued it and with that invocation's
// CorrelationID. Every task belongs to its Org and Module: the store
// applies that scope to every read and write, as it does for kv.
type Task struct {
	ID            string
	Org, Module   string
	Action        string
	Input         []byte
	User          string
	Roles         []string
	CorrelationID string
	Key           string // the idempotency key, "" for none
	Schedule      string // the schedule that enqueued it ("" for task.enqueue)
	State         string // abi.TaskQueued, TaskRunning, TaskDone, TaskFailed, TaskCancelled
	Attempts      int    // attempts started
	MaxAttempts   int
	RunAt         time.Time // when a queued task is due
	LeaseUntil    time.Time // while running: when the attempt's claim lapses
	// Claim is the token of the attempt in flight: set on the tasks
	// TaskClaim returns, and what TaskExtend, TaskSucceed, TaskFail and
	// TaskRelease check, so that an attempt whose claim was lost (the
	// task cancelled, or claimed again after its lease lapsed) cannot
	// overwrite the task.
	Claim      string
	Result     []byte // the output of the attempt that succeeded
	Error      string // the last failure
	Code       string // its abi.Code
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time // zero until done, failed or cancelled
	// Origin is where the task runs: "" for a module the store holds,
	// which any runner on the store (every replica) may load; any other
	// value names the one runner that has the module (moat run's
	// "run:DIR": a plugin loaded from a directory, which no server has).
	// A runner claims only its origin's tasks (TaskClaimOrigin), so a
	// task never lands on a runner that cannot run it.
	Origin string
}

// Finished reports whether the task reached a final state.
func (t *Task) Finished() bool {
	return t.State == abi.TaskDone || t.State == abi.TaskFailed || t.State == abi.TaskCancelled
}

// NewTask is what TaskEnqueue (and ScheduleFire) store.
type NewTask struct {
	Org, Module   string
	Action        string
	Input         []byte
	User          string
	Roles         []string
	CorrelationID string
	RunAt         time.Time // zero: now
	MaxAttempts   int       // 0: abi.DefaultTaskAttempts
	Key           string
	Origin        string // Task.Origin: "" for a module the store holds
}

// TaskFilter selects tasks for TaskList. Org "" is every organization:
// the operator's view (moat tasks); the server always passes the
// caller's. Module, State, ID and User (the user whose invocation
// enqueued the task) narrow it when set. Tasks come newest
// first; Before continues a listing after the last task of the previous
// page. Limit is DefaultTaskLimit when <= 0, at most MaxTaskLimit.
type TaskFilter struct {
	Org, Module, State, ID string
	User                   string
	Origin                 string // "" for every origin
	Before                 *Task
	Limit                  int
}

// Task list limits.
const (
	DefaultTaskLimit = 100
	MaxTaskLimit     = 1000
)

// DefaultMaxQueuedTasks is how many tasks an organization's module may
// have queued or running at once when the host sets no other bound.
const DefaultMaxQueuedTasks = 1000

// ErrTaskNotFound is the error (wrapped) for a task id that the scope
// does not hold: never there, pruned, or another organization's or
// module's. The three are one error on purpose: an id says nothing about
// tasks outside the caller's scope.
var ErrTaskNotFound = errors.New("task not found")

// ErrTaskClaimLost is the error (wrapped) of TaskExtend, TaskSucceed,
// TaskFail and TaskRelease for an attempt that no longer holds its task:
// it was cancelled, or its lease lapsed and another runner claimed it.
var ErrTaskClaimLost = errors.New("the task is no longer claimed by this attempt")

// taskIDRE is the shape of the ids NewTaskID makes. An id of any other
// shape is not found without a query.
var taskIDRE = regexp.MustCompile(`^t[0-9a-f]{28}$`)

// NewTaskID makes a task id: "t", 12 hex digits of milliseconds since
// the epoch (ids sort by creation), then 64 random bits.
func NewTaskID() string {
	var b [14]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	return "t" + hex.EncodeToString(b[:])
}

func newClaim() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var taskStates = []string{abi.TaskQueued, abi.TaskRunning, abi.TaskDone, abi.TaskFailed, abi.TaskCancelled}

// checkNewTask validates t and fills in its defaults; now is the
// enqueue's time.
func checkNewTask(t *NewTask, now time.Time) error {
	bad := func(format string, args ...any) error {
		return abi.Errorf(abi.CodeInvalidArgument, "task: "+format, args...)
	}
	if err := (Scope{Org: t.Org, Module: t.Module}).validate(); err != nil {
		return err
	}
	switch {
	case t.Action == "":
		return bad("action is empty; name one of the module's actions")
	case len(t.Action) > 64 || !validActionName(t.Action):
		return bad("action %q is not an action name (1-64 characters A-Z a-z 0-9 . _ - starting with a letter or digit)", clip(t.Action))
	case len(t.Input) > abi.MaxTaskInputLen:
		return abi.Errorf(abi.CodeTooLarge, "task: input is %d bytes; the limit is %d (put large data in kv and pass its key)", len(t.Input), abi.MaxTaskInputLen)
	case t.User == "" || len(t.User) > 128 || !utf8.ValidString(t.User):
		return bad("user %q is not a principal's user", clip(t.User))
	case t.MaxAttempts < 0 || t.MaxAttempts > abi.MaxTaskAttempts:
		return bad("max_attempts is %d; give 1 to %d (or leave it out for %d)", t.MaxAttempts, abi.MaxTaskAttempts, abi.DefaultTaskAttempts)
	case len(t.Key) > abi.MaxTaskKeyLen:
		return abi.Errorf(abi.CodeTooLarge, "task: key is %d bytes; the limit is %d", len(t.Key), abi.MaxTaskKeyLen)
	case !utf8.ValidString(t.Key) || strings.ContainsRune(t.Key, 0):
		return bad("key is not valid UTF-8 text without NUL")
	case !utf8.ValidString(t.CorrelationID) || len(t.CorrelationID) > 128:
		return bad("correlation id is not 0-128 bytes of UTF-8")
	case !utf8.ValidString(t.Origin) || len(t.Origin) > 4096 || strings.ContainsRune(t.Origin, 0):
		return bad("origin is not 0-4096 bytes of UTF-8 without NUL")
	}
	for i, r := range t.Roles {
		if r == "" || len(r) > 128 || !utf8.ValidString(r) {
			return bad("roles[%d] %q is not a role name", i, clip(r))
		}
	}
	if t.MaxAttempts == 0 {
		t.MaxAttempts = abi.DefaultTaskAttempts
	}
	if t.RunAt.IsZero() || t.RunAt.Before(now) {
		t.RunAt = now
	}
	if t.RunAt.Sub(now) > abi.MaxTaskDelay*time.Second {
		return bad("run at %s is more than %s ahead; the most is 30 days", t.RunAt.UTC().Format(time.RFC3339), t.RunAt.Sub(now).Round(time.Second))
	}
	return nil
}

// validActionName is the manifest's action alphabet.
func validActionName(s string) bool {
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')
		if !ok {
			return false
		}
	}
	return s != ""
}

// clip shortens a hostile value for an error message.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	cut := 80
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func (t *NewTask) row(now time.Time) (driver.TaskRow, error) {
	roles := t.Roles
	if roles == nil {
		roles = []string{}
	}
	rj, err := json.Marshal(roles)
	if err != nil {
		return driver.TaskRow{}, err
	}
	input := t.Input
	if input == nil {
		input = []byte{}
	}
	n := now.UnixNano()
	id := NewTaskID()
	corr := t.CorrelationID
	if corr == "" {
		corr = id // a task nobody's request started (a schedule's) is its own correlation
	}
	return driver.TaskRow{
		ID: id, Org: t.Org, Module: t.Module, Action: t.Action, Input: input, User: t.User, Roles: string(rj),
		CorrelationID: corr, Key: t.Key, State: abi.TaskQueued, MaxAttempts: t.MaxAttempts,
		RunAt: t.RunAt.UnixNano(), CreatedAt: n, UpdatedAt: n, Origin: t.Origin,
	}, nil
}

// TaskEnqueue stores a task to run t.Action of t.Module for t.Org as
// t.User. The fields are validated (an *abi.Error naming the field:
// invalid_argument, or too_large for the input and key); RunAt before now
// means now, and more than abi.MaxTaskDelay ahead is refused. With a Key,
// the enqueue is idempotent: while a task of the scope holds the key, its
// id comes back with existing true and nothing is stored. maxQueued (> 0;
// DefaultMaxQueuedTasks when 0) bounds the scope's queued and running
// tasks, atomically across processes: past it the refusal is an
// *abi.Error with abi.CodeTooLarge naming the bound.
func (s *Store) TaskEnqueue(ctx context.Context, t NewTask, maxQueued int) (id string, existing bool, err error) {
	tb, err := s.taskBackend()
	if err != nil {
		return "", false, err
	}
	now := time.Now().UTC()
	if err := checkNewTask(&t, now); err != nil {
		return "", false, err
	}
	row, err := t.row(now)
	if err != nil {
		return "", false, fmt.Errorf("store: task enqueue %s/%s: %w", t.Org, t.Module, err)
	}
	if maxQueued <= 0 {
		maxQueued = DefaultMaxQueuedTasks
	}
	id, existing, err = tb.TaskEnqueue(ctx, row, maxQueued)
	if errors.Is(err, driver.ErrOverQuota) {
		return "", false, overQueue(t.Org, t.Module, maxQueued)
	}
	if err != nil {
		return "", false, fmt.Errorf("store: task enqueue %s/%s: %w", t.Org, t.Module, err)
	}
	if !existing {
		s.wakeTasks()
	}
	return id, existing, nil
}

// TaskWake returns a channel that receives soon after a task is enqueued
// (or queued again by TaskRetry) through this *Store, so that a runner in
// this process starts it without waiting for its next poll. A wake is
// dropped while one is pending; tasks enqueued through other processes
// (replicas) are found by polling.
func (s *Store) TaskWake() <-chan struct{} { return s.taskWake }

func (s *Store) wakeTasks() {
	select {
	case s.taskWake <- struct{}{}:
	default:
	}
}

func overQueue(org, module string, maxQueued int) error {
	return abi.Errorf(abi.CodeTooLarge, "task: module %s of organization %s has %d tasks queued or running, its limit; "+
		"wait for some to finish (the operator sets the limit: tasks.max_queued)", module, org, maxQueued)
}

// TaskGet returns the task id of sc.Org, and of sc.Module unless it is
// empty (the organization's view, for the API). Any id the scope does not
// hold is ErrTaskNotFound (wrapped), whoever else holds it.
func (s *Store) TaskGet(ctx context.Context, sc Scope, id string) (*Task, error) {
	tb, err := s.taskBackend()
	if err != nil {
		return nil, err
	}
	if err := checkTaskScope(sc); err != nil {
		return nil, err
	}
	if !taskIDRE.MatchString(id) {
		return nil, taskNotFound(id)
	}
	row, err := tb.TaskGet(ctx, sc.Org, sc.Module, id)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, taskNotFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("store: task get %s in %s: %w", id, sc.Org, err)
	}
	return taskFromRow(row)
}

func checkTaskScope(sc Scope) error {
	if sc.Org == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "store: task: the organization is empty")
	}
	return nil
}

func taskNotFound(id string) error {
	return fmt.Errorf("%w: %s", ErrTaskNotFound, clip(id))
}

// TaskList returns the tasks f selects, newest first.
func (s *Store) TaskList(ctx context.Context, f TaskFilter) ([]Task, error) {
	tb, err := s.taskBackend()
	if err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultTaskLimit
	}
	df := driver.TaskFilter{Org: f.Org, Module: f.Module, State: f.State, ID: f.ID, User: f.User, Origin: f.Origin, Limit: min(limit, MaxTaskLimit)}
	if f.State != "" && !slices.Contains(taskStates, f.State) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "task list: state %q is not one of %s", clip(f.State), strings.Join(taskStates, ", "))
	}
	if f.Before != nil {
		df.BeforeCreated, df.BeforeID, df.HasBefore = f.Before.CreatedAt.UnixNano(), f.Before.ID, true
	}
	rows, err := tb.TaskList(ctx, df)
	if err != nil {
		return nil, fmt.Errorf("store: task list %s: %w", f.Org, err)
	}
	out := make([]Task, 0, len(rows))
	for i := range rows {
		t, err := taskFromRow(&rows[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *t)
	}
	return out, nil
}

// TaskCancel cancels the task id of sc (sc.Module "" for any module of
// sc.Org) when it is queued or running, and returns it as it is after
// the call: changed is false for a task that had already finished. A
// running attempt keeps running until its runner notices (its next
// lease extension), and its outcome is discarded.
func (s *Store) TaskCancel(ctx context.Context, sc Scope, id string) (t *Task, changed bool, err error) {
	tb, err := s.taskBackend()
	if err != nil {
		return nil, false, err
	}
	if err := checkTaskScope(sc); err != nil {
		return nil, false, err
	}
	if !taskIDRE.MatchString(id) {
		return nil, false, taskNotFound(id)
	}
	row, changed, err := tb.TaskCancel(ctx, sc.Org, sc.Module, id, time.Now().UnixNano())
	if errors.Is(err, driver.ErrNotFound) {
		return nil, false, taskNotFound(id)
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: task cancel %s in %s: %w", id, sc.Org, err)
	}
	t, err = taskFromRow(row)
	return t, changed, err
}

// TaskRetry queues a failed or cancelled task of org again, from its
// first attempt, to run now; changed is false for a task in another
// state (left as it is). It is the operator's (moat tasks retry), and
// not bound by the queue limit.
func (s *Store) TaskRetry(ctx context.Context, org, id string) (t *Task, changed bool, err error) {
	tb, err := s.taskBackend()
	if err != nil {
		return nil, false, err
	}
	if err := checkTaskScope(Scope{Org: org}); err != nil {
		return nil, false, err
	}
	if !taskIDRE.MatchString(id) {
		return nil, false, taskNotFound(id)
	}
	row, changed, err := tb.TaskRetry(ctx, org, id, time.Now().UnixNano())
	if errors.Is(err, driver.ErrNotFound) {
		return nil, false, taskNotFound(id)
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: task retry %s in %s: %w", id, org, err)
	}
	if changed {
		s.wakeTasks()
	}
	t, err = taskFromRow(row)
	return t, changed, err
}

// TaskClaim claims at most limit tasks that are due at now, for attempts
// that hold them until now+lease unless extended: queued tasks whose
// time has come, and running tasks whose lease lapsed (their runner
// died). A lapsed task with no attempt left is failed instead, with an
// error saying so. Each task is claimed by one caller at a time, across
// processes and replicas. It claims the tasks of the store's modules
// (Origin ""), as TaskClaimOrigin does for another origin.
func (s *Store) TaskClaim(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Task, error) {
	return s.TaskClaimOrigin(ctx, "", now, lease, limit)
}

// TaskClaimOrigin is TaskClaim for the tasks of origin alone (Task.Origin):
// a runner passes the origin whose modules it has, and never takes a
// task of a module it cannot run.
func (s *Store) TaskClaimOrigin(ctx context.Context, origin string, now time.Time, lease time.Duration, limit int) ([]Task, error) {
	tb, err := s.taskBackend()
	if err != nil {
		return nil, err
	}
	if limit <= 0 || lease <= 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "store: task claim: limit %d and lease %s must be more than 0", limit, lease)
	}
	n := now.UnixNano()
	rows, err := tb.TaskClaim(ctx, origin, n, now.Add(lease).UnixNano(), newClaim(), limit,
		"the runner of its last attempt stopped before it ended (its lease lapsed), and no attempt is left", string(abi.CodeUnavailable))
	if err != nil {
		return nil, fmt.Errorf("store: task claim: %w", err)
	}
	out := make([]Task, 0, len(rows))
	for i := range rows {
		t, err := taskFromRow(&rows[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *t)
	}
	return out, nil
}

// TaskExtend moves the lease of a claimed attempt to until.
func (s *Store) TaskExtend(ctx context.Context, t *Task, until time.Time) error {
	tb, err := s.taskBackend()
	if err != nil {
		return err
	}
	err = tb.TaskExtend(ctx, t.ID, t.Claim, until.UnixNano())
	if errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("store: task %s: %w", t.ID, ErrTaskClaimLost)
	}
	if err != nil {
		return fmt.Errorf("store: task extend %s: %w", t.ID, err)
	}
	t.LeaseUntil = until
	return nil
}

// TaskSucceed ends a claimed attempt as done with result (cut to
// abi.MaxTaskResultLen, and the cut said in Error).
func (s *Store) TaskSucceed(ctx context.Context, t *Task, result []byte) error {
	now := time.Now().UnixNano()
	u := driver.TaskUpdate{State: abi.TaskDone, Result: result, At: now, FinishedAt: now}
	if u.Result == nil {
		u.Result = []byte{}
	}
	if len(result) > abi.MaxTaskResultLen {
		u.Result = result[:abi.MaxTaskResultLen]
		u.Error = fmt.Sprintf("the result was %d bytes; the first %d are kept", len(result), abi.MaxTaskResultLen)
	}
	return s.finish(ctx, t, u)
}

// TaskFail ends a claimed attempt that failed with code and msg. When
// permanent, or when the attempt was the task's last, the task is failed
// with this error; otherwise it is queued again to run at retryAt (the
// runner's backoff). It reports whether the task is now failed.
func (s *Store) TaskFail(ctx context.Context, t *Task, code, msg string, permanent bool, retryAt time.Time) (final bool, err error) {
	now := time.Now()
	msg = strings.ToValidUTF8(strings.ReplaceAll(msg, "\x00", ""), "\uFFFD")
	if len(msg) > abi.MaxTaskErrorLen {
		msg = clipBytes(msg, abi.MaxTaskErrorLen)
	}
	u := driver.TaskUpdate{Error: msg, Code: code, At: now.UnixNano()}
	final = permanent || t.Attempts >= t.MaxAttempts
	if final {
		u.State, u.FinishedAt = abi.TaskFailed, now.UnixNano()
	} else {
		u.State, u.RunAt = abi.TaskQueued, retryAt.UnixNano()
	}
	return final, s.finish(ctx, t, u)
}

// TaskRelease gives back a claimed task that was not run (no capacity
// for its organization just now): queued again at runAt, its attempt
// not counted.
func (s *Store) TaskRelease(ctx context.Context, t *Task, runAt time.Time) error {
	return s.finish(ctx, t, driver.TaskUpdate{State: abi.TaskQueued, RunAt: runAt.UnixNano(), AttemptsDelta: -1,
		Error: t.Error, Code: t.Code, At: time.Now().UnixNano()})
}

func (s *Store) finish(ctx context.Context, t *Task, u driver.TaskUpdate) error {
	tb, err := s.taskBackend()
	if err != nil {
		return err
	}
	err = tb.TaskFinish(ctx, t.ID, t.Claim, u)
	if errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("store: task %s: %w", t.ID, ErrTaskClaimLost)
	}
	if err != nil {
		return fmt.Errorf("store: task %s: end the attempt: %w", t.ID, err)
	}
	return nil
}

// clipBytes cuts s to at most n bytes at a UTF-8 boundary.
func clipBytes(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// TaskRetention is how long a finished task is kept (and, with it, its
// idempotency key) before TaskPrune deletes it.
const TaskRetention = 7 * 24 * time.Hour

// TaskPrune deletes at most limit tasks that finished more than
// TaskRetention before now, and schedule ticks more than a day old (a
// tick that old can never fire again). It returns how many tasks it
// deleted.
func (s *Store) TaskPrune(ctx context.Context, now time.Time, limit int) (int, error) {
	tb, err := s.taskBackend()
	if err != nil {
		return 0, err
	}
	n, err := tb.TaskPrune(ctx, now.Add(-TaskRetention).UnixNano(), now.Add(-24*time.Hour).UnixNano(), limit)
	if err != nil {
		return 0, fmt.Errorf("store: task prune: %w", err)
	}
	return n, nil
}

// ScheduleFire fires one tick of a schedule: it records the tick for
// (t.Org, t.Module, schedule) and enqueues t, to run at once, in one
// transaction, unless the tick was fired already, by this process or
// another (fired false). Over the queue bound (maxQueued, as TaskEnqueue)
// the tick is recorded but no task is stored: the error is the
// over-queue *abi.Error.
func (s *Store) ScheduleFire(ctx context.Context, t NewTask, schedule string, tick time.Time, maxQueued int) (id string, fired bool, err error) {
	tb, err := s.taskBackend()
	if err != nil {
		return "", false, err
	}
	now := time.Now().UTC()
	t.Key, t.RunAt = "", time.Time{}
	if err := checkNewTask(&t, now); err != nil {
		return "", false, err
	}
	if schedule == "" || len(schedule) > 256 || !utf8.ValidString(schedule) {
		return "", false, abi.Errorf(abi.CodeInvalidArgument, "schedule: name %q is not 1-256 bytes of UTF-8", clip(schedule))
	}
	tn, ok := nanos(tick)
	if !ok {
		return "", false, abi.Errorf(abi.CodeInvalidArgument, "schedule: tick %s is out of range", tick)
	}
	row, err := t.row(now)
	if err != nil {
		return "", false, err
	}
	row.Schedule = schedule
	if maxQueued <= 0 {
		maxQueued = DefaultMaxQueuedTasks
	}
	fired, err = tb.ScheduleFire(ctx, row, schedule, tn, maxQueued)
	if errors.Is(err, driver.ErrOverQuota) {
		return "", true, overQueue(t.Org, t.Module, maxQueued)
	}
	if err != nil {
		return "", false, fmt.Errorf("store: schedule %s of %s/%s: %w", schedule, t.Org, t.Module, err)
	}
	if !fired {
		return "", false, nil
	}
	s.wakeTasks()
	return row.ID, true, nil
}

func taskFromRow(r *driver.TaskRow) (*Task, error) {
	t := &Task{
		ID: r.ID, Org: r.Org, Module: r.Module, Action: r.Action, Input: r.Input, User: r.User,
		CorrelationID: r.CorrelationID, Key: r.Key, Schedule: r.Schedule, State: r.State, Attempts: r.Attempts,
		MaxAttempts: r.MaxAttempts, RunAt: fromNanos(r.RunAt), Claim: r.Claim, Result: r.Result, Error: r.Error, Code: r.Code,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt), Origin: r.Origin,
	}
	if r.LeaseUntil != 0 {
		t.LeaseUntil = fromNanos(r.LeaseUntil)
	}
	if r.FinishedAt != 0 {
		t.FinishedAt = fromNanos(r.FinishedAt)
	}
	if t.Input == nil {
		t.Input = []byte{}
	}
	if err := json.Unmarshal([]byte(r.Roles), &t.Roles); err != nil {
		return nil, fmt.Errorf("store: task %s: roles %q are not a JSON list: %w", r.ID, clip(r.Roles), err)
	}
	return t, nil
}

// TaskStats is what the task queue holds at now, for the operator's
// metrics: tasks by state (queued, running, done, failed, cancelled;
// finished ones until TaskPrune removes them) and how long the oldest due
// queued task has waited (0 when none waits). ok is false on a backend
// without driver.TaskStatser.
func (s *Store) TaskStats(ctx context.Context, now time.Time) (byState map[string]int64, oldestWait time.Duration, ok bool, err error) {
	ts, ok := s.b.(driver.TaskStatser)
	if !ok {
		return nil, 0, false, nil
	}
	by, oldest, err := ts.TaskStats(ctx, now.UnixNano())
	if err != nil {
		return nil, 0, true, fmt.Errorf("store: task stats: %w", err)
	}
	if oldest > 0 {
		oldestWait = max(0, time.Duration(now.UnixNano()-oldest))
	}
	return by, oldestWait, true, nil
}
