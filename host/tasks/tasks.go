// Package tasks runs background tasks: a module's invocation enqueues a
// run of one of its own actions (task.enqueue), or a schedule in its
// manifest does at each tick; a Runner claims due tasks from the store and
// invokes each on the module's current version, as the principal who
// enqueued it, with the correlation id of the invocation that did. Every
// audit event of that invocation carries the task's id (audit.WithTask),
// so one query by correlation id shows an action, the tasks it started,
// and what they changed.
//
// Why a package of its own: the runner is a client of host.Module (it
// resolves a module, checks its grants and calls Module.Invoke), not part
// of how a module runs, and host does not import it. moat serve and
// `moat run --wait` start one; an embedder that wants tasks does too.
package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/tracing"
	"github.com/moat-sandbox/moat/policy"
	"go.opentelemetry.io/otel/trace"
)

// ErrModuleGone is what a Config.Resolve returns (wrapped) for
// a module that no longer exists: its tasks fail at once, saying so.
var ErrModuleGone = errors.New("the module was deleted")

// ErrUnauthorized is what a Config.Authorize returns
// (wrapped) for a task whose principal may no longer run it.
var ErrUnauthorized = errors.New("the task's principal may no longer run it")

// Config configures a Runner. Store and Resolve are
// required.
type Config struct {
	Store *store.Store
	// Origin is the origin whose tasks the runner claims (store.Task.Origin,
	// ops.TasksConfig.Origin of the hosts whose modules enqueue them): "" for
	// the modules the store holds (moat serve; every replica may load
	// them), or the one origin of modules only this process has (moat run
	// --wait). A runner never claims a task of another origin: it could
	// not run its module.
	Origin string
	// Resolve returns the module that a task of org's module named name
	// runs on: its current version, whose grants and limits apply to
	// the run. An error wrapping ErrModuleGone fails the task at once;
	// any other error (a replica that has not loaded the module yet) is
	// a failed attempt with code unavailable, retried after its backoff.
	Resolve func(ctx context.Context, org, name string) (*host.Module, error)
	// Scheduled lists the modules whose manifests' schedules fire here,
	// each with the organization it belongs to (nil: none). Every
	// replica may list the same ones: each tick fires once across them.
	Scheduled func() []ScheduledModule
	// Admit, when set, takes a slot for an invocation of org before a
	// task runs, as HTTP invocations take theirs (moat serve passes its
	// admission), so tasks and requests share one bound per organization
	// and in all. An error puts the task back, its attempt not counted.
	Admit func(ctx context.Context, org string) (release func(), err error)
	// Authorize, when set, says whether t may still run as its principal
	// (moat serve: whether its user still holds an API key with its
	// roles). An error wrapping ErrUnauthorized fails the task at
	// once with code denied and its reason audited; any other error is a
	// failed attempt with code unavailable, retried after its backoff.
	Authorize func(ctx context.Context, t *store.Task) error
	// Concurrency bounds the tasks this runner runs at once. Default
	// max(1, GOMAXPROCS/2).
	Concurrency int
	// Lease is how long a claim holds a task without news from its
	// runner; a runner extends it every Lease/3 while the attempt runs,
	// so only a runner that died (or lost the database) lets it lapse,
	// and then another claims the task again. Default 30s.
	Lease time.Duration
	// Poll is how often the runner looks for due tasks when nothing
	// woke it: tasks enqueued through this process's store wake it at
	// once; those of other replicas, and delayed ones, wait for a poll.
	// Default 1s.
	Poll time.Duration
	// Backoff is the wait before attempt n+1 after attempt n failed.
	// Default: 2s doubled per attempt, at most an hour, ±25% jitter.
	Backoff func(attempt int) time.Duration
	// ScheduleGrace is how late a tick may still fire: a tick missed for
	// longer (every replica down) is skipped, not caught up. Default 1m.
	ScheduleGrace time.Duration
	// MaxQueued bounds a module's queue for schedules' ticks
	// (store.DefaultMaxQueuedTasks when 0).
	MaxQueued int
	Logger    *slog.Logger
	// OnStart, when set, is called as each attempt starts, once the
	// module is resolved and admission granted (for metrics and
	// benchmarks: the time from a task's RunAt to here is its wait).
	OnStart func(t *store.Task)
}

// ScheduledModule is a module whose schedules fire for Org.
type ScheduledModule struct {
	Org    string
	Module *host.Module
}

// Runner runs the tasks of a store. Create it with New and
// run it with Run; several runners, in one process or on replicas
// sharing a PostgreSQL database, share the queue: each task is claimed by
// one at a time.
type Runner struct {
	cfg Config
	log *slog.Logger

	lastTick map[string]time.Time // schedule key → last tick attempted
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Runner, error) {
	if cfg.Store == nil || cfg.Resolve == nil {
		return nil, errors.New("tasks: runner: Store and Resolve are required")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.ScheduleGrace <= 0 {
		cfg.ScheduleGrace = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Runner{cfg: cfg, log: cfg.Logger, lastTick: map[string]time.Time{}}, nil
}

// DefaultBackoff waits 2s after the first failed attempt, doubling
// per attempt up to an hour, within ±25% so that tasks failing together
// do not retry together.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Hour
	if attempt < 12 {
		d = min(time.Hour, 2*time.Second<<max(attempt-1, 0))
	}
	return time.Duration(float64(d) * (0.75 + rand.Float64()/2))
}

// pruneEvery is how often a runner deletes old finished tasks and ticks;
// pruneBatch bounds one pass.
const (
	pruneEvery = 10 * time.Minute
	pruneBatch = 1000
)

// Run claims and runs due tasks, and fires schedules, until ctx ends;
// then it stops the attempts in flight, gives their tasks back (their
// attempts not counted, to run again here after a restart or on another
// replica) and returns.
func (r *Runner) Run(ctx context.Context) error {
	st := r.cfg.Store
	wake := st.TaskWake()
	done := make(chan struct{}, r.cfg.Concurrency)
	running := 0
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	nextPrune := time.Now()
	failing := false // the last claim failed: log the next failure only after a success
	for {
		now := time.Now()
		if r.cfg.Scheduled != nil {
			r.fireSchedules(ctx, now)
		}
		if !now.Before(nextPrune) {
			if n, err := st.TaskPrune(ctx, now, pruneBatch); err != nil {
				r.log.Warn("tasks: prune", "err", err)
			} else if n > 0 {
				r.log.Debug("tasks: pruned finished tasks", "count", n)
			}
			nextPrune = now.Add(pruneEvery)
		}
		if free := r.cfg.Concurrency - running; free > 0 && ctx.Err() == nil {
			tasks, err := st.TaskClaimOrigin(ctx, r.cfg.Origin, now, r.cfg.Lease, free)
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				r.log.Error("tasks: claim", "err", err)
				failing = true
			case err == nil:
				failing = false
			}
			for _, t := range tasks {
				running++
				wg.Add(1)
				go func() {
					defer wg.Done()
					r.run(ctx, t)
					done <- struct{}{}
				}()
			}
		}
		timer.Reset(r.cfg.Poll)
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-done:
			running--
		case <-timer.C:
		}
		for drained := false; !drained; {
			select {
			case <-done:
				running--
			default:
				drained = true
			}
		}
	}
}

// permanentCodes are the failures no retry can fix: the task fails at
// once with them.
var permanentCodes = map[abi.Code]bool{
	abi.CodeNoSuchAction: true, abi.CodeDenied: true, abi.CodeConfirmationRequired: true, abi.CodeInputTooLarge: true,
	abi.CodeInvalidArgument: true, abi.CodeBadModule: true, abi.CodeABIVersion: true,
}

// run runs one claimed attempt of t.
func (r *Runner) run(ctx context.Context, t store.Task) {
	st := r.cfg.Store
	log := r.log.With("task", t.ID, "org", t.Org, "module", t.Module, "action", t.Action, "attempt", t.Attempts)
	if tracing.On() {
		// The attempt's span: a root of its own (the request that
		// enqueued the task ended long ago), tied to it by the
		// correlation id every span of the attempt carries. The
		// invocation's span and its ops' are its children.
		ctx = tracing.WithCorrelation(ctx, t.CorrelationID)
		var span trace.Span
		ctx, span = tracing.Start(ctx, "moat.task.attempt", trace.SpanKindConsumer, tracing.KeyTaskID.String(t.ID),
			tracing.KeyAttempt.Int(t.Attempts), tracing.KeyModule.String(t.Module), tracing.KeyAction.String(t.Action), tracing.KeyOrg.String(t.Org))
		defer span.End()
	}
	// The attempt's own context: ended when the runner stops, or when
	// the task is no longer ours (cancelled, or its lease lost).
	actx, stop := context.WithCancel(ctx)
	defer stop()
	var lostClaim atomic.Bool
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		tick := time.NewTicker(r.cfg.Lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-actx.Done():
				return
			case <-tick.C:
				if err := st.TaskExtend(actx, &t, time.Now().Add(r.cfg.Lease)); errors.Is(err, store.ErrTaskClaimLost) {
					lostClaim.Store(true)
					stop()
					return
				} else if err != nil && actx.Err() == nil {
					log.Warn("tasks: extend the lease", "err", err)
				}
			}
		}
	}()
	defer func() { stop(); <-beat }()

	// giveBack puts the task back without counting the attempt.
	giveBack := func(after time.Duration, why string) {
		bctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := st.TaskRelease(bctx, &t, time.Now().Add(after)); err != nil && !errors.Is(err, store.ErrTaskClaimLost) {
			log.Warn("tasks: give the task back", "why", why, "err", err)
		}
	}
	m, err := r.cfg.Resolve(actx, t.Org, t.Module)
	if err != nil || m == nil {
		if errors.Is(err, ErrModuleGone) {
			r.fail(actx, log, nil, &t, abi.CodeNotFound, fmt.Sprintf("module %s of organization %s is not in the store (deleted, or never uploaded there): the task cannot run", t.Module, t.Org), true)
			return
		}
		// Not loaded here (yet: a replica follows uploads within a
		// second; or at all: it no longer loads under the profile). An
		// attempt is spent, so a module that never loads fails its tasks
		// after their attempts instead of bouncing them forever.
		why := "is not loaded on this host"
		if err != nil {
			why = err.Error()
		}
		r.fail(actx, log, nil, &t, abi.CodeUnavailable, fmt.Sprintf("module %s of organization %s: %s", t.Module, t.Org, why), false)
		return
	}
	if ev := m.Evaluation(); ev == nil || !ev.Effective.Tasks {
		r.fail(actx, log, m, &t, abi.CodeDenied, fmt.Sprintf("module %s is no longer granted tasks by profile %s: its tasks do not run", t.Module, ev.Profile), true)
		return
	}
	if r.cfg.Authorize != nil {
		if err := r.cfg.Authorize(actx, &t); errors.Is(err, ErrUnauthorized) {
			r.fail(actx, log, m, &t, abi.CodeDenied, err.Error(), true)
			return
		} else if err != nil {
			r.fail(actx, log, m, &t, abi.CodeUnavailable, "checking the task's principal: "+err.Error(), false)
			return
		}
	}
	if r.cfg.Admit != nil {
		release, err := r.cfg.Admit(actx, t.Org)
		if err != nil {
			giveBack(time.Second, "no capacity")
			return
		}
		defer release()
	}
	if r.cfg.OnStart != nil {
		r.cfg.OnStart(&t)
	}
	principal := policy.Principal{User: t.User, Org: t.Org, Roles: t.Roles}
	res, err := m.Invoke(audit.WithTask(actx, t.ID), host.Request{Action: t.Action, Input: t.Input, Principal: principal, CorrelationID: t.CorrelationID})
	if tracing.On() {
		code := "ok"
		if err != nil {
			code = string(abi.CodeOf(err))
		}
		trace.SpanFromContext(ctx).SetAttributes(tracing.KeyCode.String(code))
	}
	if lostClaim.Load() {
		log.Info("tasks: the task was cancelled or claimed by another runner during its attempt; its outcome is discarded")
		return
	}
	if err != nil && ctx.Err() != nil {
		giveBack(0, "the runner is stopping")
		return
	}
	if abi.CodeOf(err) == abi.CodeRateLimited {
		// The module's calls per minute are used up: the task waits for
		// them like a caller would, without spending an attempt.
		giveBack(5*time.Second, "rate limited")
		return
	}
	if err == nil {
		if err := st.TaskSucceed(context.Background(), &t, res.Output); err != nil {
			log.Warn("tasks: record the success", "err", err)
		}
		return
	}
	code := abi.CodeOf(err)
	if code == "" {
		code = abi.CodeInternal
	}
	r.fail(actx, log, m, &t, code, err.Error(), permanentCodes[code])
}

// fail ends t's attempt as failed and audits what follows: a retry, or
// the task's failure.
func (r *Runner) fail(ctx context.Context, log *slog.Logger, m *host.Module, t *store.Task, code abi.Code, msg string, permanent bool) {
	var retryAt time.Time
	if !permanent && t.Attempts < t.MaxAttempts {
		retryAt = time.Now().Add(r.cfg.Backoff(t.Attempts))
	}
	final, err := r.cfg.Store.TaskFail(context.Background(), t, string(code), msg, permanent, retryAt)
	if err != nil {
		log.Warn("tasks: record the failure", "err", err)
		return
	}
	ev := audit.Event{Kind: audit.KindTask, CorrelationID: t.CorrelationID, Module: t.Module, Action: t.Action,
		User: t.User, Org: t.Org, Code: string(code), TaskID: t.ID,
		Attrs: map[string]string{"attempt": fmt.Sprint(t.Attempts), "max_attempts": fmt.Sprint(t.MaxAttempts)}}
	if final {
		ev.Rule, ev.Reason = "task failed", fmt.Sprintf("attempt %d of %d failed, no retry: %s", t.Attempts, t.MaxAttempts, msg)
		log.Warn("tasks: task failed", "code", code, "err", msg)
	} else {
		ev.Rule, ev.Reason = "task retry", fmt.Sprintf("attempt %d of %d failed; retry at %s: %s", t.Attempts, t.MaxAttempts,
			retryAt.UTC().Format(time.RFC3339), msg)
		ev.Attrs["retry_at"] = retryAt.UTC().Format(time.RFC3339Nano)
	}
	if m != nil {
		m.Audit().Record(ctx, ev)
	}
}

// fireSchedules fires, for each schedule of each scheduled module, the
// ticks that came within the grace period and that this runner has not
// fired yet. The store decides which replica fires a tick.
func (r *Runner) fireSchedules(ctx context.Context, now time.Time) {
	seen := make(map[string]time.Time, len(r.lastTick))
	for _, sm := range r.cfg.Scheduled() {
		m, org := sm.Module, sm.Org
		if m == nil || org == "" {
			continue
		}
		mf, ev := m.Manifest(), m.Evaluation()
		if mf == nil || len(mf.Schedules) == 0 || ev == nil || !ev.Effective.Tasks {
			continue
		}
		for i := range mf.Schedules {
			s := &mf.Schedules[i]
			c := s.CronExpr()
			if c == nil {
				continue
			}
			key := org + "\x00" + m.Name() + "\x00" + s.Name()
			from := now.Add(-r.cfg.ScheduleGrace)
			if last, ok := r.lastTick[key]; ok && last.After(from) {
				from = last
			}
			seen[key] = from
			for tick := c.Next(from); !tick.IsZero() && !tick.After(now); tick = c.Next(tick) {
				if !r.fire(ctx, m, org, s, tick) {
					break // the database failed: try this tick again next pass
				}
				seen[key] = tick
			}
		}
	}
	r.lastTick = seen
}

// fire fires one tick; false when it must be tried again.
func (r *Runner) fire(ctx context.Context, m *host.Module, org string, s *policy.Schedule, tick time.Time) bool {
	p := policy.ServicePrincipal(org)
	id, fired, err := r.cfg.Store.ScheduleFire(ctx, store.NewTask{Org: org, Module: m.Name(), Action: s.Action, Input: []byte(s.Input),
		User: p.User, Roles: p.Roles, MaxAttempts: s.MaxAttempts}, s.Name(), tick, r.cfg.MaxQueued)
	ev := audit.Event{Kind: audit.KindTask, Module: m.Name(), Action: s.Action, User: p.User, Org: org, Rule: "schedules: " + s.Name(),
		Attrs: map[string]string{"tick": tick.Format(time.RFC3339)}}
	var ae *abi.Error
	switch {
	case err != nil && errors.As(err, &ae) && fired:
		ev.Decision, ev.Code, ev.Reason = audit.Deny, string(ae.Code), "the tick is skipped: "+ae.Message
		ev.CorrelationID = "tick-" + tick.Format("20060102T1504")
	case err != nil:
		if ctx.Err() == nil {
			r.log.Warn("tasks: fire a schedule", "org", org, "module", m.Name(), "schedule", s.Name(), "err", err)
		}
		return false
	case !fired:
		return true // another runner fired it
	default:
		ev.Decision, ev.TaskID, ev.CorrelationID = audit.Allow, id, id
		ev.Reason = fmt.Sprintf("fired the tick of %s: task %s", tick.Format(time.RFC3339), id)
	}
	m.Audit().Record(ctx, ev)
	return true
}
