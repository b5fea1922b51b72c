package native

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/internal/pool"
)

// PluginSpec describes a native plugin (kind: native in moat.yaml): one
// command, run as up to Size long-lived workers.
type PluginSpec struct {
	// Worker is each worker's command, environment and supervision. In
	// production Worker.Launch is ConfinedLauncher(base): every worker is
	// a confined job of its own (own uid, cgroup, root filesystem, job
	// dir, empty network namespace), with base's limits (MemoryBytes is
	// per worker). Leave Worker.Dir empty, so no two workers share a
	// writable directory.
	Worker WorkerSpec
	// Size is the most workers at once: the module's concurrency. A call
	// takes an idle worker, starts a new one while there are fewer than
	// Size, and otherwise waits for one (as long as its context allows).
	// Default 1; at most MaxPluginWorkers.
	Size int
	// Slots, when set, bounds the workers of every pool that shares it
	// (a host's): each worker holds one of its slots from its start to
	// its pool's close. A pool whose first worker finds no slot does not
	// start; one that would grow past the free slots waits for its own
	// workers instead, as at Size.
	Slots *WorkerSlots
}

// WorkerSlots bounds the native workers of the plugins that share it: a
// host serving many native plugins (many organizations') must not start
// each one's concurrency in processes, whatever each is allowed alone.
type WorkerSlots struct {
	free   chan struct{}
	parent *WorkerSlots // also holds a slot for each of this one's
}

// NewWorkerSlots returns slots for n workers at once.
func NewWorkerSlots(n int) *WorkerSlots {
	w := &WorkerSlots{free: make(chan struct{}, n)}
	for range n {
		w.free <- struct{}{}
	}
	return w
}

// Within returns slots for at most n of w's workers: a share of a host's
// slots (an organization's), so that no one share can take them all. A
// worker holds a slot of the share and one of w.
func (w *WorkerSlots) Within(n int) *WorkerSlots {
	c := NewWorkerSlots(n)
	c.parent = w
	return c
}

func (w *WorkerSlots) take() bool {
	if w == nil {
		return true
	}
	select {
	case <-w.free:
	default:
		return false
	}
	if !w.parent.take() {
		w.free <- struct{}{}
		return false
	}
	return true
}

func (w *WorkerSlots) give(n int) {
	if w == nil {
		return
	}
	for range n {
		select {
		case w.free <- struct{}{}:
		default: // never more than n: a slot given twice is a bug, not a new slot
		}
	}
	w.parent.give(n)
}

// limits describes the bounds w applies, for messages.
func (w *WorkerSlots) limits() string {
	if w.parent == nil {
		return fmt.Sprintf("at most %d at once", cap(w.free))
	}
	return fmt.Sprintf("at most %d at once for this share, %s in all", cap(w.free), w.parent.limits())
}

// ErrNoWorkerSlots is why a native plugin did not start: the host already
// runs as many native workers as it allows.
var ErrNoWorkerSlots = errors.New("the host already runs as many native workers as it allows")

// MaxPluginWorkers bounds PluginSpec.Size: each worker is a process with
// its own memory limit, so the module's concurrency is not a reason to
// start thousands.
const MaxPluginWorkers = 256

// PluginPool runs one native plugin: its workers, each supervised (health
// checks, restart with backoff), sharing one crash-loop count. When the
// plugin's workers crash WorkerSpec.MaxRestarts times within
// RestartWindow, the whole plugin is given up: every worker is stopped and
// every call fails with an error wrapping ErrGaveUp, for
// WorkerSpec.GiveUpCooldown; the first call after it starts a worker
// again.
//
// A worker that dies during a call of a known caller (InvokeAs: a crash,
// the OOM killer, the call's deadline, a protocol break) is that caller's
// strike, not the plugin's: the worker is restarted at once for everyone
// else, and a caller with callerStrikesMax strikes within RestartWindow is
// refused (rate_limited) for a backoff that doubles at each new strike.
// One caller, whatever its role, cannot take the plugin away from its
// organization by crashing it.
type PluginPool struct {
	spec    PluginSpec
	loop    *crashLoop
	actions []string

	// callers are the strikes and backoffs of callers whose calls killed
	// a worker; p.mu guards it.
	callers  map[string]*callerStrikes
	revived  time.Time     // when the plugin was last revived after a give-up
	cooldown time.Duration // the next give-up's cool-down

	mu       sync.Mutex
	all      []*Supervisor
	idle     *pool.LIFO[*Supervisor] // the warmest worker first (internal/pool); unbounded: all bounds it
	starting int
	retry    bool // the last start failed: the next one backs off
	changed  chan struct{}
	closed   bool
	growing  sync.WaitGroup // starts under way, waited for by Close
	stop     chan struct{}  // closed by Close
	held     int            // slots of spec.Slots held: workers and starts
}

// giveSlots returns n of the pool's slots; p.mu is held.
func (p *PluginPool) giveSlots(n int) {
	n = min(n, p.held)
	p.held -= n
	p.spec.Slots.give(n)
}

// StartPlugin starts the plugin's first worker and returns once it is
// ready, so a bad command fails here, with the worker's stderr in the
// error, and the actions are known. More workers start as calls need them.
func StartPlugin(ctx context.Context, spec PluginSpec) (*PluginPool, error) {
	if spec.Size <= 0 {
		spec.Size = 1
	}
	if spec.Size > MaxPluginWorkers {
		return nil, fmt.Errorf("native plugin %s: %d workers; the limit is %d (native.MaxPluginWorkers): lower the module's concurrency", spec.Worker.Name, spec.Size, MaxPluginWorkers)
	}
	w, err := workerDefaults(spec.Worker)
	if err != nil {
		return nil, err
	}
	spec.Worker = w
	if !spec.Slots.take() {
		return nil, fmt.Errorf("native plugin %s: %w (%s); close a native module, or raise the limit", w.Name, ErrNoWorkerSlots, spec.Slots.limits())
	}
	p := &PluginPool{spec: spec, loop: newCrashLoop(w), changed: make(chan struct{}), stop: make(chan struct{}), held: 1,
		callers: map[string]*callerStrikes{}, cooldown: w.GiveUpCooldown}
	s, err := supervise(ctx, w, p.loop, 0, nil)
	if err != nil {
		spec.Slots.give(1)
		return nil, err
	}
	p.actions = s.Actions()
	p.all, p.idle = []*Supervisor{s}, pool.New[*Supervisor](0)
	p.idle.Put(s)
	go p.closeOnGiveUp()
	return p, nil
}

// closeOnGiveUp wakes the callers waiting for a worker when the plugin is
// given up (each supervisor stops its own worker).
func (p *PluginPool) closeOnGiveUp() {
	p.mu.Lock()
	gaveUp := p.loop.gaveUpCh
	p.mu.Unlock()
	select {
	case <-gaveUp:
	case <-p.stop:
		return
	}
	p.mu.Lock()
	// Its workers stop themselves; their slots go to other plugins now,
	// not when the given-up module is finally closed.
	p.giveSlots(len(p.all))
	p.broadcast()
	p.mu.Unlock()
}

// Actions lists the plugin's actions, from its first worker's ready
// message; every later worker must name the same.
func (p *PluginPool) Actions() []string { return slices.Clone(p.actions) }

// Workers reports how many workers run (or restart) and how many of them
// are busy with a call.
func (p *PluginPool) Workers() (running, busy int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.all), len(p.all) - p.idle.Len()
}

// Invoke runs one action on a worker of the plugin; its op calls go
// through d. An action's own failure is an *abi.Error (the worker keeps
// serving); a failure of the worker is a *WorkerError (crashed, OOM-killed,
// past ctx's deadline, broke the protocol; replaced for the next call; or
// the plugin was given up: it wraps ErrGaveUp).
//
// Invoke knows no caller: a worker's death during the call counts toward
// the plugin's crash loop. Hosts call InvokeAs.
func (p *PluginPool) Invoke(ctx context.Context, d transport.Dispatcher, action string, input []byte, correlationID string) ([]byte, error) {
	return p.invoke(ctx, "", d, action, input, correlationID)
}

// InvokeAs is Invoke for a known caller (a principal's organization and
// user: any non-empty key that tells callers apart). A worker's death
// during the call is the caller's strike, not the plugin's; a caller with
// too many strikes is refused at once with a *WorkerError of code
// rate_limited that says until when (see PluginPool).
func (p *PluginPool) InvokeAs(ctx context.Context, caller string, d transport.Dispatcher, action string, input []byte, correlationID string) ([]byte, error) {
	if caller == "" {
		caller = "\x00anonymous" // never the plugin's own count
	}
	return p.invoke(ctx, caller, d, action, input, correlationID)
}

func (p *PluginPool) invoke(ctx context.Context, caller string, d transport.Dispatcher, action string, input []byte, correlationID string) ([]byte, error) {
	if err := p.backedOff(caller, action); err != nil {
		return nil, err
	}
	s, err := p.acquire(ctx, action)
	if err != nil {
		return nil, err
	}
	defer p.release(s)
	out, err := s.invoke(ctx, d, action, input, correlationID, caller != "")
	var we *WorkerError
	if errors.As(err, &we) && we.charged {
		p.strike(caller, we)
	}
	return out, err
}

// Per-caller strikes: callerStrikesMax deaths of a worker during one
// caller's calls within the restart window back that caller off for
// callerFirstBackoff, doubled at each further strike (up to
// callerMaxBackoff); a caller calm for a whole window starts over.
const (
	callerStrikesMax   = 3
	callerFirstBackoff = 10 * time.Second
	callerMaxBackoff   = 10 * time.Minute
	maxCallersTracked  = 10000
)

type callerStrikes struct {
	at      []time.Time // strikes within the window
	until   time.Time   // refused until then
	backoff time.Duration
	last    string // why the last strike
}

// backedOff refuses a caller that is backed off.
func (p *PluginPool) backedOff(caller, action string) error {
	if caller == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.callers[caller]
	if c == nil || !time.Now().Before(c.until) {
		return nil
	}
	wait := time.Until(c.until).Round(time.Second)
	return &WorkerError{Code: abi.CodeRateLimited, Worker: p.spec.Worker.Name, Action: action,
		Reason: fmt.Sprintf("your calls ended the worker %d times within %s (the last: %s); calls from you are refused for %s more, while the plugin keeps serving others",
			len(c.at), p.spec.Worker.RestartWindow, c.last, max(wait, time.Second))}
}

// strike records a worker's death during caller's call.
func (p *PluginPool) strike(caller string, we *WorkerError) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	window := p.spec.Worker.RestartWindow
	c := p.callers[caller]
	if c == nil {
		if len(p.callers) >= maxCallersTracked {
			for k, o := range p.callers { // forget the calm ones first
				if now.Sub(o.until) > window && (len(o.at) == 0 || now.Sub(o.at[len(o.at)-1]) > window) {
					delete(p.callers, k)
				}
			}
		}
		c = &callerStrikes{}
		p.callers[caller] = c
	}
	c.at = slices.DeleteFunc(c.at, func(t time.Time) bool { return now.Sub(t) >= window })
	if len(c.at) == 0 && now.Sub(c.until) >= window {
		c.backoff = 0 // calm for a whole window: start over
	}
	c.at = append(c.at, now)
	c.last = we.Reason
	if len(c.at) >= callerStrikesMax {
		c.backoff = min(max(2*c.backoff, callerFirstBackoff), callerMaxBackoff)
		c.until = now.Add(c.backoff)
	}
}

func (p *PluginPool) acquire(ctx context.Context, action string) (*Supervisor, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, &WorkerError{Code: abi.CodeUnavailable, Worker: p.spec.Worker.Name, Action: action, Reason: "the plugin was closed (reloaded or shut down)"}
		}
		if err := p.loop.err(); err != nil {
			if !p.revive() {
				p.mu.Unlock()
				return nil, &WorkerError{Code: abi.CodeUnavailable, Worker: p.spec.Worker.Name, Action: action, Reason: err.Error(), Err: err}
			}
		}
		// A worker that is up before one that restarts.
		if s, ok := p.idle.GetPreferred((*Supervisor).ready); ok {
			p.mu.Unlock()
			return s, nil
		}
		if len(p.all)+p.starting < p.spec.Size && p.spec.Slots.take() {
			p.held++
			p.starting++
			p.growing.Add(1)
			go p.grow(len(p.all) + p.starting - 1)
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			code := abi.CodeTimeout
			if errors.Is(ctx.Err(), context.Canceled) {
				code = abi.CodeCanceled
			}
			reason := fmt.Sprintf("all %d workers were busy (the module's concurrency)", p.spec.Size)
			if n := len(p.all); n < p.spec.Size {
				reason = fmt.Sprintf("all %d workers were busy, and the host runs as many native workers as it allows", n)
			}
			return nil, &WorkerError{Code: code, Worker: p.spec.Worker.Name, Action: action, Reason: reason, Err: ctx.Err()}
		}
	}
}

// revive starts the plugin over once its give-up's cool-down has passed:
// a fresh crash-loop count, and no worker (the next calls start them).
// p.mu is held. It reports whether the plugin was revived.
func (p *PluginPool) revive() bool {
	at := p.loop.gaveUpAt()
	if time.Since(at) < p.cooldown || p.closed || p.starting > 0 {
		return false
	}
	window := p.spec.Worker.RestartWindow
	if !p.revived.IsZero() && at.Sub(p.revived) < window {
		// Given up again soon after the last revival: wait longer next time.
		p.cooldown = min(2*p.cooldown, 30*time.Minute)
	} else {
		p.cooldown = p.spec.Worker.GiveUpCooldown
	}
	p.revived = time.Now()
	old := p.all
	p.all, p.retry = nil, false
	p.idle.Drain()
	p.loop = newCrashLoop(p.spec.Worker)
	go func() {
		for _, s := range old {
			s.Close()
		}
	}()
	go p.closeOnGiveUp()
	if p.spec.Worker.OnEvent != nil {
		p.spec.Worker.OnEvent(WorkerEvent{Kind: EventRevived, Worker: p.spec.Worker.Name,
			Reason: fmt.Sprintf("the plugin was given up %s ago; its cool-down has passed, so workers start again", time.Since(at).Round(time.Second))})
	}
	return true
}

// grow starts one more worker, outside any caller's context: a caller
// that gives up waiting does not waste the start. A failed start counts as
// a crash of the plugin and the next one backs off.
func (p *PluginPool) grow(slot int) {
	defer p.growing.Done()
	p.mu.Lock()
	retry, loop := p.retry, p.loop // revive replaces p.loop
	p.mu.Unlock()
	if retry {
		wait, gaveUp, first := loop.next("a new worker did not start")
		if gaveUp != nil {
			if first && p.spec.Worker.OnEvent != nil {
				p.spec.Worker.OnEvent(WorkerEvent{Kind: EventGaveUp, Worker: p.spec.Worker.Name, Slot: slot, Reason: gaveUp.Error(), Restarts: loop.count()})
			}
			p.mu.Lock()
			p.starting--
			p.giveSlots(1)
			p.broadcast()
			p.mu.Unlock()
			return
		}
		select {
		case <-loop.gaveUpCh:
		case <-p.stop:
		case <-time.After(wait):
		}
	}
	s, err := supervise(context.Background(), p.spec.Worker, loop, slot, p.actions)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	p.retry = err != nil
	switch {
	case err != nil:
		p.giveSlots(1)
		p.spec.Worker.Logger.Warn("native plugin: a new worker did not start", "worker", p.spec.Worker.Name, "err", err)
		if p.spec.Worker.OnEvent != nil {
			p.spec.Worker.OnEvent(WorkerEvent{Kind: EventRestartFailed, Worker: p.spec.Worker.Name, Slot: slot, Reason: err.Error(), Restarts: loop.count()})
		}
	case p.closed || loop != p.loop || loop.err() != nil:
		s.Close() // before Close returns: nothing of it may outlive the pool
		p.giveSlots(1)
	default:
		p.all = append(p.all, s)
		p.idle.Put(s)
	}
	p.broadcast()
}

func (p *PluginPool) release(s *Supervisor) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed && p.loop.err() == nil {
		p.idle.Put(s)
	}
	p.broadcast()
}

// broadcast wakes the callers waiting for a worker; p.mu is held.
func (p *PluginPool) broadcast() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Close stops every worker. Calls in flight fail; later calls fail with
// unavailable.
func (p *PluginPool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stop)
	all := p.all
	p.all = nil
	p.idle.Close()
	p.broadcast()
	p.mu.Unlock()
	p.growing.Wait()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Close()
		}()
	}
	wg.Wait()
	p.mu.Lock()
	p.giveSlots(p.held)
	p.mu.Unlock()
	return nil
}
