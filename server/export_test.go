package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"connectrpc.com/connect"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server/sessions"
	"github.com/prometheus/client_golang/prometheus"
)

// SetBeforeCommit makes every upload of s call f after its load and before
// it stores the version: where a racing request lands in the tests.
func SetBeforeCommit(s *Server, f func()) { s.modules.beforeCommit = f }

// SetBeforeLoad makes every sync of s (a load on demand or through the
// change feed) call f before it loads a module: where a test holds a load
// in flight. Set it before the load it is for.
func SetBeforeLoad(s *Server, f func(org, name string)) { s.modules.beforeLoad = f }

// Loading is the number of module loads in flight on s.
func Loading(s *Server) int {
	s.modules.flightMu.Lock()
	defer s.modules.flightMu.Unlock()
	return len(s.modules.flights)
}

// PageBridge is the moat-page.js the server serves.
func PageBridge() []byte { return pageBridge }

// E2BAccessToken is the envdAccessToken of org/user's session id.
func E2BAccessToken(s *Server, id, org, user string) string {
	return s.e2bAccessToken(id, policy.Principal{Org: org, User: user})
}

// e2bEcho is a test-only envd service: the data plane's dispatch, token
// check and Connect JSON codec, without a real service's semantics.
type e2bEchoMsg struct {
	Text    string `json:"text"`
	Session string `json:"session,omitempty"`
}

func init() {
	envdServices = append(envdServices, func(s *Server, mux *http.ServeMux, opts ...connect.HandlerOption) {
		mux.Handle("/moattest.Echo/Say", connect.NewUnaryHandler("/moattest.Echo/Say",
			func(ctx context.Context, r *connect.Request[e2bEchoMsg]) (*connect.Response[e2bEchoMsg], error) {
				if r.Msg.Text == "" {
					return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("text is empty"))
				}
				return connect.NewResponse(&e2bEchoMsg{Text: r.Msg.Text, Session: sandboxOf(ctx).Session.ID()}), nil
			}, opts...))
		mux.Handle("/moattest.Echo/Repeat", connect.NewServerStreamHandler("/moattest.Echo/Repeat",
			func(ctx context.Context, r *connect.Request[e2bEchoMsg], st *connect.ServerStream[e2bEchoMsg]) error {
				for i := range 3 {
					if err := st.Send(&e2bEchoMsg{Text: fmt.Sprint(r.Msg.Text, i)}); err != nil {
						return err
					}
				}
				return connect.NewError(connect.CodeNotFound, errors.New("the end"))
			}, opts...))
	})
}

// SessionOf is org/user's live session id.
func SessionOf(s *Server, org, user, id string) (*sessions.Session, error) {
	return s.sessions.Get(policy.Principal{Org: org, User: user}, id)
}

// MetricNames are the names of every metric s registers, whether or not
// it has a series yet.
func MetricNames(s *Server) []string {
	ch := make(chan *prometheus.Desc, 256)
	go func() { s.metrics.reg.Describe(ch); close(ch) }()
	var names []string
	re := regexp.MustCompile(`fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)"`)
	for d := range ch {
		if m := re.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// SecretOf reads the secret name of org through s's vault, as a grant
// that injects it does.
func SecretOf(ctx context.Context, s *Server, org, name string) ([]byte, error) {
	return s.vault.Secret(ctx, org, name)
}
