// Package server is moat's HTTP API and web console: `moat serve`.
//
//	srv, err := server.New(ctx, server.DefaultConfig())
//	err = srv.ListenAndServe(ctx) // until ctx is done, then a graceful shutdown
//
// Every /v1 route but the API's own description (/v1/openapi.json) takes an
// API key as a bearer token (CreateAPIKey, `moat keys create`); the key's user, organization and roles become the
// policy.Principal of everything the request does, so the host's policy,
// the ops' storage scopes and the audit trail all see the caller. An
// organization sees only its own modules: another organization's module is
// a 404, never a 403, so names do not leak across tenants.
//
// Modules are uploaded per organization and kept in the store, bytes
// and all (store.ModuleBlobPut), so that several servers on one
// PostgreSQL database (Config.DatabaseURL) are replicas needing no shared
// disk: each follows the store's module change feed and loads, replaces
// or unloads a module within a second of its upload or deletion through
// any of them. Given one code key (Config.CodeKey, code_key_file), they
// share compiled machine code through the store as well, so that loading
// a module another replica compiled costs no compilation (host.Config.CodeKey). Every upload is a new version, loaded with the same checks as
// `moat run` (signature against the profile's trusted keys, manifest
// against the profile) before it replaces the current one. Errors are RFC
// 9457 problem details; the routes are described by /v1/openapi.json,
// which a test keeps in step with the router.
//
// The code-execution routes (/v1/runs and the Piston-compatible ones) run
// jobs on the Executor given in Config; without one they answer 501.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/media"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server/sessions"
)

// Executor runs code-execution jobs for /v1/runs and the Piston routes.
// The languages package provides one.
type Executor interface {
	Exec(ctx context.Context, req languages.ExecRequest) (*languages.ExecResult, error)
	// Languages lists the registered languages; the server offers those
	// whose toolchain is available here. *languages.Executor implements it.
	Languages() []languages.LanguageStatus
}

// languages lists the languages the executor can run on this machine.
func (s *Server) languages() []languages.Info {
	var out []languages.Info
	for _, l := range s.exec.Languages() {
		if l.Available {
			out = append(out, l.Info)
		}
	}
	return out
}

// Server is a running moat API: hosts (one per distinct profile), the
// store they share, the modules of every organization, and the router.
type Server struct {
	cfg   Config
	log   *slog.Logger
	store *store.Store
	// audit is the trail every host records to (host.Config.Audit), and
	// the server's own refusals and changes with them; its log lines go
	// through guestLogCapture, as the hosts' do, so an invocation's
	// ?logs=true envelope holds its audit lines.
	audit   *audit.Log
	hosts   map[string]*host.Host // by profile name or path
	modules *registry
	// nativeWorkers bounds every host's native plugin workers together;
	// each organization draws from its share (registry.orgWorkers).
	nativeWorkers *native.WorkerSlots
	auth          *authenticator
	vault         *secrets.Vault // the operator's secrets; its key may be nil (none configured)
	keyRate       *rateLimit
	orgRate       *rateLimit
	piston        *rateLimit
	routeRate     *rateLimit // per public or webhook route (routes.go)
	addrRate      *rateLimit // per source address and module, before a route is known
	metrics       *metrics
	echo          *echo.Echo
	exec          Executor
	sessions      *sessions.Manager // nil: sessions.disabled
	replicas      *replicas         // nil: sessions not routed between replicas (replicas.go)

	// mediaKey signs media URLs (media.go); mediaKeyOwn: it is this
	// server's own, from its data directory, not a configured one.
	mediaKey    []byte
	mediaKeyOwn bool

	// pageFilesCache holds the files of the versions whose pages were
	// opened lately (pages.go).
	pageFilesCache pageFilesCache

	invocations *admission // admission of invocations and confirmations
	execs       *admission // admission of runs (/v1/runs, Piston execute)
	conns       atomic.Pointer[connLimit]

	// stopWatch ends the module change feed's follower (the context of
	// WatchModules); watchDone is closed when it has returned.
	stopWatch context.CancelFunc
	watchDone chan struct{}
	// stopPrune ends the audit prune (upgrade.go); pruneDone is closed
	// when it has returned. auditPruned counts the events it removed.
	stopPrune   context.CancelFunc
	pruneDone   chan struct{}
	auditPruned atomic.Int64
	// langs tracks each language's first-time work (langstate.go);
	// stopWarm ends the warming of languages.warm, and warmDone is closed
	// when it has returned.
	langs    langStates
	stopWarm context.CancelFunc
	warmDone chan struct{}
	// stopTasks ends the task runner (tasks.go); tasksDone is closed
	// when it has returned.
	stopTasks context.CancelFunc
	tasksDone chan struct{}
	judge0    *judge0Worker // runs Judge0 submissions (judge0_worker.go)

	ready  atomic.Bool
	httpMu sync.Mutex
	http   *http.Server
	closed sync.Once

	// ai makes every host's model calls (nil: none configured).
	ai *ai.Service

	// confinement is what SetConfinement recorded, for /readyz.
	confinement atomic.Pointer[Confinement]
}

// New opens the data directory, starts a host for each profile in use and
// loads every module uploaded before, so that a restarted server serves
// what it served before.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg.fillDefaults()
	if err := cfg.validate(nil); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		var level slog.Level
		_ = level.UnmarshalText([]byte(cfg.Log.Level))
		opts := &slog.HandlerOptions{Level: level, ReplaceAttr: host.SafeLogAttr} // DEL, which both handlers leave raw
		if cfg.Log.Format == "json" {
			log = slog.New(slog.NewJSONHandler(os.Stderr, opts))
		} else {
			log = slog.New(slog.NewTextHandler(os.Stderr, opts))
		}
	}
	mode, err := cfg.MigrateMode()
	if err != nil {
		return nil, fmt.Errorf("server: migrate: %w", err)
	}
	st, err := store.OpenWith(ctx, cfg.StoreLocation(), store.MigrateOptions{Mode: mode, Log: log})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	// Replicas share the database, so their rate buckets are there;
	// a SQLite file belongs to one process (see rateLimit).
	var shared rateTaker
	if cfg.DatabaseURL != "" {
		shared = st
	}
	s := &Server{
		cfg: cfg, log: log, store: st, audit: audit.New(st, slog.New(guestLogCapture{inner: log.Handler()})), hosts: map[string]*host.Host{}, exec: cfg.Executor,
		auth:      newAuthenticator(st, log),
		keyRate:   newRateLimit(cfg.Limits.KeyRate, cfg.Limits.KeyBurst, shared, "key:"),
		orgRate:   newRateLimit(cfg.Limits.OrgRate, cfg.Limits.OrgBurst, shared, "org:"),
		piston:    newRateLimit(cfg.Piston.Limits.Rate, cfg.Piston.Limits.Burst, shared, "piston:"),
		routeRate: newRateLimit(cfg.Routes.RouteRate, cfg.Routes.RouteBurst, shared, "route:"),
		addrRate:  newRateLimit(cfg.Routes.AddressRate, cfg.Routes.AddressBurst, shared, "addr:"),
		invocations: newAdmission("invocations", cfg.Admission.MaxInvocations, cfg.Admission.OrgInvocations,
			time.Duration(cfg.Admission.Wait), cfg.Admission.Queue),
		execs: newAdmission("runs", cfg.Admission.MaxRuns, cfg.Admission.OrgRuns, time.Duration(cfg.Admission.Wait), cfg.Admission.Queue),
	}
	// One Service for every host, so each provider's bound on calls in
	// flight holds for the whole server.
	if cfg.AI.Enabled() {
		if s.ai, err = ai.New(cfg.AI, st, log); err != nil {
			s.abort(ctx)
			var ce *ai.ConfigError
			if errors.As(err, &ce) {
				return nil, fmt.Errorf("server: %s: ai.%s: %s", cfg.File, ce.Field, ce.Msg)
			}
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	// One vault for every host: a request's injected secret is read in
	// its caller's organization, whichever profile applies to it.
	s.vault = secrets.NewVault(st, cfg.SecretsKey, vaultAudit{s}).WithOldKeys(cfg.SecretsOldKeys...)
	// One bound on native plugin workers for the whole server, whatever
	// profile each organization's modules load under.
	s.nativeWorkers = native.NewWorkerSlots(cfg.Modules.MaxNativeWorkers)
	nativeWorkers := s.nativeWorkers
	// One bound on image decodes, and one media URL key, for every host.
	decodes := media.NewDecodeSlots(int64(cfg.Media.DecodeBytes))
	if s.mediaKey, s.mediaKeyOwn, err = mediaURLKey(cfg.Media, cfg.DataDir); err != nil {
		s.abort(ctx)
		return nil, fmt.Errorf("server: %w (set media.url_key_file or $%s)", err, EnvMediaKey)
	}
	// The op families' configuration, the same for every host: what the
	// server made once above (the model service, whose bounds on calls in
	// flight are the server's; the vault; the decode bound) is shared.
	families := cfg.FamilyConfigs(map[string]any{
		"ai":      &ai.FamilyConfig{Service: s.ai},
		"media":   &media.FamilyConfig{QuotaBytes: cfg.Media.QuotaBytes, Decodes: decodes},
		"secrets": &ops.SecretsConfig{Source: s.vault},
		"tasks":   &ops.TasksConfig{MaxQueued: cfg.Tasks.MaxQueued},
	})
	if len(cfg.DisableFamilies) > 0 {
		log.Info("op families disabled by the configuration: their ops are refused to every module", "families", cfg.DisableFamilies)
	}
	profiles := []string{cfg.Profile}
	for _, p := range cfg.Profiles {
		profiles = append(profiles, p)
	}
	for _, name := range profiles {
		if s.hosts[name] != nil {
			continue
		}
		prof, err := policy.LoadProfile(name)
		if err != nil {
			s.abort(ctx)
			return nil, fmt.Errorf("server: profile %s: %w", name, err)
		}
		h, err := host.New(ctx, host.Config{
			DataDir: cfg.DataDir, CacheDir: cfg.CacheDir, MachineCacheDir: cfg.MachineCacheDir, Store: st, Audit: s.audit, Logger: slog.New(guestLogCapture{inner: log.Handler()}), Profile: prof, NativeWorkers: nativeWorkers,
			Limits: host.Limits{Timeout: time.Duration(cfg.Limits.InvocationTimeout),
				MaxTableElements: uint32(cfg.Limits.MaxTableElements), Budget: cfg.Limits.Budget.Limits()},
			CodeKey: []byte(cfg.CodeKey), CodeBudget: int64(cfg.Modules.SharedCodeBytes),
			Families: families,
			// s.metrics is made below, before any module loads.
			ObserveOp: func(o ops.Observation) {
				if m := s.metrics; m != nil {
					m.observeOp(o)
				}
			},
		})
		if err != nil {
			s.abort(ctx)
			return nil, fmt.Errorf("server: %w", err)
		}
		s.hosts[name] = h
	}
	s.logCodeSharing()
	if s.mediaKeyOwn && cfg.DatabaseURL != "" {
		log.Warn("media URLs are signed with this replica's own key (data_dir/"+mediaKeyFile+"): a URL signed here is refused by the other replicas; "+
			"give every replica the same secret in $"+EnvMediaKey+" or media.url_key_file", "knob", "media.url_key_file")
	}
	if s.exec == nil && cfg.NewExecutor != nil {
		if s.exec, err = cfg.NewExecutor(s.hosts[cfg.Profile], s.audit); err != nil {
			s.abort(ctx)
			return nil, fmt.Errorf("server: code executor: %w", err)
		}
	}
	s.modules = newRegistry(s)
	s.metrics = newMetrics(s)
	if err := s.startSessions(); err != nil {
		s.abort(ctx)
		return nil, fmt.Errorf("server: sessions: %w", err)
	}
	s.echo = s.router()
	// The feed first, then the list: a change committed in between is
	// both listed and delivered, and applying it twice changes nothing.
	wctx, stopWatch := context.WithCancel(context.Background())
	changes, err := st.WatchModules(wctx)
	if err != nil {
		stopWatch()
		s.abort(ctx)
		return nil, fmt.Errorf("server: follow module changes: %w", err)
	}
	if err := s.modules.loadAll(ctx); err != nil {
		stopWatch()
		s.abort(ctx)
		return nil, err
	}
	s.stopWatch, s.watchDone = stopWatch, make(chan struct{})
	go func() {
		defer close(s.watchDone)
		s.modules.follow(wctx, changes)
	}()
	if err := s.startTasks(); err != nil {
		s.Close(ctx)
		return nil, err
	}
	s.startJudge0()
	s.startWarming()
	s.startAuditPrune()
	s.ready.Store(true)
	return s, nil
}

// logCodeSharing says once, at start, whether this replica shares
// compiled code with the others: on a shared database without a code key
// every replica compiles every module itself (seconds for a large one, at
// each change and each restart), which an operator should know and be
// told how to change.
func (s *Server) logCodeSharing() {
	shares := s.cfg.CodeKey != ""
	for _, h := range s.hosts {
		shares = shares && h.SharesCode()
	}
	switch {
	case shares:
		s.log.Info("compiled code is shared with the other replicas through the store", "budget", s.cfg.Modules.SharedCodeBytes)
	case s.cfg.CodeKey == "" && s.cfg.DatabaseURL != "":
		s.log.Warn("compiled code is not shared between replicas: no code key, so each replica compiles every module itself "+
			"and trusts no compiled code from the database; give every replica the same secret in $"+EnvCodeKey+" or code_key_file to share it",
			"knob", "code_key_file")
	}
}

// hostFor returns the host whose profile applies to org.
func (s *Server) hostFor(org string) *host.Host {
	if p, ok := s.cfg.Profiles[org]; ok {
		return s.hosts[p]
	}
	return s.hosts[s.cfg.Profile]
}

// Handler is the server's HTTP handler, for embedding it in another server
// or an httptest.Server.
func (s *Server) Handler() http.Handler { return s.echo }

// Store is the store the server keeps keys, modules and audit events in.
func (s *Server) Store() *store.Store { return s.store }

// Config is the configuration the server runs with, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Listen opens the configured listen address.
func (s *Server) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w (set listen: in the config, or --listen)", s.cfg.Listen, err)
	}
	return ln, nil
}

// Serve serves HTTP (HTTPS when TLS is configured) on ln until Shutdown.
// It returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	hc := s.cfg.HTTP
	limited := newConnLimit(ln, hc.MaxConnections, hc.perSource())
	ln = limited
	hs := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: time.Duration(hc.ReadHeaderTimeout),
		IdleTimeout:       time.Duration(hc.IdleTimeout),
		MaxHeaderBytes:    int(hc.MaxHeaderBytes),
		ConnState:         limited.connState,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.conns.Store(limited)
	s.registerReplica(ln)
	s.httpMu.Lock()
	s.http = hs
	s.httpMu.Unlock()
	var err error
	if s.cfg.TLS.Cert != "" {
		hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		err = hs.ServeTLS(ln, s.cfg.TLS.Cert, s.cfg.TLS.Key)
	} else {
		err = hs.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ListenAndServe listens on the configured address and serves until ctx is
// done, then shuts down gracefully within Config.ShutdownTimeout.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := s.Listen()
	if err != nil {
		return err
	}
	if s.cfg.BeforeServe != nil {
		if err := s.cfg.BeforeServe(ln); err != nil {
			ln.Close()
			s.Close(context.Background())
			return err
		}
	}
	scheme := "http"
	if s.cfg.TLS.Cert != "" {
		scheme = "https"
	}
	s.log.Info("moat serve: listening", "url", scheme+"://"+ln.Addr().String(), "data", s.cfg.DataDir,
		"store", RedactURL(s.store.Path()), "profile", s.cfg.Profile)
	if scheme == "http" && !loopback(ln.Addr()) {
		s.log.Warn("moat serve: listening beyond this machine without TLS: API keys, inputs and outputs cross the network in clear",
			"listen", ln.Addr().String(), "fix", "set tls.cert and tls.key in the config, or listen on 127.0.0.1 behind a TLS-terminating proxy")
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close(context.Background())
		return err
	case <-ctx.Done():
	}
	s.log.Info("moat serve: shutting down; finishing requests in flight", "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.cfg.ShutdownTimeout))
	defer cancel()
	err = s.Shutdown(sctx)
	if serr := <-errc; serr != nil && err == nil {
		err = serr
	}
	return err
}

// Shutdown stops accepting connections, waits for the requests in flight
// on Serve's listener (invocations run to their end) and then closes
// modules, hosts and the store. A program serving Handler() on a server
// of its own shuts that server down first. /readyz reports 503 from the start of the shutdown, so a load
// balancer stops sending traffic.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	s.httpMu.Lock()
	hs := s.http
	s.httpMu.Unlock()
	var err error
	if hs != nil {
		// http.Server.Shutdown closes the listener, then waits for every
		// active connection to finish its request.
		if err = hs.Shutdown(ctx); err != nil {
			err = fmt.Errorf("server: shutdown: requests still in flight: %w", err)
		}
	}
	return errors.Join(err, s.Close(ctx))
}

// Close releases the modules, hosts and store without waiting for
// requests; Shutdown is the graceful way.
func (s *Server) Close(ctx context.Context) error {
	var err error
	s.closed.Do(func() {
		s.ready.Store(false)
		if s.stopWarm != nil {
			s.stopWarm()
			<-s.warmDone
		}
		if s.stopTasks != nil {
			s.stopTasks() // attempts in flight stop, their tasks go back to the queue
			<-s.tasksDone
		}
		s.stopJudge0()
		if s.stopWatch != nil {
			s.stopWatch()
			<-s.watchDone
		}
		if s.stopPrune != nil {
			s.stopPrune()
			<-s.pruneDone
		}
		s.stopReplica()
		s.closeSessions(ctx)
		s.deregisterReplica(ctx)
		s.modules.closeAll(ctx)
		s.auth.close(ctx)
		err = errors.Join(s.closeHosts(ctx), s.audit.Close(ctx), s.store.Close())
	})
	return err
}

// abort undoes a New that failed half-way.
func (s *Server) abort(ctx context.Context) {
	s.closeHosts(ctx)
	s.audit.Close(ctx)
	s.store.Close()
}

func (s *Server) closeHosts(ctx context.Context) error {
	var errs []error
	for _, h := range s.hosts {
		errs = append(errs, h.Close(ctx))
	}
	return errors.Join(errs...)
}

// newID makes a correlation id: 12 hex digits of milliseconds since the
// epoch, then 12 random ones. Ids made close in time sort close together,
// so the audit rows that carry them extend the end of the correlation
// index instead of dirtying a random page of it each; 48 random bits keep
// ids of the same millisecond apart, on one replica or several. The id is
// no secret (a client may choose its own), so it needs no crypto/rand.
func newID() string {
	var b [24]byte
	ms := uint64(time.Now().UnixMilli())
	r := rand.Uint64()
	const digits = "0123456789abcdef"
	for i := 11; i >= 0; i-- {
		b[i] = digits[ms&15]
		ms >>= 4
	}
	for i := 23; i >= 12; i-- {
		b[i] = digits[r&15]
		r >>= 4
	}
	return string(b[:])
}

// loopback says whether addr reaches only this machine: a loopback IP.
// The unspecified address (0.0.0.0, ::) listens on every interface.
func loopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
