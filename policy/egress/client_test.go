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
// header gets nothing; Check sees every hop, normalized.
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
		Check: func(_ context.Context, u *url.URL, d egress.Dest) error {
			hops = append(hops, d.String())
			return nil
		},
	})
	defer c.CloseIdleConnections()
	do := func(r egress.Request) (string, error) {
		req, d, err := c.Prepare(t.Context(), r)
		if err != nil {
			return "", err
		}
		resp, err := c.Do(req, d)
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
				t.Errorf("the server got %d requests and Check saw %d hops (%v), want %d and %d", hits.Load(), len(hops), hops, tt.hits, tt.hops)
			}
			for _, h := range hops {
				if !strings.HasPrefix(h, "http://127.0.0.1:") && !strings.HasPrefix(h, "http://lo.test:") {
					t.Errorf("Check saw %s, not a normalized destination", h)
				}
			}
		})
	}
}
