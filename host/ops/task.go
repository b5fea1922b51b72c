package ops

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// The task family: durable background runs of the calling module's own
// actions. Everything that scopes a task comes from Env, never from the
// request: the organization and module it belongs to, the principal it
// will run as (the caller), the correlation id it carries. A guest can
// name only an action of its own module, and only ids of its own
// organization's and module's tasks: any other id is not_found, the
// error of an id that was never there.

func init() {
	RegisterFamily(Family{
		Name: "tasks", Capability: policy.CapabilitySpec{Name: "tasks"},
		Config: func() any { return &TasksConfig{} },
		Provision: func(_ *ProvisionContext, cfg any) (any, error) {
			return cfg, nil // read-only once provisioned
		},
		Attach: func(ctx *AttachContext, _ any) (any, error) {
			return moduleTasks(ctx.Module), nil
		},
		Ops: []Op{
			{Name: abi.OpTaskEnqueue, Func: Typed(taskEnqueue), Mutates: true},
			{Name: abi.OpTaskStatus, Func: Typed(taskStatus)},
			{Name: abi.OpTaskCancel, Func: Typed(taskCancel), Mutates: true},
		},
	})
}

// TasksConfig configures the task family (host.Config.Families["tasks"],
// and the family's key of the tasks: section of moat-server.yaml, which
// the server's TasksConfig holds inline beside its runner's).
type TasksConfig struct {
	// MaxQueued bounds the tasks queued or running per organization and
	// module; an enqueue past it is refused (too_large). 0:
	// store.DefaultMaxQueuedTasks (1000).
	MaxQueued int `yaml:"max_queued"`
	// Origin is where the tasks the host's modules enqueue run, recorded
	// on each (store.Task.Origin): "" (moat serve) for modules the store
	// holds, which any runner on the store may load; another value for
	// modules only this process has (moat run: "run:" and the plugin's
	// directory), whose tasks only a tasks.Runner (host/tasks) with that Origin claims,
	// never a server sharing the store.
	Origin string `yaml:"-"`
}

// tasksOf is the task family's configuration for env's host (the
// defaults for an Env made by hand).
func tasksOf(env *Env) *TasksConfig {
	if c, ok := ServiceOf[*TasksConfig](env, "tasks"); ok {
		return c
	}
	return &TasksConfig{}
}

// ModuleTasks is the task family's view of one module (its Attach).
// Without one (an Env made by hand) task.* answer unavailable.
type ModuleTasks struct {
	// CheckAction refuses, with an *abi.Error for the guest, an action a
	// task of this module may not run: one the module does not have, or
	// one that needs a confirmation no background run can give.
	CheckAction func(action string) error
}

// moduleTasks is m's view: the actions its callers name (read at each
// enqueue: a module without a manifest has them once its runtime has
// started), less those its manifest says need a confirmation.
func moduleTasks(m ModuleInfo) *ModuleTasks {
	return &ModuleTasks{CheckAction: func(action string) error {
		actions := m.Actions()
		if !slices.Contains(actions, action) {
			return abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: module %s has no action %q; its actions are: %s",
				m.Name, clipText(action), strings.Join(actions, ", "))
		}
		if a, ok := m.Manifest.Action(action); ok && a.Confirm {
			return abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: action %s needs confirmation (confirm: true), which a background task cannot give", action)
		}
		return nil
	}}
}

func taskEnqueue(env *Env, req *abi.TaskEnqueueRequest) (*abi.TaskEnqueueResponse, error) {
	tc, ok := ViewOf[*ModuleTasks](env, "tasks")
	if !ok {
		return nil, abi.Errorf(abi.CodeUnavailable, "task.enqueue: this host runs no background tasks")
	}
	if err := tc.CheckAction(req.Action); err != nil {
		return nil, err
	}
	input := req.Input
	if req.InputText != "" {
		if len(req.Input) > 0 {
			return nil, abi.Errorf(abi.CodeInvalidArgument, `task.enqueue: give "input" (base64 bytes) or "input_text" (text), not both`)
		}
		input = []byte(req.InputText)
	}
	runAt, err := taskRunAt(req, time.Now())
	if err != nil {
		return nil, err
	}
	if req.MaxAttempts < 0 || req.MaxAttempts > abi.MaxTaskAttempts {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: max_attempts is %d; give 1 to %d (or leave it out for %d)",
			req.MaxAttempts, abi.MaxTaskAttempts, abi.DefaultTaskAttempts)
	}
	p, fam := env.Principal, tasksOf(env)
	id, existing, err := env.Store.TaskEnqueue(env.Context, store.NewTask{
		Org: p.Org, Module: env.Module, Action: req.Action, Input: input, User: p.User, Roles: p.Roles,
		CorrelationID: env.CorrelationID, RunAt: runAt, MaxAttempts: req.MaxAttempts, Key: req.Key, Origin: fam.Origin,
	}, fam.MaxQueued)
	if err != nil {
		return nil, storeError(env, abi.OpTaskEnqueue, err)
	}
	return &abi.TaskEnqueueResponse{ID: id, Existing: existing}, nil
}

// taskRunAt reads when a task should run from its delay or at.
func taskRunAt(req *abi.TaskEnqueueRequest, now time.Time) (time.Time, error) {
	const most = abi.MaxTaskDelay * time.Second
	switch {
	case req.Delay != "" && req.At != "":
		return time.Time{}, abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: give delay or at, not both")
	case req.Delay != "":
		d, err := time.ParseDuration(req.Delay)
		if err != nil {
			return time.Time{}, abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: delay %q is not a duration; write it like 90s, 15m or 2h30m", clipText(req.Delay))
		}
		if d < 0 || d > most {
			return time.Time{}, abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: delay %s is outside 0 to 720h (30 days)", d)
		}
		return now.Add(d), nil
	case req.At != "":
		t, err := time.Parse(time.RFC3339Nano, req.At)
		if err != nil {
			return time.Time{}, abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: at %q is not an RFC 3339 time; write it like 2026-01-02T15:04:05Z", clipText(req.At))
		}
		if t.Sub(now) > most {
			return time.Time{}, abi.Errorf(abi.CodeInvalidArgument, "task.enqueue: at %s is more than 30 days ahead", t.UTC().Format(time.RFC3339))
		}
		return t, nil
	}
	return time.Time{}, nil
}

// clipText shortens what a guest sent for an error message.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// taskError maps the store's not-found to the guest's not_found, with
// one message whoever holds the id.
func taskError(env *Env, op, id string, err error) error {
	if errors.Is(err, store.ErrTaskNotFound) {
		return abi.Errorf(abi.CodeNotFound, "%s: no task %q in this module", op, clipText(id))
	}
	return storeError(env, op, err)
}

func taskStatus(env *Env, req *abi.TaskIDRequest) (*abi.TaskStatusResponse, error) {
	t, err := env.Store.TaskGet(env.Context, env.Scope(), req.ID)
	if err != nil {
		return nil, taskError(env, abi.OpTaskStatus, req.ID, err)
	}
	resp := &abi.TaskStatusResponse{State: t.State, Attempts: t.Attempts, MaxAttempts: t.MaxAttempts, Result: t.Result,
		Error: t.Error, Code: t.Code}
	if t.State == abi.TaskQueued {
		resp.RunAt = t.RunAt.Format(time.RFC3339Nano)
	}
	if len(resp.Result) == 0 {
		resp.Result = nil
	}
	return resp, nil
}

func taskCancel(env *Env, req *abi.TaskIDRequest) (*abi.TaskCancelResponse, error) {
	t, changed, err := env.Store.TaskCancel(env.Context, env.Scope(), req.ID)
	if err != nil {
		return nil, taskError(env, abi.OpTaskCancel, req.ID, err)
	}
	return &abi.TaskCancelResponse{Cancelled: changed, State: t.State}, nil
}
