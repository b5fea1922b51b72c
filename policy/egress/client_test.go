package egress_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/policy/egress"
	"github.com/moat-sandbox/moat/policy/egress/egresstest"
)

// TestClient: a real loopback server granted by its address is reached,
// also through a name and a redirect; the same server reached through a
// name that is not granted by address, a redirect loop, or a rejected
// header gets nothing; Before sees every hop, normalized.
func TestClient(t *testing.T) {
	var hits atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/to":
			http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
		default:
			io.WriteString(w, "ok "+r.Host)
		}
	}))
	defer s.Close()
	u, _ := url.Parse(s.URL)
	dns := egresstest.NewDNS(t, func(name string, _ int) []netip.Addr {
		if name == "lo.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")} // loopback, not the granted address
		}
		return nil
	})
	var hops []string
	c := egress.NewClient(egress.Config{
		Guard:    egress.NewGuard([]string{"http://127.0.0.1:" + u.Port()}),
		Resolver: dns.Resolver(),
	})
	defer c.CloseIdleConnections()
	hooks := egress.Hooks{Before: func(_ context.Context, h *egress.Hop) error {
		hops = append(hops, h.Dest.String())
		return nil
	}}
	do := func(r egress.Request) (string, error) {
		resp, _, err := c.Send(t.Context(), r, hooks)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	port := u.Port()
	for _, tt := range []struct {
		name string
		r    egress.Request
		want string // body, or
		rule string // the refusal's rule
		hits int32
		hops int
	}{
		{name: "granted by address, decimal form", r: egress.Request{URL: "http://2130706433:" + port + "/"}, want: "ok 127.0.0.1:" + port, hits: 1, hops: 1},
		{name: "redirect to the mapped form", r: egress.Request{URL: s.URL + "/to?u=" + url.QueryEscape("http://[::ffff:127.0.0.1]:"+port+"/")}, want: "ok 127.0.0.1:" + port, hits: 2, hops: 2},
		{name: "a name resolving to another loopback address", r: egress.Request{URL: "http://lo.test:" + port + "/"}, rule: "address", hops: 1},
		{name: "redirect loop", r: egress.Request{URL: s.URL + "/loop"}, rule: "redirect", hits: 6, hops: 6},
		{name: "header injection", r: egress.Request{URL: s.URL, Header: map[string]string{"X": "a\r\nB: c"}}, rule: "header"},
		{name: "TRACE", r: egress.Request{URL: s.URL, Method: "trace"}, rule: "method"},
		{name: "X-Original-URL", r: egress.Request{URL: s.URL + "/v1/", Header: map[string]string{"X-Original-URL": "/admin"}}, rule: "header"},
		{name: "X-Rewrite-URL", r: egress.Request{URL: s.URL + "/v1/", Header: map[string]string{"x-rewrite-url": "/admin"}}, rule: "header"},
		{name: "X-Forwarded-Host", r: egress.Request{URL: s.URL, Header: map[string]string{"X-Forwarded-Host": "evil.test"}}, rule: "header"},
		{name: "X-Forwarded-For", r: egress.Request{URL: s.URL, Header: map[string]string{"X-FORWARDED-FOR": "127.0.0.1"}}, rule: "header"},
		{name: "Forwarded", r: egress.Request{URL: s.URL, Header: map[string]string{"Forwarded": "host=evil.test"}}, rule: "header"},
		{name: "X-Real-IP", r: egress.Request{URL: s.URL, Header: map[string]string{"X-Real-IP": "10.0.0.1"}}, rule: "header"},
		{name: "X-HTTP-Method-Override", r: egress.Request{URL: s.URL, Header: map[string]string{"X-HTTP-Method-Override": "DELETE"}}, rule: "header"},
		{name: "a Proxy- header", r: egress.Request{URL: s.URL, Header: map[string]string{"Proxy-Anything": "x"}}, rule: "header"},
		{name: "Expect", r: egress.Request{URL: s.URL, Header: map[string]string{"Expect": "100-continue"}}, rule: "header"},
		{name: "Host naming another server", r: egress.Request{URL: s.URL, Header: map[string]string{"host": "evil.test"}}, rule: "header"},
		{name: "zone", r: egress.Request{URL: "http://[::1%25lo]:" + port + "/"}, rule: "destination"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hits.Store(0)
			hops = nil
			body, err := do(tt.r)
			var e *egress.Error
			switch {
			case tt.rule == "" && (err != nil || body != tt.want):
				t.Errorf("got %q, %v; want %q", body, err, tt.want)
			case tt.rule != "" && (!errors.As(err, &e) || e.Rule != tt.rule):
				t.Errorf("got %q, %v; want a %s refusal", body, err, tt.rule)
			}
			if hits.Load() != tt.hits || len(hops) != tt.hops {
				t.Errorf("the server got %d requests and Before saw %d hops (%v), want %d and %d", hits.Load(), len(hops), hops, tt.hits, tt.hops)
			}
			for _, h := range hops {
				if !strings.HasPrefix(h, "http://127.0.0.1:") && !strings.HasPrefix(h, "http://lo.test:") {
					t.Errorf("Before saw %s, not a normalized destination", h)
				}
			}
		})
	}
}

// TestRedirectHops: each redirect is a hop of its own: 301, 302 and 303
// are followed with a GET and no body, 307 and 308 with the method and
// body; the module's credentials do not follow it to another host; what
// Before adds to one hop is not carried to the next; Redirected sees each
// redirect.
func TestRedirectHops(t *testing.T) {
	type seen struct{ method, body, auth, added, host string }
	var got []seen
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{r.Method, string(b), r.Header.Get("Authorization"), r.Header.Get("X-Added"), r.Host})
		if code := r.URL.Query().Get("code"); code != "" {
			w.Header().Set("Location", r.URL.Query().Get("to"))
			w.WriteHeader(map[string]int{"301": 301, "302": 302, "303": 303, "307": 307, "308": 308}[code])
			return
		}
		io.WriteString(w, "done")
	}))
	defer s.Close()
	u, _ := url.Parse(s.URL)
	dns := egresstest.NewDNS(t, func(name string, _ int) []netip.Addr {
		if name == "other.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		return nil
	})
	c := egress.NewClient(egress.Config{Guard: egress.NewGuard([]string{"http://127.0.0.1:" + u.Port()}), Resolver: dns.Resolver()})
	defer c.CloseIdleConnections()
	other := "http://other.test:" + u.Port() + "/end"
	for _, tt := range []struct {
		code       string
		to         string
		wantMethod string
		wantBody   string
		wantAuth   string
	}{
		{"301", "/end", "GET", "", "Bearer mine"},
		{"302", "/end", "GET", "", "Bearer mine"},
		{"303", "/end", "GET", "", "Bearer mine"},
		{"307", "/end", "POST", "payload", "Bearer mine"},
		{"308", "/end", "POST", "payload", "Bearer mine"},
		{"307", other, "POST", "payload", ""}, // another host: no credentials
	} {
		got = nil
		var redirects int
		hooks := egress.Hooks{
			Before: func(_ context.Context, h *egress.Hop) error {
				if h.N == 0 {
					h.Header.Set("X-Added", "first hop only")
				}
				return nil
			},
			Redirected: func(h *egress.Hop, resp *http.Response) { redirects++ },
		}
		to := s.URL + "/start?code=" + tt.code + "&to=" + url.QueryEscape(tt.to)
		resp, hop, err := c.Send(t.Context(), egress.Request{Method: "POST", URL: to, Body: []byte("payload"), Header: map[string]string{"Authorization": "Bearer mine"}}, hooks)
		if err != nil {
			t.Fatalf("%s to %s: %v", tt.code, tt.to, err)
		}
		resp.Body.Close()
		if len(got) != 2 || hop.N != 1 || redirects != 1 {
			t.Fatalf("%s: %d requests, last hop %d, %d redirects seen", tt.code, len(got), hop.N, redirects)
		}
		if g := got[1]; g.method != tt.wantMethod || g.body != tt.wantBody || g.auth != tt.wantAuth || g.added != "" {
			t.Errorf("%s to %s: the second hop was %+v; want %s %q with Authorization %q and nothing Before added to the first", tt.code, tt.to, g, tt.wantMethod, tt.wantBody, tt.wantAuth)
		}
		if got[0].added != "first hop only" {
			t.Errorf("the first hop lost what Before added: %+v", got[0])
		}
	}
}
