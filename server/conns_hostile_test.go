package server_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
)

// dialFrom opens a TCP connection to addr from the loopback address src
// (127.0.0.0/8 is all this machine's), so that a test can be several
// clients.
func dialFrom(t testing.TB, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	return c
}

// halfSent writes a request whose headers promise length bytes of body,
// then only the first 10.
func halfSent(c net.Conn, method, path, host string, length int, headers ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nContent-Type: application/octet-stream\r\n", method, path, host, length)
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	b.WriteString("\r\n0123456789")
	_, err := io.WriteString(c, b.String())
	return err
}

// TestRefusedBeforeBody: a request the server refuses from its headers
// alone (no key, a bad key, a role without the permission) is answered at
// once however much body it promises and however little it sends, and
// its connection is closed: the server neither waits for the body nor
// keeps the connection for another request.
func TestRefusedBeforeBody(t *testing.T) {
	testenv.Timing(t)
	ts := start(t, "", nil)
	addr := strings.TrimPrefix(ts.URL, "http://")
	reader := ts.key(t, "acme", "rita", "reader")
	const mb = 1 << 20
	for _, tt := range []struct {
		name, method, path string
		length             int
		headers            []string
		status             int
		code               string
	}{
		{"no key, 1 MB promised", "POST", "/v1/modules/m/actions/a", mb, nil, 401, "unauthenticated"},
		{"no key, 100 bytes promised", "POST", "/v1/modules/m/actions/a", 100, nil, 401, "unauthenticated"},
		{"no key, upload", "POST", "/v1/modules", 64 * mb, nil, 401, "unauthenticated"},
		{"no key, run", "POST", "/v1/runs", 200, nil, 401, "unauthenticated"},
		{"no key, confirmation", "POST", "/v1/confirmations/tok", 200, nil, 401, "unauthenticated"},
		{"no key, secret", "PUT", "/v1/admin/secrets/acme/x", 200, nil, 401, "unauthenticated"},
		{"no key, 100-continue", "POST", "/v1/modules/m/actions/a", mb, []string{"Expect", "100-continue"}, 401, "unauthenticated"},
		{"unknown key", "POST", "/v1/modules/m/actions/a", 100, []string{"Authorization", "Bearer moat_sk_not-a-key"}, 401, "unauthenticated"},
		{"not bearer", "POST", "/v1/modules/m/actions/a", 100, []string{"Authorization", "Basic YTpi"}, 401, "unauthenticated"},
		{"role without module.upload", "POST", "/v1/modules", 100, []string{"Authorization", "Bearer " + reader}, 403, "denied"},
		{"cross-site page", "POST", "/v1/modules/m/actions/a", 100, []string{"Origin", "https://evil.example"}, 403, "forbidden_origin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := dialFrom(t, "127.0.0.1", addr)
			defer c.Close()
			start := time.Now()
			if err := halfSent(c, tt.method, tt.path, addr, tt.length, tt.headers...); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			took := time.Since(start)
			if res.StatusCode != tt.status || !strings.Contains(string(b), `"code":"`+tt.code+`"`) {
				t.Errorf("%d %s; want %d %s", res.StatusCode, b, tt.status, tt.code)
			}
			if took > time.Second {
				t.Errorf("answered after %v; want at once (< 1 s), not after the body", took)
			}
			if !res.Close {
				t.Errorf("the response does not say Connection: close")
			}
			// The server closed the connection: the next read ends at once.
			c.SetReadDeadline(time.Now().Add(time.Second))
			if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
				t.Errorf("after the refusal the connection is still open (read %d, %v)", n, err)
			}
		})
	}
	// A keyed request whose body arrives whole is answered on a
	// connection that stays open for the next.
	key := ts.key(t, "acme", "ann", "admin")
	c := dialFrom(t, "127.0.0.1", addr)
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 2 {
		fmt.Fprintf(c, "POST /v1/modules/none/actions/a HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 2\r\n\r\n{}", addr, key)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on a kept connection: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		if res.StatusCode != http.StatusNotFound || res.Close {
			t.Errorf("request %d: %d, Connection: close %v; want 404 on a connection kept open", i, res.StatusCode, res.Close)
		}
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestOneSourceCannotStarveOthers: 600 connections of one client, each
// holding a request whose body never comes (keyless, then keyed), leave
// the server serving a keyed client of another address at once; past
// http.max_connections_per_source the flood's connections are answered
// 429; and once the flood ends, none of its connections is left open.
func TestOneSourceCannotStarveOthers(t *testing.T) {
	testenv.Timing(t)
	const flood = 600
	ts := start(t, "", func(c *server.Config) {
		withMetricsToken(c)
		c.Limits.KeyBurst, c.Limits.OrgBurst = 10_000, 10_000 // the flood's key is never rate-limited
	})
	addr := strings.TrimPrefix(ts.URL, "http://")
	// The defaults: 512 connections, 64 of them from one source.
	const perSource = 64
	if cfg := ts.Config().HTTP; cfg.MaxConnections != 512 || cfg.MaxConnectionsPerSource != 0 {
		t.Fatalf("defaults: max_connections %d, per source %d; want 512, 0 (an eighth)", cfg.MaxConnections, cfg.MaxConnectionsPerSource)
	}
	victim := ts.key(t, "other", "vic", "admin")
	attacker := ts.key(t, "evil", "eve", "admin")

	served := func(t *testing.T, when string) {
		t.Helper()
		start := time.Now()
		c := dialFrom(t, "127.0.0.1", addr)
		defer c.Close()
		fmt.Fprintf(c, "GET /v1/whoami HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", addr, victim)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: the keyed client was not served: %v after %v", when, err, time.Since(start))
		}
		res.Body.Close()
		if took := time.Since(start); res.StatusCode != 200 || took > 2*time.Second {
			t.Errorf("%s: the keyed client got %d after %v; want 200 at once", when, res.StatusCode, took)
		}
	}
	openConns := func(t *testing.T) int {
		m := ts.scrape(t)
		v := regexp.MustCompile(`(?m)^moat_http_connections_open (\d+)`).FindStringSubmatch(m)
		if v == nil {
			t.Fatalf("no moat_http_connections_open in the metrics")
		}
		n, _ := strconv.Atoi(v[1])
		return n
	}

	for _, tt := range []struct {
		name, src string
		headers   []string
		// held: the flood's connections the server may keep open at once
		held int
	}{
		{"keyless", "127.0.0.2", nil, 0},
		{"keyed", "127.0.0.3", []string{"Authorization", "Bearer " + attacker}, perSource},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conns := make([]net.Conn, flood)
			var wg sync.WaitGroup
			var mu sync.Mutex
			statuses := map[string]int{}
			for i := range conns {
				conns[i] = dialFrom(t, tt.src, addr)
				if err := halfSent(conns[i], "POST", "/v1/modules/m/actions/a", addr, 1<<20, tt.headers...); err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func(c net.Conn) {
					defer wg.Done()
					c.SetReadDeadline(time.Now().Add(4 * time.Second))
					res, err := http.ReadResponse(bufio.NewReader(c), nil)
					what := "held"
					switch {
					case err == nil:
						what = strconv.Itoa(res.StatusCode)
					case !isTimeout(err):
						what = "closed"
					}
					mu.Lock()
					statuses[what]++
					mu.Unlock()
				}(conns[i])
			}
			served(t, "during the flood")
			wg.Wait()
			t.Logf("the flood's %d connections: %v", flood, statuses)
			if statuses["held"] > tt.held {
				t.Errorf("%d of the flood's connections were held open; want at most %d", statuses["held"], tt.held)
			}
			if tt.held == 0 && (statuses["401"] == 0 || statuses["401"]+statuses["429"]+statuses["closed"] != flood) {
				t.Errorf("flood: %v; want every one of %d answered 401 (or 429 past http.max_connections_per_source)", statuses, flood)
			}
			if tt.held > 0 && statuses["429"]+statuses["closed"] < flood-tt.held {
				t.Errorf("flood: %v; want at least %d refused (429) past http.max_connections_per_source", statuses, flood-tt.held)
			}
			served(t, "after the flood")
			for _, c := range conns {
				c.Close()
			}
			// Nothing of the flood is left open.
			deadline := time.Now().Add(5 * time.Second)
			for n := openConns(t); n > 2; n = openConns(t) {
				if time.Now().After(deadline) {
					t.Fatalf("%d connections still open after the flood closed its own", n)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	if m := ts.scrape(t); !regexp.MustCompile(`(?m)^moat_http_connections_refused_total [1-9]`).MatchString(m) {
		t.Errorf("moat_http_connections_refused_total counted no refusal:\n%s", grepLines(m, "moat_http_connections"))
	}
}

// TestRefusedBeforeBodyHTTP2: over HTTP/2 (TLS) a keyless request whose
// body never ends is answered 401 at once, without the Connection header
// HTTP/2 forbids, and the connection serves the next request.
func TestRefusedBeforeBodyHTTP2(t *testing.T) {
	testenv.Timing(t)
	dir := t.TempDir()
	certPEM, keyPEM, pool := selfSigned(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	ts := start(t, "", func(c *server.Config) { c.TLS = server.TLSConfig{Cert: certFile, Key: keyFile} })
	url := strings.Replace(ts.URL, "http://", "https://", 1)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	pr, pw := io.Pipe() // a body that sends 10 bytes, then nothing
	defer pw.Close()
	go pw.Write([]byte("0123456789"))
	req, _ := http.NewRequest("POST", url+"/v1/modules/m/actions/a", pr)
	req.ContentLength = 1 << 20
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("HTTP/2 POST: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if took := time.Since(start); res.ProtoMajor != 2 || res.StatusCode != 401 || !strings.Contains(string(b), `"code":"unauthenticated"`) || took > time.Second {
		t.Errorf("HTTP/%d %d %s after %v; want HTTP/2 401 unauthenticated at once", res.ProtoMajor, res.StatusCode, b, took)
	}
	if v, ok := res.Header["Connection"]; ok {
		t.Errorf("an HTTP/2 response carries Connection: %q", v)
	}
	if res, err := c.Get(url + "/healthz"); err != nil || res.StatusCode != 200 {
		t.Errorf("the next request: %v", err)
	} else {
		res.Body.Close()
	}
}
