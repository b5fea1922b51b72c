package extism_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/hosttest"
)

// TestHTTPRequest runs Extism's own http_request against real loopback
// servers: granted is served; a host or port that is not granted, a
// redirect to one, and a granted name that resolves to a loopback address
// are refused before any byte reaches the server.
func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	var hitsA, hitsB atomic.Int32
	var b *httptest.Server
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hitsA.Add(1)
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, b.URL+"/", http.StatusFound)
		case "/home":
			http.Redirect(w, r, "/", http.StatusFound)
		default:
			fmt.Fprint(w, "hello from a")
		}
	}))
	defer a.Close()
	b = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hitsB.Add(1)
		fmt.Fprint(w, "secret of b")
	}))
	defer b.Close()
	var hitsC atomic.Int32
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hitsC.Add(1)
		fmt.Fprint(w, "internal c")
	}))
	defer c.Close()
	port := func(s *httptest.Server) string { u, _ := url.Parse(s.URL); return u.Port() }
	portA, portB, portC := port(a), port(b), port(c)

	// The profile grants a by its address, and c only by the name
	// localhost (which resolves to a loopback address); the manifest asks
	// for both, and for b's port, which is not granted.
	p := profile(t, fmt.Sprintf(`
name: egress
on_ungranted: deny_at_call
default:
  capabilities:
    http: [http://127.0.0.1:%[1]s, http://localhost:%[2]s]
`, portA, portC))
	h := newHost(t, p, nil)
	ctx := context.Background()
	m, err := h.Load(ctx, buildPlugin(t, "stock"), host.LoadOptions{Manifest: manifest(t, fmt.Sprintf(`
name: fetcher
version: 1.0.0
kind: extism
actions: [{name: fetch}]
capabilities:
  http: [http://127.0.0.1:%[1]s, http://localhost:%[3]s, http://127.0.0.1:%[2]s]
`, portA, portB, portC))})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		url    string
		want   string
		code   abi.Code
		reason string
		hitsA  int32 // requests a receives
	}{
		{name: "granted", url: a.URL + "/", want: "200 hello from a", hitsA: 1},
		{name: "redirect within the grant", url: a.URL + "/home", want: "200 hello from a", hitsA: 2},
		{name: "host not granted", url: "http://example.com:" + portA + "/", code: abi.CodeDenied,
			reason: "http http://example.com:" + portA + " is not among the capabilities the module requests"},
		{name: "port not granted", url: b.URL + "/", code: abi.CodeDenied,
			reason: "http http://127.0.0.1:" + portB + " was requested but not granted: no granted target covers it"},
		{name: "redirect to a port not granted", url: a.URL + "/away", code: abi.CodeDenied, hitsA: 1,
			reason: "http http://127.0.0.1:" + portB + " was requested but not granted: no granted target covers it"},
		{name: "granted name resolving to loopback", url: "http://localhost:" + portC + "/", code: abi.CodeDenied,
			reason: "localhost is a name of this machine's loopback address, and a name never reaches a loopback address; write the address"},
		{name: "not http", url: "file:///etc/passwd", code: abi.CodeDenied, reason: `http_request (invalid URL): scheme "file": not an http or https URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := hitsA.Load()
			res, err := m.Invoke(ctx, host.Request{Action: "fetch", Input: []byte(tt.url), Principal: ann})
			if got := hitsA.Load() - before; got != tt.hitsA {
				t.Errorf("server a got %d requests, want %d", got, tt.hitsA)
			}
			if tt.code != "" {
				if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.reason) {
					t.Fatalf("err %v, want %s containing %q", err, tt.code, tt.reason)
				}
				if errors.Is(err, io.EOF) { // walks the whole chain: it must end
					t.Fatal("the error wraps io.EOF")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Output) != tt.want {
				t.Fatalf("output %q, want %q", res.Output, tt.want)
			}
		})
	}
	if nb, nc := hitsB.Load(), hitsC.Load(); nb != 0 || nc != 0 {
		t.Errorf("server b (never granted) got %d requests, server c (granted by a name that resolves to loopback) %d", nb, nc)
	}
	if err := hosttest.Audit(h).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := hosttest.Audit(h).Query(ctx, audit.Filter{Kind: audit.KindOp, Module: "fetcher"})
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied int
	for _, e := range evs {
		if e.Op != "http.fetch" {
			t.Errorf("unexpected op event %+v", e)
		}
		if e.Decision == audit.Allow {
			allowed++
		} else {
			denied++
		}
	}
	// One event per hop sent or refused. Sent: a, a/home and the hop its
	// redirect leads to, a/away (whose redirect is then refused);
	// refused: another host, another port, a/away's redirect,
	// localhost's address (at dial time) and the file URL.
	if allowed != 4 || denied != 5 {
		t.Errorf("audit: %d allowed and %d denied http.fetch events, want 4 and 5:\n%+v", allowed, denied, evs)
	}
	for _, e := range evs {
		if e.Decision == audit.Allow && (e.Attrs["status"] == "" || e.Attrs["method"] != "GET" || e.Attrs["path"] == "" || e.MutationID == "") {
			t.Errorf("an allowed hop without its status, method, path or id: %+v", e)
		}
	}
}
