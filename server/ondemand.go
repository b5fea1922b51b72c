package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/moat-sandbox/moat/host/store"
)

// A module the store holds is never a 404 on a replica that has not loaded
// it yet: replicas learn of uploads, replacements and deletions through the
// store's change feed (follow), and a replica loading a change (compiling a
// Go module, fetching machine code, building a Python plugin: seconds) used
// to answer "no module" meanwhile, after another replica had answered 201.
// Every route that looks a module up goes through ensure instead, which
// asks the store when the registry has nothing and loads on demand.
//
// Loads are shared: one load per module name at a time on a replica,
// whether a request or the change feed asked for it (flight), and every
// request for it waits on that one, up to modules.load_wait; past it the
// request is answered 503 with Retry-After, and the load goes on (it runs
// under the registry's lifetime, not the request's), so that the retry
// finds it loaded. A version that does not load here is remembered for
// failedLoadTTL, so that requests for it do not each start a load of
// seconds again.
//
// The hot path is unchanged: a loaded module is found in memory without
// asking the store.

// failedLoadTTL is how long a version that did not load here answers 503
// at once before a request tries to load it again.
const failedLoadTTL = 30 * time.Second

// DefaultModuleLoadWait is modules.load_wait's default: longer than a
// Python plugin's first build (15–20 s on 2 cores), shorter than a
// client's usual timeout.
const DefaultModuleLoadWait = 30 * time.Second

// flight is one sync of a module name in progress on this replica.
type flight struct {
	done    chan struct{}
	err     error // reading the store failed: retried by whoever asked
	loadErr error // the store's current version does not load here
}

// failedLoad is a version that did not load here, and when.
type failedLoad struct {
	v   store.ModuleVersion
	err error
	at  time.Time
}

// errRegistryClosed is a flight's error once the server is closing.
var errRegistryClosed = errors.New("server: closing; no module is loaded any more")

// shared starts a sync of org/name, or joins the one in flight. The sync
// runs under the registry's lifetime: a request that stops waiting does
// not stop it. why names the trigger in the log ("request", "change").
func (r *registry) shared(org, name, why string) *flight {
	k := modKey{org, name}
	r.flightMu.Lock()
	defer r.flightMu.Unlock()
	if f := r.flights[k]; f != nil {
		return f
	}
	f := &flight{done: make(chan struct{})}
	if r.life.Err() != nil {
		f.err = errRegistryClosed
		close(f.done)
		return f
	}
	r.flights[k] = f
	r.flightWG.Add(1)
	go func() {
		defer r.flightWG.Done()
		f.loadErr, f.err = r.syncOnce(r.life, org, name, why)
		r.flightMu.Lock()
		delete(r.flights, k)
		r.flightMu.Unlock()
		close(f.done)
	}()
	return f
}

// loadingError is a request that stopped waiting for its module's load.
type loadingError struct {
	org, name string
	wait      time.Duration
}

func (e *loadingError) Error() string {
	return fmt.Sprintf("module %s of organization %s is still loading on this replica after %s", e.name, e.org, e.wait)
}

// loadFailedError is a stored version that does not load on this replica.
type loadFailedError struct {
	v   store.ModuleVersion
	err error
}

func (e *loadFailedError) Error() string {
	return fmt.Sprintf("module %s of organization %s (digest %s) does not load on this replica: %v", e.v.Name, e.v.Org, short(e.v.Digest), e.err)
}

func (e *loadFailedError) Unwrap() error { return e.err }

func short(digest string) string { return digest[:min(12, len(digest))] }

// ensure returns org/name's loaded current version, loading it when the
// store holds it and this replica has not loaded it yet; nil when the
// store holds no such module. It waits for the load up to
// modules.load_wait and ctx, then returns a *loadingError; a version that
// does not load here is a *loadFailedError.
func (r *registry) ensure(ctx context.Context, org, name string) (*entry, error) {
	if e := r.get(org, name); e != nil {
		return e, nil
	}
	return r.ensureUntil(ctx, org, name, time.Now().Add(r.loadWait()))
}

// ensureUntil is ensure waiting for the load until deadline. The store is
// read under ctx alone: a short modules.load_wait bounds the wait for a
// load, never the answer that the store holds no such module.
func (r *registry) ensureUntil(ctx context.Context, org, name string, deadline time.Time) (*entry, error) {
	if e := r.get(org, name); e != nil {
		return e, nil
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	loading := &loadingError{org: org, name: name, wait: r.loadWait()}
	// A flight may have loaded a version the store has since replaced
	// (its sync then swaps nothing in): ask again, a few times.
	for range 3 {
		cur, err := r.current(ctx, org, name)
		if err != nil {
			return nil, err
		}
		if cur == nil {
			return nil, nil
		}
		r.flightMu.Lock()
		fl, failed := r.failures[modKey{org, name}]
		r.flightMu.Unlock()
		if failed && sameCode(fl.v, *cur) && time.Since(fl.at) < failedLoadTTL {
			return nil, &loadFailedError{v: *cur, err: fl.err}
		}
		f := r.shared(org, name, "request")
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, loading
		case <-timer.C:
			return nil, loading
		}
		if e := r.get(org, name); e != nil {
			return e, nil
		}
		if f.err != nil {
			return nil, f.err
		}
		if f.loadErr != nil {
			return nil, &loadFailedError{v: *cur, err: f.loadErr}
		}
	}
	return nil, loading
}

// recordFailure remembers that v did not load here (nil err forgets it).
func (r *registry) recordFailure(v store.ModuleVersion, err error) {
	r.flightMu.Lock()
	defer r.flightMu.Unlock()
	if err == nil {
		delete(r.failures, modKey{v.Org, v.Name})
		return
	}
	r.failures[modKey{v.Org, v.Name}] = failedLoad{v: v, err: err, at: time.Now()}
}

// stopFlights ends the registry's lifetime and waits for the loads in
// flight, so that none swaps a module in after closeAll.
func (r *registry) stopFlights() {
	r.flightMu.Lock()
	r.stopLife()
	r.flightMu.Unlock()
	r.flightWG.Wait()
}

// moduleProblem turns ensure's answer into the response of a route that
// needs the module: 404 only when the store holds no such module.
func (s *Server) moduleProblem(org, name, correlation string, e *entry, err error) error {
	var le *loadingError
	var fe *loadFailedError
	switch {
	case errors.As(err, &le):
		p := problem(http.StatusServiceUnavailable, "unavailable",
			"module %q of organization %s is stored but still loading on this replica (it was uploaded or changed through another replica); a request waits for it up to %s (modules.load_wait); retry shortly",
			name, org, le.wait)
		p.RetryAfter = 2
		return p
	case errors.As(err, &fe):
		s.log.Error("module stored but not loadable on this replica", "org", org, "module", name, "digest", fe.v.Digest, "correlation_id", correlation, "err", fe.err)
		p := problem(http.StatusServiceUnavailable, "unavailable",
			"module %q of organization %s is stored but does not load on this replica; the server log has the reason under correlation id %s; upload it again, or ask the operator",
			name, org, correlation)
		p.RetryAfter = int(failedLoadTTL / time.Second)
		return p
	case err != nil:
		return err
	case e == nil:
		return problem(http.StatusNotFound, "not_found", "no module %q in organization %s; GET /v1/modules lists them", name, org)
	}
	return nil
}

// loadWait is modules.load_wait.
func (r *registry) loadWait() time.Duration {
	if w := time.Duration(r.s.cfg.Modules.LoadWait); w > 0 {
		return w
	}
	return DefaultModuleLoadWait
}

// awaitModule is the middleware of the invoke route, before admission: it
// reads the body (as admit does, which then takes it from the request's
// state) and finds the module, loading it on demand (lookup), so that the
// requests waiting for a load hold no admission slot (with
// admission.org_invocations at 1, three callers waiting for a 10 s
// compile were refused 429 at admission.wait while the fourth held the
// slot) and a module the store does not hold is a 404 before admission.
func (s *Server) awaitModule(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.modules.get(principalOf(c).Org, c.Param("name")) == nil {
			body, err := readBody(c, int64(s.cfg.Limits.MaxRequestBytes), "limits.max_request_bytes")
			if err != nil {
				return err
			}
			st := stateOf(c)
			st.body, st.bodyRead = body, true
			c.Request().Body = io.NopCloser(bytes.NewReader(body))
			if _, err := s.lookup(c); err != nil {
				return err
			}
		}
		return next(c)
	}
}
