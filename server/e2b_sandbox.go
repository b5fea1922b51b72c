package server

// E2B's data plane: what an E2B SDK sends to a sandbox, on moat.
//
// E2B's SDKs reach a sandbox's daemon (envd, port 49983) and its code
// interpreter (port 49999) at one URL when sandboxUrl (E2B_SANDBOX_URL) is
// set, naming the sandbox and the port in the headers E2b-Sandbox-Id and
// E2b-Sandbox-Port, and proving the right to it with X-Access-Token, the
// envdAccessToken the control plane returned when the sandbox was made.
// moat answers that URL at /e2b/sandbox: the sandbox is a session, the
// token a MAC of the session and its owner under the server's signing key
// (every replica has it), so no table of tokens is kept and a token
// opens exactly one session of one owner.
//
// envd speaks Connect RPC with its JSON codec (the SDKs set
// useBinaryFormat: false). connect-go serves the protocol — envelopes,
// end-of-stream messages, error codes, timeouts — and jsonCodec lets its
// handlers take plain Go structs whose JSON is protojson's (camelCase
// names, 64-bit integers as strings, enums by name), so no generated code
// is needed. Each envd service mounts its procedures in a file of its own
// (e2b_filesystem.go, e2b_process.go), listed in envdServices.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server/sessions"
)

// The ports E2B's SDKs name in E2b-Sandbox-Port.
const (
	e2bEnvdPort        = "49983"
	e2bInterpreterPort = "49999"
)

// e2bSandboxPrefix is where the data plane is served (sandboxUrl).
const e2bSandboxPrefix = "/e2b/sandbox"

// e2bTokenPrefix separates the MAC of an envd access token from any other
// the signing key makes.
const e2bTokenPrefix = "moat e2b envd token v1\x00"

// e2bAccessToken is the envdAccessToken of owner's session id.
func (s *Server) e2bAccessToken(id string, owner policy.Principal) string {
	m := hmac.New(sha256.New, s.mediaKey)
	m.Write([]byte(e2bTokenPrefix))
	for _, f := range []string{id, owner.Org, owner.User} {
		m.Write([]byte(f))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// e2bSandbox is the session a data-plane request addresses, its token
// checked.
type e2bSandbox struct {
	Session *sessions.Session
	Owner   policy.Principal
	// Correlation is the request's correlation id, for the audit trail.
	Correlation string
}

type e2bSandboxKey struct{}

// sandboxOf returns the sandbox a data-plane handler serves (set by
// e2bDataPlane before any handler runs).
func sandboxOf(ctx context.Context) *e2bSandbox {
	sb, _ := ctx.Value(e2bSandboxKey{}).(*e2bSandbox)
	return sb
}

// envdServices mount the procedures of envd's services on a mux; each
// service's file appends its own in an init function.
var envdServices []func(s *Server, mux *http.ServeMux, opts ...connect.HandlerOption)

// interpreterRoutes mount the code interpreter's routes (port 49999).
var interpreterRoutes []func(s *Server, mux *http.ServeMux)

// e2bMuxes builds the data plane's two muxes once, at start.
func (s *Server) e2bMuxes() (envd, interp *http.ServeMux) {
	envd, interp = http.NewServeMux(), http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithCodec(jsonCodec{}), connect.WithReadMaxBytes(8 << 20)}
	for _, mount := range envdServices {
		mount(s, envd, opts...)
	}
	for _, mount := range interpreterRoutes {
		mount(s, interp)
	}
	return envd, interp
}

// e2bDataPlane answers /e2b/sandbox/*: it finds the session the headers
// name, checks the access token in constant time, and hands the request,
// its path stripped of the prefix, to the port's mux. Every refusal looks
// the same (404), so a caller without the token learns nothing of which
// sessions exist.
func (s *Server) e2bDataPlane(envd, interp *http.ServeMux) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		id, token := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("X-Access-Token")
		if token == "" {
			// The code interpreter SDK sends the access token on /execute
			// only; its context calls carry the traffic token, which the
			// control plane answers with the same MAC (e2b.go).
			token = r.Header.Get("E2B-Traffic-Access-Token")
		}
		var mux *http.ServeMux
		switch port := r.Header.Get("E2b-Sandbox-Port"); port {
		case e2bEnvdPort:
			mux = envd
		case e2bInterpreterPort:
			mux = interp
		case "":
			return problem(http.StatusBadRequest, "invalid", "the E2b-Sandbox-Port header is missing: moat serves envd (%s) and the code interpreter (%s) at this URL, chosen by that header, as E2B's SDKs send it", e2bEnvdPort, e2bInterpreterPort)
		default:
			return problem(http.StatusNotFound, "not_found", "port %.8q of a sandbox is not served by moat: only envd (%s) and the code interpreter (%s) are", port, e2bEnvdPort, e2bInterpreterPort)
		}
		owner, ok := s.e2bOwner(r.Context(), id, token)
		if !ok && mux == envd && strings.TrimPrefix(r.URL.Path, e2bSandboxPrefix) == "/health" {
			// E2B's proxy answers 502 for a sandbox that is gone, and the
			// SDKs' isRunning reads that as false; every refusal of
			// /health is that answer, so it too tells nothing of which
			// sessions exist.
			return problem(http.StatusBadGateway, "not_found", "sandbox %.64q is not running (or the token is not its)", id)
		}
		if !ok {
			return problem(http.StatusNotFound, "not_found", "no sandbox %.64q for this access token: the token is the envdAccessToken its creation returned (Sandbox.connect gives it again)", id)
		}
		// No API key on this plane: the owner's organization pays, from
		// the same bucket its keys draw on.
		if ok, wait, err := s.orgRate.take(r.Context(), owner.Org, time.Now()); err != nil {
			return rateUnavailable(err)
		} else if !ok {
			return rateLimited("organization", wait)
		}
		sess, err := s.sessions.Get(owner, id)
		if err != nil {
			// Another replica's: routed there as the owner, whose token
			// goes with the call and is checked again by the holder.
			stateOf(c).principal = owner
			if handled, perr := s.proxySession(c, id); handled {
				return perr
			}
			return sessionProblem(err)
		}
		ctx := context.WithValue(r.Context(), e2bSandboxKey{}, &e2bSandbox{Session: sess, Owner: owner, Correlation: correlationID(c)})
		r2 := r.Clone(ctx)
		r2.URL.Path = strings.TrimPrefix(r.URL.Path, e2bSandboxPrefix)
		r2.URL.RawPath = ""
		if r2.URL.Path == "" {
			r2.URL.Path = "/"
		}
		mux.ServeHTTP(c.Response(), r2)
		return nil
	}
}

// e2bOwner returns the owner of session id if token is its access token:
// a session of this replica, or one the session directory says another
// replica holds (or holds paused).
func (s *Server) e2bOwner(ctx context.Context, id, token string) (policy.Principal, bool) {
	if s.sessions == nil || !sessions.ValidID(id) || token == "" || len(token) > 128 {
		return policy.Principal{}, false
	}
	owner, ok := s.sessions.Owner(id)
	if !ok && s.replicas != nil {
		if e, err := s.store.SessionEntry(ctx, id); err == nil {
			owner, ok = policy.Principal{Org: e.Org, User: e.User}, true
		}
	}
	if !ok {
		return policy.Principal{}, false
	}
	want := s.e2bAccessToken(id, owner)
	return owner, hmac.Equal([]byte(token), []byte(want))
}

// jsonCodec is Connect's "json" codec over encoding/json, for handlers
// whose messages are plain structs tagged with protojson's names. It
// refuses unknown fields no more than protojson does (it ignores them),
// and marshals without HTML escaping, as protojson does.
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil // an empty message, as protojson reads it
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("the message is not the JSON this procedure takes: %w", err)
	}
	return nil
}

// connectErr makes a Connect error of a sessions or host error: the
// codes E2B's SDKs turn into their own exceptions (NotFoundError,
// InvalidArgumentError, ...).
func connectErr(err error) *connect.Error {
	var se *sessions.Error
	if errors.As(err, &se) {
		code, ok := map[string]connect.Code{"not_found": connect.CodeNotFound, "invalid_argument": connect.CodeInvalidArgument,
			"resource_exhausted": connect.CodeResourceExhausted, "too_large": connect.CodeResourceExhausted,
			"conflict": connect.CodeAlreadyExists, "denied": connect.CodePermissionDenied}[se.Code]
		if ok {
			return connect.NewError(code, err)
		}
	}
	return connect.NewError(connect.CodeInternal, err)
}

// e2bMaxStream bounds how long one stream of the data plane (WatchDir,
// a run's output) may be written: past http.write_timeout, which the
// front door sets when the response starts, and no further.
const e2bMaxStream = time.Hour

// longWriter extends the write deadline to until once the response has
// started (the front door sets http.write_timeout then), so a stream
// outlives the write timeout by as much as its handler allows and no more.
type longWriter struct {
	http.ResponseWriter
	until   time.Time
	started bool
}

func (w *longWriter) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code)
	if !w.started {
		w.started = true
		_ = setDeadline(w.ResponseWriter, false, w.until)
	}
}

func (w *longWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *longWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *longWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// e2bStream serves h with a write deadline of d from the request's start.
func e2bStream(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&longWriter{ResponseWriter: w, until: time.Now().Add(d)}, r)
	})
}
