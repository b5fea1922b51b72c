package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/tasks"
	"github.com/moat-sandbox/moat/policy"
)

// TasksConfig configures the background tasks `moat serve` runs.
type TasksConfig struct {
	// The task family's key (ops.TasksConfig): max_queued, default
	// store.DefaultMaxQueuedTasks (1000), from 1 to 1000000.
	ops.TasksConfig `yaml:",inline"`
	// Concurrency bounds the tasks this replica runs at once. Each also
	// takes an invocation slot of its organization (admission.*), so
	// tasks never hold more than HTTP invocations may, and an
	// organization's tasks wait behind its own requests, not others'.
	// Default max(1, admission.max_invocations/2): half the server's
	// invocations at most, the rest always left to requests.
	Concurrency int `yaml:"concurrency"`
}

func (c *TasksConfig) fillDefaults() {
	if c.MaxQueued == 0 {
		c.MaxQueued = store.DefaultMaxQueuedTasks
	}
}

// concurrency is Concurrency, or its default.
func (c *TasksConfig) concurrency(maxInvocations int) int {
	if c.Concurrency > 0 {
		return c.Concurrency
	}
	return max(1, maxInvocations/2)
}

func (c *TasksConfig) validate(fail failFunc, maxInvocations int) error {
	if n := c.MaxQueued; n < 1 || n > 1_000_000 {
		return fail("tasks.max_queued", "%d is outside 1..1000000; remove the line for the default %d", n, store.DefaultMaxQueuedTasks)
	}
	if n := c.Concurrency; n < 0 || n > maxInvocations {
		return fail("tasks.concurrency", "%d is outside 1..%d (admission.max_invocations): tasks take invocation slots; remove the line for half of it", n, maxInvocations)
	}
	return nil
}

// startTasks starts the task runner of the server: it runs until Close.
func (s *Server) startTasks() error {
	r, err := tasks.New(tasks.Config{
		Store:       s.store,
		Resolve:     s.resolveTaskModule,
		Scheduled:   s.modules.scheduled,
		Admit:       s.admitTask,
		Authorize:   s.authorizeTask,
		Concurrency: s.cfg.Tasks.concurrency(s.cfg.Admission.MaxInvocations),
		MaxQueued:   s.cfg.Tasks.MaxQueued,
		Logger:      s.log,
	})
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stopTasks, s.tasksDone = stop, make(chan struct{})
	go func() {
		defer close(s.tasksDone)
		if err := r.Run(ctx); err != nil {
			s.log.Error("task runner stopped", "err", err)
		}
	}()
	return nil
}

// resolveTaskModule is the module a task runs on: the current version,
// loaded on demand when the store holds it and this replica has not
// loaded it yet (registry.ensure), or ErrModuleGone when the store holds
// no version of it.
func (s *Server) resolveTaskModule(ctx context.Context, org, name string) (*host.Module, error) {
	e, err := s.modules.ensure(ctx, org, name)
	var fe *loadFailedError
	if errors.As(err, &fe) {
		// The task's error is read by the organization's users: the
		// reason (which may describe the operator's profile) stays in
		// the log.
		s.log.Error("task's module stored but not loadable on this replica", "org", org, "module", name, "digest", fe.v.Digest, "err", fe.err)
		return nil, errors.New("stored but does not load on this replica; the server log has the reason")
	}
	if err != nil {
		return nil, err // the runner names the module
	}
	if e == nil {
		return nil, fmt.Errorf("%w: module %s of organization %s", tasks.ErrModuleGone, name, org)
	}
	return e.mod, nil
}

// authorizeTask ties a task to the API keys of its user: it runs only
// while its user holds a key of its organization, not revoked, with every
// role the task was enqueued with. Revoking a user's keys (or the one
// with the roles) thus stops the tasks its invocations queued, on every
// replica, at their next attempt; a task its user could enqueue again
// through another key of the same roles still runs. A schedule's ticks
// run as the organization's service principal (policy.ServiceUser), held
// by no key, and are not tied to one.
func (s *Server) authorizeTask(ctx context.Context, t *store.Task) error {
	if t.User == policy.ServiceUser {
		return nil
	}
	keys, err := s.store.APIKeys(ctx, t.Org)
	if err != nil {
		return err
	}
	var revoked []string
	for _, k := range keys {
		if k.User != t.User {
			continue
		}
		if !k.RevokedAt.IsZero() {
			revoked = append(revoked, k.ID)
			continue
		}
		if holdsAll(k.Roles, t.Roles) {
			return nil
		}
	}
	why := "holds no API key"
	if len(revoked) > 0 {
		why = fmt.Sprintf("holds no API key that is not revoked (revoked: %s)", strings.Join(revoked, ", "))
	}
	return fmt.Errorf("%w: user %s of organization %s %s with the roles %v the task was enqueued with; "+
		"a task runs only while its user could start it again (create a key: `moat keys create --org %s --user %s`, then enqueue it anew)",
		tasks.ErrUnauthorized, t.User, t.Org, why, orEmpty(t.Roles), t.Org, t.User)
}

// holdsAll says whether have holds every role of want.
func holdsAll(have, want []string) bool {
	for _, r := range want {
		if !slices.Contains(have, r) {
			return false
		}
	}
	return true
}

// admitTask takes an invocation slot of org for a task, as an HTTP
// invocation would.
func (s *Server) admitTask(ctx context.Context, org string) (func(), error) {
	release, refusal := s.invocations.acquire(ctx, org)
	if refusal != nil {
		return nil, fmt.Errorf("no invocation slot for organization %s within %s", org, s.cfg.Admission.Wait)
	}
	return release, nil
}

// scheduled lists the loaded modules whose manifests declare schedules.
func (r *registry) scheduled() []tasks.ScheduledModule {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []tasks.ScheduledModule
	for k, e := range r.loaded {
		if mf := e.mod.Manifest(); mf != nil && len(mf.Schedules) > 0 {
			out = append(out, tasks.ScheduledModule{Org: k.org, Module: e.mod})
		}
	}
	return out
}

// TaskJSON is a background task in responses, and in `moat tasks --json`
// (TaskJSONOf): one naming of its fields for the CLI and the HTTP API.
type TaskJSON struct {
	ID            string     `json:"id"`
	Org           string     `json:"org"`
	Module        string     `json:"module"`
	Action        string     `json:"action"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	MaxAttempts   int        `json:"max_attempts"`
	User          string     `json:"user"`
	Roles         []string   `json:"roles"`
	CorrelationID string     `json:"correlation_id,omitempty"`
	Key           string     `json:"key,omitempty"`
	Schedule      string     `json:"schedule,omitempty"`
	Input         []byte     `json:"input,omitempty"`
	Result        []byte     `json:"result,omitempty"`
	Error         string     `json:"error,omitempty"`
	Code          string     `json:"code,omitempty"`
	RunAt         time.Time  `json:"run_at"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}

// TaskJSONOf is t as the API answers it: never the claim token of an
// attempt in flight.
func TaskJSONOf(t *store.Task) TaskJSON {
	j := TaskJSON{ID: t.ID, Org: t.Org, Module: t.Module, Action: t.Action, State: t.State, Attempts: t.Attempts, MaxAttempts: t.MaxAttempts,
		User: t.User, Roles: t.Roles, CorrelationID: t.CorrelationID, Key: t.Key, Schedule: t.Schedule, Input: t.Input,
		Result: t.Result, Error: t.Error, Code: t.Code, RunAt: t.RunAt, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
	if !t.FinishedAt.IsZero() {
		f := t.FinishedAt
		j.FinishedAt = &f
	}
	if j.Roles == nil {
		j.Roles = []string{}
	}
	return j
}

// PermTasksRead reads every task of the organization (GET /v1/tasks):
// their inputs and results are what other users' invocations handed in
// and got out. Without it a caller sees the tasks its own user's
// invocations enqueued, and no other. Held as the module permissions are
// (mayManage): by default, the role admin.
const PermTasksRead = "tasks.read"

// PermAuditRead reads the organization's audit trail (GET /v1/audit).
const PermAuditRead = "audit.read"

// taskScope is the user whose tasks the caller may read: "" (any user of
// its organization) when it holds PermTasksRead, its own otherwise.
func (s *Server) taskScope(c echo.Context) string {
	p := principalOf(c)
	if ok, _, _ := s.holds(p, PermTasksRead); ok {
		return ""
	}
	return p.User
}

// listTasks returns the caller's organization's tasks (the caller's
// user's only, without PermTasksRead), newest first, filtered by module
// and state; before (a task id it may read) continues a listing after
// that task.
func (s *Server) listTasks(c echo.Context) error {
	p := principalOf(c)
	q := c.QueryParams()
	f := store.TaskFilter{Org: p.Org, Module: q.Get("module"), State: q.Get("state"), User: s.taskScope(c)}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxTaskLimit {
			return problem(http.StatusBadRequest, "invalid_argument", "limit=%q: give a number from 1 to %d", v, store.MaxTaskLimit)
		}
		f.Limit = n
	}
	ctx := c.Request().Context()
	if v := q.Get("before"); v != "" {
		t, err := s.store.TaskGet(ctx, store.Scope{Org: p.Org}, v)
		if err == nil && f.User != "" && t.User != f.User {
			err = store.ErrTaskNotFound
		}
		if errors.Is(err, store.ErrTaskNotFound) {
			return problem(http.StatusBadRequest, "invalid_argument", "before=%q is no task of organization %s", clip(v), p.Org)
		}
		if err != nil {
			return err
		}
		f.Before = t
	}
	tasks, err := s.store.TaskList(ctx, f)
	if err != nil {
		return fromHostError(err)
	}
	out := make([]TaskJSON, len(tasks))
	for i := range tasks {
		out[i] = TaskJSONOf(&tasks[i])
	}
	return c.JSON(http.StatusOK, map[string]any{"tasks": out})
}

// getTask returns one task of the caller's organization (of the
// caller's user, without PermTasksRead). Any other id, another
// organization's or user's included, is the same 404.
func (s *Server) getTask(c echo.Context) error {
	p := principalOf(c)
	id := c.Param("id")
	t, err := s.store.TaskGet(c.Request().Context(), store.Scope{Org: p.Org}, id)
	if user := s.taskScope(c); err == nil && user != "" && t.User != user {
		err = store.ErrTaskNotFound
	}
	if errors.Is(err, store.ErrTaskNotFound) {
		return problem(http.StatusNotFound, "not_found", "no task %q in organization %s", clip(id), p.Org)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, TaskJSONOf(t))
}

// clip shortens a client's value for a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
