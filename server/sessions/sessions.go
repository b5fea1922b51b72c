// Package sessions keeps sandboxes that live across requests: a session
// belongs to the principal that made it (its user and organization), has
// a workspace directory (shown to its code as /home/user, bounded by a
// disk quota, removed when it ends), an idle timeout and a lifetime, and
// code contexts: resident interpreters (host/resident.go) whose variables
// persist from one run to the next, each a module of its own loaded with
// the workspace as its one file grant.
//
// moat serve exposes it under /v1/sessions (server/sessions_http.go). A
// session lives in the memory of the replica that made it; moat serve
// records which replica that is (Config.OnCreate, OnEnd) and every other
// replica routes the session's calls there (server/replicas.go; docs/
// RATIONALE.md, "A session lives on one replica, and every replica
// answers for it").
package sessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/policy"
)

// Defaults of Config's zero fields.
const (
	DefaultMaxPerOrg      = 20
	DefaultIdleTimeout    = 10 * time.Minute
	DefaultTimeout        = 5 * time.Minute
	DefaultMaxLifetime    = 24 * time.Hour
	DefaultDiskQuotaBytes = 512 << 20
	DefaultMaxFiles       = 10000
	DefaultMaxFileBytes   = 64 << 20
	DefaultMaxContexts    = 8
	DefaultRunTimeout     = 60 * time.Second
)

// Bounds of what a request may shape.
const (
	MaxEnvVars     = 64
	MaxEnvName     = 128
	MaxEnvValue    = 4096
	MaxCodeBytes   = 1 << 20
	MaxContextName = 64
	MaxPathBytes   = 4096
	// WorkspacePath is where a session's code sees its workspace.
	WorkspacePath = "/home/user"
)

// Config configures a Manager. Zero fields take the defaults above.
type Config struct {
	// Dir holds each session's workspace (Dir/<id>). It must lie apart
	// from the host's data and cache directories: a directory a guest
	// writes must not reach moat's own (host.Mount.Granted refuses one).
	Dir string
	// MaxPerOrg bounds the live sessions of one organization.
	MaxPerOrg int
	// IdleTimeout ends a session no call has touched for this long.
	IdleTimeout time.Duration
	// Timeout is a new session's time to live when its creator gives
	// none; MaxLifetime bounds it and every extension, from creation.
	Timeout, MaxLifetime time.Duration
	// DiskQuotaBytes and MaxFiles bound a workspace; MaxFileBytes one
	// upload or download.
	DiskQuotaBytes, MaxFiles, MaxFileBytes int64
	// MaxContexts bounds a session's code contexts (interpreters).
	MaxContexts int
	// RunTimeout bounds one run; MemoryBytes a context's interpreter
	// (0: the profile's memory limit; more than the profile allows is
	// refused, as a plugin asking for it is).
	RunTimeout  time.Duration
	MemoryBytes int64
	// HostFor is the host whose profile applies to an organization.
	HostFor func(org string) *host.Host
	// Scripts builds a context's REPL for its interpreter (moat serve's
	// Config.ScriptBuilder); nil is bundle.Builder{ToolchainDir}.
	Scripts bundle.ScriptBuilder
	// ToolchainDir is where the interpreters are ("" finds them).
	ToolchainDir string
	// Audit records every step (kind session).
	Audit *audit.Log
	// OnCreate and OnEnd, when set, are told of each session made and
	// ended (Info as its owner sees it), synchronously: moat serve
	// records in the store which replica holds it (server/replicas.go),
	// before the creator learns its id, so that every replica can route
	// a call for it from the first.
	OnCreate, OnEnd func(context.Context, Info)
	// MaxCommands bounds the commands a session runs at once,
	// CommandOutputBytes what is kept of each one's output, CommandPids
	// each one's processes and threads (commands.go; 0: the defaults).
	MaxCommands, CommandOutputBytes, CommandPids int
	// Images keeps paused sessions (pause.go); nil: pause is refused.
	// MaxImageBytes bounds one paused session's image as it is written
	// (0: DefaultMaxImageBytes; sessions.max_image_bytes).
	Images        Images
	MaxImageBytes int64
}

func (c *Config) defaults() {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.MaxPerOrg <= 0 {
		c.MaxPerOrg = DefaultMaxPerOrg
	}
	if c.MaxContexts <= 0 {
		c.MaxContexts = DefaultMaxContexts
	}
	defd(&c.IdleTimeout, DefaultIdleTimeout)
	defd(&c.Timeout, DefaultTimeout)
	defd(&c.MaxLifetime, DefaultMaxLifetime)
	defd(&c.RunTimeout, DefaultRunTimeout)
	def(&c.DiskQuotaBytes, DefaultDiskQuotaBytes)
	def(&c.MaxFiles, DefaultMaxFiles)
	def(&c.MaxFileBytes, DefaultMaxFileBytes)
	def(&c.MaxImageBytes, DefaultMaxImageBytes)
	c.commandDefaults()
}

// Error is a refusal with the HTTP-ish code a caller maps it to.
type Error struct {
	Code    string // not_found, invalid_argument, resource_exhausted, too_large, conflict, unavailable
	Session string
	Reason  string
	Err     error
}

func (e *Error) Error() string {
	if e.Session != "" {
		return "session " + e.Session + ": " + e.Reason
	}
	return "session: " + e.Reason
}

func (e *Error) Unwrap() error { return e.Err }

// ErrNotFound is the refusal of a session that does not exist or is
// another principal's: the two are told apart by no one.
var ErrNotFound = errors.New("no such session")

func notFound(id string) error {
	return &Error{Code: "not_found", Session: id, Reason: "no such session (it ended, or it is not yours)", Err: ErrNotFound}
}

func invalid(format string, args ...any) error {
	return &Error{Code: "invalid_argument", Reason: fmt.Sprintf(format, args...)}
}

// Manager keeps the live sessions of one server.
type Manager struct {
	cfg     Config
	mu      sync.Mutex
	live    map[string]*Session
	stop    chan struct{}
	done    chan struct{}
	repl    replBuilds
	images  baseImages
	interps interpreters // rubyinterp.go
	// reserved counts, per organization, the sessions a fork or a resume
	// is making: they count against max_per_org before they are live.
	reserved map[string]int
}

// New starts a Manager and its reaper of expired sessions.
func New(cfg Config) (*Manager, error) {
	cfg.defaults()
	if cfg.Dir == "" || cfg.HostFor == nil {
		return nil, errors.New("sessions: Config.Dir and Config.HostFor are required")
	}
	m := &Manager{cfg: cfg, live: map[string]*Session{}, stop: make(chan struct{}), done: make(chan struct{})}
	go m.reap()
	return m, nil
}

// Config returns the configuration in effect, defaults filled in.
func (m *Manager) Config() Config { return m.cfg }

// CreateOptions are what a creator may ask of a new session.
type CreateOptions struct {
	// Timeout is the session's time to live (≤ MaxLifetime); 0 the default.
	Timeout time.Duration
	// Env is every context's environment, beside HOME.
	Env map[string]string
	// Metadata is the creator's, kept and listed (bounded as Env is).
	Metadata map[string]string
}

// Session is one live session.
type Session struct {
	m     *Manager
	id    string
	owner policy.Principal
	dir   string
	env   map[string]string
	meta  map[string]string
	start time.Time

	mu       sync.Mutex
	ended    bool
	expires  time.Time
	lastUsed time.Time
	contexts map[string]*codeContext
	// pending are the contexts of a copy (a fork, a resumed session) not
	// run yet: each starts from its image on its first run.
	pending map[string]*pendingContext
	nextCtx atomic.Int64 // numbers the contexts' module names
	cmds    commandTable // commands.go
}

// Info is what a session's owner sees of it.
type Info struct {
	ID          string            `json:"id"`
	User        string            `json:"user"`
	Org         string            `json:"org"`
	Workspace   string            `json:"workspace"`
	StartedAt   time.Time         `json:"started_at"`
	ExpiresAt   time.Time         `json:"expires_at"`
	IdleExpires time.Time         `json:"idle_expires_at"`
	Contexts    []ContextInfo     `json:"contexts"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// State is StateRunning (live on a replica) or StatePaused (an image
	// in the store, resumed by POST .../resume or E2B's connect).
	State string `json:"state"`
}

// The states a listed session is in.
const (
	StateRunning = "running"
	StatePaused  = "paused"
)

var idPattern = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

// ValidID reports whether s has the shape of a session id (anything else
// is refused before a lookup, and answered as not found).
func ValidID(s string) bool { return idPattern.MatchString(s) }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkVars bounds a map a creator gives (env or metadata).
func checkVars(field string, vars map[string]string, names bool) error {
	if len(vars) > MaxEnvVars {
		return invalid("%s: %d entries, at most %d", field, len(vars), MaxEnvVars)
	}
	for k, v := range vars {
		switch {
		case len(k) == 0 || len(k) > MaxEnvName:
			return invalid("%s: a name of %d bytes; give 1 to %d", field, len(k), MaxEnvName)
		case names && !envName.MatchString(k):
			return invalid("%s: %q is not a variable name (letters, digits and _, not starting with a digit)", field, k)
		case len(v) > MaxEnvValue:
			return invalid("%s: %s's value is %d bytes, at most %d", field, k, len(v), MaxEnvValue)
		case slices.Contains([]byte(k+v), 0):
			return invalid("%s: %s holds a NUL byte", field, k)
		}
	}
	return nil
}

// Create makes a session owned by p.
func (m *Manager) Create(ctx context.Context, p policy.Principal, correlation string, opts CreateOptions) (*Info, error) {
	if p.User == "" && p.Org == "" {
		return nil, invalid("a session needs an authenticated caller")
	}
	if err := checkVars("env_vars", opts.Env, true); err != nil {
		return nil, err
	}
	if err := checkVars("metadata", opts.Metadata, false); err != nil {
		return nil, err
	}
	for k := range opts.Env {
		if reservedEnv(k) {
			return nil, invalid("env_vars: %s is set by moat (HOME, PWD, PYTHON*, MOAT_*); choose another name", k)
		}
	}
	ttl := opts.Timeout
	if ttl < 0 {
		return nil, invalid("timeout: %v is negative; give a positive duration, or none for %v", ttl, m.cfg.Timeout)
	}
	if ttl == 0 {
		ttl = m.cfg.Timeout
	}
	ttl = min(ttl, m.cfg.MaxLifetime)
	id, err := newID()
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	s := &Session{m: m, id: id, owner: policy.Principal{User: p.User, Org: p.Org}, dir: filepath.Join(m.cfg.Dir, id),
		env: opts.Env, meta: opts.Metadata, start: now, expires: now.Add(ttl), lastUsed: now, contexts: map[string]*codeContext{}}

	m.mu.Lock()
	n := m.reserved[p.Org]
	for _, o := range m.live {
		if o.owner.Org == p.Org {
			n++
		}
	}
	if n >= m.cfg.MaxPerOrg {
		m.mu.Unlock()
		m.record(ctx, s, correlation, "create", audit.Deny, fmt.Sprintf("the organization has %d live sessions, the limit (sessions.max_per_org)", n))
		return nil, &Error{Code: "resource_exhausted", Reason: fmt.Sprintf("your organization has %d live sessions, the most it may have (sessions.max_per_org); end one (DELETE /v1/sessions/{id}) or wait for one to time out", n)}
	}
	m.live[id] = s
	m.mu.Unlock()

	err = os.MkdirAll(m.cfg.Dir, 0o700)
	if err == nil {
		err = os.Mkdir(s.dir, 0o700)
	}
	if err != nil {
		m.forget(s)
		return nil, fmt.Errorf("session %s: make its workspace: %w", id, err)
	}
	m.record(ctx, s, correlation, "create", audit.Allow, "")
	in := s.info()
	if m.cfg.OnCreate != nil {
		m.cfg.OnCreate(ctx, *in)
	}
	return in, nil
}

func reservedEnv(k string) bool {
	switch {
	case k == "HOME" || k == "PWD" || k == "PATH":
		return true
	case len(k) >= 6 && k[:6] == "PYTHON", len(k) >= 5 && k[:5] == "MOAT_":
		return true
	}
	return false
}

func newID() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "s" + hex.EncodeToString(b), nil
}

// Get returns p's session id and marks it used, or not_found.
func (m *Manager) Get(p policy.Principal, id string) (*Session, error) {
	if !ValidID(id) {
		return nil, notFound("")
	}
	m.mu.Lock()
	s := m.live[id]
	m.mu.Unlock()
	if s == nil || s.owner.User != p.User || s.owner.Org != p.Org {
		return nil, notFound(id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil, notFound(id)
	}
	s.lastUsed = time.Now().UTC()
	return s, nil
}

// Owner returns the owner of live session id, for a caller that proves
// its right to the session otherwise than by being its owner (the E2B
// data plane's access token, a MAC over the id and this owner).
func (m *Manager) Owner(id string) (policy.Principal, bool) {
	m.mu.Lock()
	s := m.live[id]
	m.mu.Unlock()
	if s == nil {
		return policy.Principal{}, false
	}
	return s.owner, true
}

// Info returns p's session id as its owner sees it.
func (m *Manager) Info(p policy.Principal, id string) (*Info, error) {
	s, err := m.Get(p, id)
	if err != nil {
		return nil, err
	}
	return s.info(), nil
}

// List returns p's live sessions, oldest first.
func (m *Manager) List(p policy.Principal) []Info {
	m.mu.Lock()
	var ss []*Session
	for _, s := range m.live {
		if s.owner.User == p.User && s.owner.Org == p.Org {
			ss = append(ss, s)
		}
	}
	m.mu.Unlock()
	out := []Info{}
	for _, s := range ss {
		out = append(out, *s.info())
	}
	slices.SortFunc(out, func(a, b Info) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}

// SetTimeout makes p's session id end d from now (at most MaxLifetime
// from its start), as E2B's setTimeout does.
func (m *Manager) SetTimeout(ctx context.Context, p policy.Principal, id, correlation string, d time.Duration) (*Info, error) {
	if d <= 0 {
		return nil, invalid("timeout: give a positive duration")
	}
	s, err := m.Get(p, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.expires = time.Now().UTC().Add(d)
	if end := s.start.Add(m.cfg.MaxLifetime); s.expires.After(end) {
		s.expires = end
	}
	s.mu.Unlock()
	m.record(ctx, s, correlation, "timeout", audit.Allow, "")
	return s.info(), nil
}

// Kill ends p's session id.
func (m *Manager) Kill(ctx context.Context, p policy.Principal, id, correlation string) error {
	s, err := m.Get(p, id)
	if err != nil {
		return err
	}
	s.end(ctx, correlation, "kill", "")
	return nil
}

// Close ends every session and the reaper.
func (m *Manager) Close(ctx context.Context) {
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	<-m.done
	m.mu.Lock()
	ss := make([]*Session, 0, len(m.live))
	for _, s := range m.live {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	for _, s := range ss {
		s.end(ctx, "", "shutdown", "the server stopped")
	}
	m.images.close(ctx)
	m.repl.remove()
}

// reap ends the sessions past their lifetime or idle timeout.
func (m *Manager) reap() {
	defer close(m.done)
	tick := min(max(m.cfg.IdleTimeout/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := time.Now().UTC()
		m.mu.Lock()
		var due []*Session
		var why []string
		for _, s := range m.live {
			s.mu.Lock()
			switch {
			case s.ended:
			case !now.Before(s.expires):
				due, why = append(due, s), append(why, "its timeout passed")
			case !now.Before(s.lastUsed.Add(m.cfg.IdleTimeout)):
				due, why = append(due, s), append(why, "it was idle longer than sessions.idle_timeout")
			}
			s.mu.Unlock()
		}
		m.mu.Unlock()
		for i, s := range due {
			s.end(context.Background(), "", "expire", why[i])
		}
	}
}

func (m *Manager) forget(s *Session) {
	m.mu.Lock()
	delete(m.live, s.id)
	m.mu.Unlock()
}

// end closes the session's contexts and removes its workspace.
func (s *Session) end(ctx context.Context, correlation, step, reason string) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	ccs := s.contexts
	s.contexts, s.pending = nil, nil
	s.mu.Unlock()
	for _, cc := range ccs {
		cc.close(ctx)
	}
	s.endCommands()
	err := os.RemoveAll(s.dir)
	s.m.forget(s)
	if err != nil {
		reason += fmt.Sprintf("; its workspace was not removed: %v", err)
	}
	s.m.record(ctx, s, correlation, step, audit.Allow, reason)
	if s.m.cfg.OnEnd != nil {
		s.m.cfg.OnEnd(ctx, *s.info())
	}
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

func (s *Session) info() *Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := &Info{ID: s.id, User: s.owner.User, Org: s.owner.Org, Workspace: WorkspacePath, StartedAt: s.start,
		ExpiresAt: s.expires, IdleExpires: s.lastUsed.Add(s.m.cfg.IdleTimeout), Metadata: s.meta, Contexts: []ContextInfo{}, State: StateRunning}
	for _, cc := range s.contexts {
		ci := cc.info
		ci.Runs = int(cc.runs.Load())
		in.Contexts = append(in.Contexts, ci)
	}
	for _, p := range s.pending {
		in.Contexts = append(in.Contexts, p.info)
	}
	slices.SortFunc(in.Contexts, func(a, b ContextInfo) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return in
}

// record writes a session event to the audit trail.
func (m *Manager) record(ctx context.Context, s *Session, correlation, step, decision, reason string) {
	if m.cfg.Audit == nil {
		return
	}
	m.cfg.Audit.Record(ctx, audit.Event{Kind: audit.KindSession, Decision: decision, CorrelationID: correlation,
		User: s.owner.User, Org: s.owner.Org, Rule: step, Reason: reason, Attrs: map[string]string{"session": s.id}})
}
