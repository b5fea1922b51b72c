package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server/sessions"
)

// Replicas and the routing of sessions between them (issue 31).
//
// A session's interpreters live in the memory of the replica that made
// it. Every replica on one database registers where its peers reach it
// (the store's replicas table, a heartbeat, rows that expire) and records
// which replica holds each session it makes (the session directory). A
// call for a session another replica holds is authenticated here, checked
// against the directory's owner, and reverse-proxied, streaming, to the
// holder with the caller's own credentials and correlation id; the holder
// authenticates it again as any request. See docs/RATIONALE.md ("A
// session lives on one replica, and every replica answers for it") and
// docs/SECURITY.md ("Routing between replicas").

// ReplicaConfig configures this replica's place among the replicas of one
// database (moat-server.yaml replica:).
type ReplicaConfig struct {
	// AdvertiseURL is where the other replicas reach this one
	// (http://10.0.0.7:8080); default: from the listen address, the host
	// name when it listens on every address.
	AdvertiseURL string `yaml:"advertise_url"`
	// SecretFile holds the secret every replica shares (at least 32
	// characters; $MOAT_REPLICA_SECRET wins over it). Without one,
	// sessions are not routed: a replica answers for its own.
	SecretFile string `yaml:"secret_file"`
	// Secret is the secret itself, for programs embedding the server.
	Secret string `yaml:"-"`
	// Heartbeat is how often the replica says it is alive (5s); one not
	// heard from for three heartbeats is taken to have stopped. Give
	// every replica the same.
	Heartbeat policy.Duration `yaml:"heartbeat"`
}

// EnvReplicaSecret names the environment variable moat serve reads the
// replica secret from (ReplicaConfig.Secret; it wins over secret_file),
// then removes from its environment: no native job inherits it.
const EnvReplicaSecret = "MOAT_REPLICA_SECRET"

// EnvReplicaURL names the environment variable that, set, moat serve
// takes for replica.advertise_url: a Kubernetes pod's is http://$(POD_IP):8080,
// known only when the pod starts.
const EnvReplicaURL = "MOAT_REPLICA_URL"

// MinReplicaSecretBytes is the least a replica secret may hold.
const MinReplicaSecretBytes = 32

// HeaderReplicaHop marks a request one replica proxied to another: the
// receiver never proxies it again, so two replicas whose directory
// disagrees cannot bounce a call between them.
const HeaderReplicaHop = "Moat-Replica-Hop"

const defaultHeartbeat = 5 * time.Second

func (r *ReplicaConfig) validate(fail failFunc) error {
	if r.AdvertiseURL != "" {
		u, err := url.Parse(r.AdvertiseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || len(r.AdvertiseURL) > store.MaxReplicaURLBytes {
			return fail("replica.advertise_url", "%q ($%s wins over it) must be http:// or https://, a host and a port, and nothing else (http://10.0.0.7:8080)", r.AdvertiseURL, EnvReplicaURL)
		}
		r.AdvertiseURL = strings.TrimSuffix(r.AdvertiseURL, "/")
	}
	if d := time.Duration(r.Heartbeat); d != 0 && (d < 100*time.Millisecond || d > 5*time.Minute) {
		return fail("replica.heartbeat", "%s is outside 100ms to 5m; leave it out for 5s", d)
	}
	if r.SecretFile != "" && r.Secret == "" {
		b, err := os.ReadFile(r.SecretFile)
		if err != nil {
			return fail("replica.secret_file", "%v", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		r.Secret = strings.TrimSpace(line)
	}
	if r.Secret != "" {
		if err := ValidateReplicaSecret(r.Secret); err != nil {
			return fail("replica.secret_file", "%v", err)
		}
	}
	return nil
}

// ValidateReplicaSecret checks a replica secret given outside the config
// file (EnvReplicaSecret). Its error never holds the secret.
func ValidateReplicaSecret(secret string) error {
	if len(secret) < MinReplicaSecretBytes {
		return fmt.Errorf("the replica secret is %d characters; use at least %d, the same on every replica (openssl rand -hex 32 makes one; or $%s)",
			len(secret), MinReplicaSecretBytes, EnvReplicaSecret)
	}
	return nil
}

// replicas is this replica's registration and its routing of sessions.
type replicas struct {
	id        string
	secret    []byte
	heartbeat time.Duration
	transport *http.Transport
	started   time.Time

	// peers caches the rows of the replicas this one proxied to, each
	// for a heartbeat: a routed call then costs one store read (the
	// directory entry), not two.
	peersMu sync.Mutex
	peers   map[string]peerRow

	url      atomic.Pointer[string] // set when Serve has a listener
	stopping atomic.Bool            // Close is ending the sessions: keep their entries
	stop     context.CancelFunc
	done     chan struct{}
}

// startReplicas prepares routing when a secret is configured and
// sessions are on; registration waits for Serve's listener.
func (s *Server) startReplicas() error {
	rc := s.cfg.Replica
	if s.sessions == nil {
		return nil
	}
	if rc.Secret == "" {
		if s.cfg.DatabaseURL != "" {
			s.log.Warn("sessions are not routed between replicas: a call for a session another replica holds is answered 404; "+
				"give every replica the same secret in $"+EnvReplicaSecret+" or replica.secret_file", "knob", "replica.secret_file")
		}
		return nil
	}
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	hb := time.Duration(rc.Heartbeat)
	if hb <= 0 {
		hb = defaultHeartbeat
	}
	s.replicas = &replicas{id: "r" + hex.EncodeToString(b), secret: []byte(rc.Secret), heartbeat: hb, started: time.Now(),
		transport: &http.Transport{
			Proxy:       nil, // replicas talk directly, never through $HTTP_PROXY
			DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			// The holder counts this replica as one source address
			// (http.max_connections_per_source): beyond that many calls
			// in flight to one peer, the rest wait here rather than be
			// refused there.
			MaxConnsPerHost:       s.cfg.HTTP.perSource(),
			MaxIdleConnsPerHost:   s.cfg.HTTP.perSource(),
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: 0, // a run answers when it ends; the holder bounds it
		}}
	return nil
}

type peerRow struct {
	row     store.Replica
	fetched time.Time
}

// peer returns replica id's row, from the cache when it was read less
// than a heartbeat ago.
func (r *replicas) peer(ctx context.Context, st *store.Store, id string) (*store.Replica, error) {
	r.peersMu.Lock()
	p, ok := r.peers[id]
	r.peersMu.Unlock()
	if ok && time.Since(p.fetched) < r.heartbeat {
		return &p.row, nil
	}
	row, err := st.Replica(ctx, id)
	if err != nil {
		return nil, err
	}
	r.peersMu.Lock()
	if r.peers == nil || len(r.peers) > 1024 {
		r.peers = map[string]peerRow{}
	}
	r.peers[id] = peerRow{row: *row, fetched: time.Now()}
	r.peersMu.Unlock()
	return row, nil
}

// replicaMAC authenticates a replica's row: only a holder of the secret
// can write a row this replica will send credentials to.
func (r *replicas) mac(id, u string) string {
	h := hmac.New(sha256.New, r.secret)
	h.Write([]byte("moat-replica-v1\x00" + id + "\x00" + u))
	return hex.EncodeToString(h.Sum(nil))
}

// registerReplica registers this replica, reached at the advertised URL
// or the listener's, and beats until Close.
func (s *Server) registerReplica(ln net.Listener) {
	r := s.replicas
	if r == nil || r.url.Load() != nil {
		return
	}
	u := s.cfg.Replica.AdvertiseURL
	if u == "" {
		scheme := "http"
		if s.cfg.TLS.Cert != "" {
			scheme = "https"
		}
		host, port, _ := net.SplitHostPort(ln.Addr().String())
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			if h, err := os.Hostname(); err == nil {
				host = h
			}
		}
		u = scheme + "://" + net.JoinHostPort(host, port)
	}
	r.url.Store(&u)
	ctx, cancel := context.WithCancel(context.Background())
	r.stop, r.done = cancel, make(chan struct{})
	beat := func() {
		now := time.Now()
		bctx, cancel := context.WithTimeout(ctx, r.heartbeat)
		defer cancel()
		if err := s.store.ReplicaBeat(bctx, store.Replica{ID: r.id, URL: u, MAC: r.mac(r.id, u), StartedAt: r.started, SeenAt: now}); err != nil && ctx.Err() == nil {
			s.log.Warn("replica heartbeat failed: other replicas may take this one for stopped", "replica", r.id, "err", err)
		}
	}
	beat()
	s.log.Info("moat serve: registered as a replica", "replica", r.id, "url", u)
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.heartbeat)
		defer t.Stop()
		var swept time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				beat()
			}
			if time.Since(swept) >= time.Minute {
				swept = time.Now()
				s.sweepDirectory(ctx)
			}
		}
	}()
}

// sweepDirectory deletes the rows of replicas gone for ten heartbeats
// (Replicas) and the directory entries of stopped replicas older than a
// session's longest life: until then they tell a caller that the session's
// replica stopped, after it the session would have ended anyway.
func (s *Server) sweepDirectory(ctx context.Context) {
	r := s.replicas
	now := time.Now()
	if _, err := s.store.Replicas(ctx, now, 3*r.heartbeat); err != nil && ctx.Err() == nil {
		s.log.Warn("replica directory: sweep", "err", err)
	}
	if _, err := s.store.SessionSweep(ctx, now.Add(-s.sessions.Config().MaxLifetime)); err != nil && ctx.Err() == nil {
		s.log.Warn("session directory: sweep", "err", err)
	}
}

// stopReplica stops the heartbeat; Close then ends the sessions (whose
// entries stay, naming this replica, so that the others answer that it
// stopped) and deregisterReplica removes the row.
func (s *Server) stopReplica() {
	r := s.replicas
	if r == nil {
		return
	}
	r.stopping.Store(true)
	if r.stop != nil {
		r.stop()
		<-r.done
	}
}

func (s *Server) deregisterReplica(ctx context.Context) {
	if r := s.replicas; r != nil && r.url.Load() != nil {
		if err := s.store.ReplicaDelete(ctx, r.id); err != nil {
			s.log.Warn("replica: deregister", "replica", r.id, "err", err)
		}
	}
}

// sessionCreated records in the directory that this replica holds a
// session (sessions.Config.OnCreate).
func (s *Server) sessionCreated(ctx context.Context, in sessions.Info) {
	r := s.replicas
	if r == nil || r.url.Load() == nil {
		return
	}
	info, _ := json.Marshal(in)
	err := s.store.SessionRecord(context.WithoutCancel(ctx), store.SessionEntry{ID: in.ID, Org: in.Org, User: in.User, Replica: r.id, Info: info, CreatedAt: in.StartedAt})
	if err != nil {
		s.log.Warn("session directory: the other replicas cannot route to this session", "session", in.ID, "err", err)
	}
}

// sessionEnded removes a session's entry (sessions.Config.OnEnd), or
// marks it paused when its image is in the store; while the replica
// stops, the entry stays to say so.
func (s *Server) sessionEnded(ctx context.Context, in sessions.Info) {
	r := s.replicas
	if r == nil || r.url.Load() == nil || r.stopping.Load() {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if ok, err := s.store.SessionImages(0).HasImage(ctx, in.Org, in.ID); err == nil && ok {
		in.State = sessions.StatePaused
		info, _ := json.Marshal(in)
		if err := s.store.SessionRecord(ctx, store.SessionEntry{ID: in.ID, Org: in.Org, User: in.User, Replica: "", Info: info, CreatedAt: in.StartedAt}); err != nil {
			s.log.Warn("session directory: mark paused", "session", in.ID, "err", err)
		}
		return
	}
	if _, err := s.store.SessionForget(ctx, in.ID, r.id); err != nil {
		s.log.Warn("session directory: forget", "session", in.ID, "err", err)
	}
}

// sessionAuth is auth followed by the routing of a call for a session
// another replica holds (every route with an :id).
func (s *Server) sessionAuth(auth echo.MiddlewareFunc) echo.MiddlewareFunc {
	if s.replicas == nil {
		return auth
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return auth(func(c echo.Context) error {
			if id := c.Param("id"); id != "" {
				if handled, err := s.proxySession(c, id); handled {
					return err
				}
			}
			return next(c)
		})
	}
}

// proxySession answers an authenticated call for session id when another
// replica holds it: proxied there, or refused with what happened to it.
// handled is false when the call is this replica's to answer (the
// session is here, or is not the caller's, or routing is off): the
// caller's handler then answers it, 404 for a session not the caller's.
// The E2B layer calls it with the id of E2b-Sandbox-Id.
func (s *Server) proxySession(c echo.Context, id string) (handled bool, err error) {
	r := s.replicas
	if r == nil || s.sessions == nil || r.url.Load() == nil || !sessions.ValidID(id) {
		return false, nil
	}
	p := principalOf(c)
	if _, err := s.sessions.Get(p, id); err == nil {
		return false, nil // here
	}
	ctx := c.Request().Context()
	e, err := s.store.SessionEntry(ctx, id)
	if errors.Is(err, store.ErrSessionEntryNotFound) {
		return false, nil
	}
	if err != nil {
		return true, problem(http.StatusServiceUnavailable, "unavailable", "session %s: the session directory could not be read: %v; try again", id, err)
	}
	if e.Org != p.Org || e.User != p.User || e.Replica == r.id {
		return false, nil // not the caller's (404 as any), or here and ended
	}
	if e.Replica == "" {
		if strings.HasSuffix(c.Request().URL.Path, "/resume") {
			return false, nil
		}
		return true, problem(http.StatusConflict, "session_paused", "session %s is paused: its image is in the store; resume it (POST /v1/sessions/%s/resume) on any replica, then call it again", id, id)
	}
	if c.Request().Header.Get(HeaderReplicaHop) != "" {
		return true, problem(http.StatusLoopDetected, "replica_loop", "session %s: replica %s sent this call here, but the session directory names replica %s; a call is routed once (%s), never again",
			id, c.Request().Header.Get(HeaderReplicaHop), e.Replica, HeaderReplicaHop)
	}
	holder, err := r.peer(ctx, s.store, e.Replica)
	if err == nil && time.Since(holder.SeenAt) > 3*r.heartbeat {
		err = store.ErrReplicaNotFound
	}
	if errors.Is(err, store.ErrReplicaNotFound) {
		return true, problem(http.StatusGone, "session_replica_gone", "session %s lived on replica %s, which has stopped: a session ends with its replica unless it was paused (its memory was that replica's); create a new session", id, e.Replica)
	}
	if err != nil {
		return true, problem(http.StatusServiceUnavailable, "unavailable", "session %s: the replica directory could not be read: %v; try again", id, err)
	}
	if !hmac.Equal([]byte(holder.MAC), []byte(r.mac(holder.ID, holder.URL))) {
		s.log.Error("replica directory: a replica's row does not carry this cluster's secret; refusing to send a caller's credentials to it",
			"replica", holder.ID, "url", holder.URL, "session", id, "knob", "replica.secret_file")
		return true, problem(http.StatusBadGateway, "replica_unverified", "session %s: the replica holding it could not be verified (its registration does not carry this cluster's replica secret); the operator must give every replica the same replica.secret_file", id)
	}
	target, err := url.Parse(holder.URL)
	if err != nil {
		return true, problem(http.StatusBadGateway, "replica_unverified", "session %s: replica %s registered an unusable URL", id, holder.ID)
	}
	correlation := correlationID(c)
	gone := false
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the holder's front door judges the Host the caller sent
			pr.Out.Header.Set(HeaderReplicaHop, r.id)
			pr.Out.Header.Set(HeaderRequestID, correlation)
		},
		Transport:     r.transport,
		FlushInterval: -1, // a stream's every write goes on at once
		ModifyResponse: func(res *http.Response) error {
			res.Header.Del(HeaderRequestID) // this replica's response has it already
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return // the caller left
			}
			gone = true
			s.log.Warn("replica: a proxied session call failed", "session", id, "replica", holder.ID, "url", holder.URL, "err", err)
		},
	}
	rp.ServeHTTP(c.Response(), c.Request())
	if gone && !c.Response().Committed {
		return true, problem(http.StatusGone, "session_replica_gone", "session %s lives on replica %s, which does not answer (it stopped or is unreachable): a session ends with its replica unless it was paused; create a new session", id, holder.ID)
	}
	return true, nil
}

// remoteSessions are the caller's sessions other replicas hold and its
// paused ones (in their state now: running or paused), for GET
// /v1/sessions and E2B's list: local ones are in have.
func (s *Server) remoteSessions(c echo.Context, have []sessions.Info) []sessions.Info {
	r := s.replicas
	if r == nil || r.url.Load() == nil {
		return have
	}
	p := principalOf(c)
	ctx := c.Request().Context()
	entries, err := s.store.SessionsOf(ctx, p.Org, p.User)
	if err != nil || len(entries) == 0 {
		return have
	}
	live, err := s.store.Replicas(ctx, time.Now(), 3*r.heartbeat)
	if err != nil {
		return have
	}
	alive := map[string]bool{"": true}
	for _, l := range live {
		alive[l.ID] = true
	}
	local := map[string]bool{}
	for _, in := range have {
		local[in.ID] = true
	}
	for _, e := range entries {
		if local[e.ID] || e.Replica == r.id || !alive[e.Replica] {
			continue
		}
		var in sessions.Info
		if json.Unmarshal(e.Info, &in) == nil && in.ID == e.ID {
			// Its state now, not as it was recorded: the directory's
			// entry names no replica while the session is paused.
			in.State = sessions.StateRunning
			if e.Replica == "" {
				in.State = sessions.StatePaused
			}
			have = append(have, in)
		}
	}
	return have
}
