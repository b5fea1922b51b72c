package server_test

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

const replicaSecret = "0123456789abcdef0123456789abcdef-test"

// replicaPair starts two replicas on one fresh PostgreSQL database with
// the same replica secret (edit changes b's configuration further).
func replicaPair(t *testing.T, editB func(*server.Config)) (a, b *testServer) {
	t.Helper()
	db := pgtest.Database(t)
	cfg := func(c *server.Config) {
		c.DatabaseURL = db
		c.Replica.Secret = replicaSecret
		c.Replica.Heartbeat = policy.Duration(200 * time.Millisecond)
	}
	a = start(t, "", cfg)
	b = start(t, "", func(c *server.Config) {
		cfg(c)
		if editB != nil {
			editB(c)
		}
	})
	return a, b
}

// TestSessionReplicas: a session made on replica A is listed, read,
// written and run through replica B, which proxies each call to A with
// the caller's key (A authenticates it again); another organization's key
// and another user's get 404 through B as through A; a call already
// proxied once is not proxied again; when A stops, B answers that the
// session's replica has stopped.
func TestSessionReplicas(t *testing.T) {
	testenv.Slow(t, "two servers on PostgreSQL and a JavaScript context: about 10 s")
	a, b := replicaPair(t, nil)
	ann := a.key(t, "acme", "ann")
	eve := a.key(t, "evil", "eve")
	bob := a.key(t, "acme", "bob")
	id := newSession(t, a, ann)

	r := b.do(t, "GET", "/v1/sessions", ann, nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), id) {
		t.Fatalf("B's list for ann: %d %s; want %s", r.status, r.body, id)
	}
	if r := b.do(t, "GET", "/v1/sessions", eve, nil); strings.Contains(string(r.body), id) {
		t.Errorf("B lists ann's session to eve: %s", r.body)
	}
	if r := b.do(t, "GET", "/v1/sessions/"+id, ann, nil, server.HeaderRequestID, "corr-routed-1"); r.status != http.StatusOK || r.json(t)["id"] != id ||
		r.header.Get(server.HeaderRequestID) != "corr-routed-1" || len(r.header.Values(server.HeaderRequestID)) != 1 {
		t.Fatalf("B's GET of A's session: %d %v %s", r.status, r.header.Values(server.HeaderRequestID), r.body)
	}
	if r := b.do(t, "PUT", "/v1/sessions/"+id+"/files?path=in.txt", ann, strings.NewReader("through B")); r.status != http.StatusOK {
		t.Fatalf("PUT a file through B: %d %s", r.status, r.body)
	}
	if r := a.do(t, "GET", "/v1/sessions/"+id+"/files?path=in.txt", ann, nil); r.status != http.StatusOK || string(r.body) != "through B" {
		t.Errorf("the file written through B, read on A: %d %s", r.status, r.body)
	}
	rr, got := sessionRun(t, b, ann, id, "javascript", "var y = 20; y + 1")
	requireInterpreter(t, rr)
	if rr.status != http.StatusOK || got["result"] != "21" {
		t.Fatalf("run through B: %d %s", rr.status, rr.body)
	}
	if rr, got = sessionRun(t, a, ann, id, "javascript", "y * 2"); got["result"] != "40" {
		t.Errorf("the variable set through B, on A: %d %s", rr.status, rr.body)
	}

	for _, tt := range []struct {
		name, key string
	}{{"another organization", eve}, {"another user", bob}} {
		for _, path := range []string{"/v1/sessions/" + id, "/v1/sessions/" + id + "/files?path=in.txt"} {
			if r := b.do(t, "GET", path, tt.key, nil); r.status != http.StatusNotFound {
				t.Errorf("%s's key through B, GET %s: %d %s; want 404", tt.name, path, r.status, r.body)
			}
		}
	}
	if r := b.do(t, "GET", "/v1/sessions/"+id, "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("no key through B: %d %s", r.status, r.body)
	}
	// A call that says it was routed once already is answered here,
	// never sent on: a loop between two replicas is cut at one hop.
	if r := b.do(t, "GET", "/v1/sessions/"+id, ann, nil, server.HeaderReplicaHop, "rsomeone"); r.status != http.StatusLoopDetected || !strings.Contains(string(r.body), "routed once") {
		t.Errorf("a second hop: %d %s; want 508", r.status, r.body)
	}

	// What a hop costs: a session's GET on its replica, and through B.
	for _, via := range []*testServer{a, b} {
		var took []time.Duration
		for range 40 {
			began := time.Now()
			if r := via.do(t, "GET", "/v1/sessions/"+id, ann, nil); r.status != http.StatusOK {
				t.Fatalf("GET: %d %s", r.status, r.body)
			}
			took = append(took, time.Since(began))
		}
		slices.Sort(took)
		t.Logf("GET /v1/sessions/{id} through %s: p50 %v, p90 %v", map[bool]string{true: "its replica", false: "another replica"}[via == a], took[20], took[36])
	}

	// A session ended with its image in the store is paused: its entry
	// names no replica, and B says to resume it (anywhere) rather than 404.
	paused := newSession(t, a, ann)
	if err := a.Store().SessionImages(0).PutImage(context.Background(), "acme", paused, strings.NewReader("an image")); err != nil {
		t.Fatal(err)
	}
	if r := a.do(t, "DELETE", "/v1/sessions/"+paused, ann, nil); r.status != http.StatusNoContent {
		t.Fatalf("end the paused session on A: %d %s", r.status, r.body)
	}
	if r := b.do(t, "GET", "/v1/sessions/"+paused, ann, nil); r.status != http.StatusConflict || r.json(t)["code"] != "session_paused" || !strings.Contains(string(r.body), "any replica") {
		t.Errorf("a paused session through B: %d %s; want 409 session_paused", r.status, r.body)
	}
	if r := b.do(t, "GET", "/v1/sessions/"+paused, eve, nil); r.status != http.StatusNotFound {
		t.Errorf("eve asks for ann's paused session: %d; want 404", r.status)
	}
	if r := b.do(t, "GET", "/v1/sessions", ann, nil); !strings.Contains(string(r.body), paused) {
		t.Errorf("B does not list the paused session: %s", r.body)
	}

	a.stop(t)
	r = b.do(t, "GET", "/v1/sessions/"+id, ann, nil)
	if r.status != http.StatusGone || r.json(t)["code"] != "session_replica_gone" || !strings.Contains(string(r.body), "stopped") {
		t.Errorf("after A stopped, B: %d %s; want 410 session_replica_gone", r.status, r.body)
	}
	if r := b.do(t, "GET", "/v1/sessions", ann, nil); strings.Contains(string(r.body), id) {
		t.Errorf("B still lists the session of the stopped replica: %s", r.body)
	}
	if r := b.do(t, "GET", "/v1/sessions/"+id, eve, nil); r.status != http.StatusNotFound {
		t.Errorf("eve, after A stopped: %d; want 404 (the session is not hers to hear of)", r.status)
	}
}

// TestSessionReplicaUnverified: a replica whose registration does not
// carry the cluster's secret (another secret: a row an attacker wrote
// to the store) never receives a caller's key: the call is refused with
// what the operator must fix.
func TestSessionReplicaUnverified(t *testing.T) {
	testenv.Slow(t, "two servers on PostgreSQL: about 5 s")
	a, b := replicaPair(t, func(c *server.Config) { c.Replica.Secret = strings.Repeat("z", 40) })
	ann := a.key(t, "acme", "ann")
	id := newSession(t, a, ann)
	r := b.do(t, "GET", "/v1/sessions/"+id, ann, nil)
	if r.status != http.StatusBadGateway || r.json(t)["code"] != "replica_unverified" {
		t.Errorf("a replica of another secret: %d %s; want 502 replica_unverified", r.status, r.body)
	}
}

// TestSessionReplicaStream: a proxied response is passed on as the holder
// writes it, not when it ends (FlushInterval -1): the first line of a
// streamed file download arrives through B.
func TestSessionReplicaStream(t *testing.T) {
	testenv.Slow(t, "two servers on PostgreSQL: about 5 s")
	a, b := replicaPair(t, nil)
	ann := a.key(t, "acme", "ann")
	id := newSession(t, a, ann)
	big := strings.Repeat("line of a large file\n", 200000) // 4 MiB
	if r := a.do(t, "PUT", "/v1/sessions/"+id+"/files?path=big.txt", ann, strings.NewReader(big)); r.status != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	req, _ := http.NewRequest("GET", b.URL+"/v1/sessions/"+id+"/files?path=big.txt", nil)
	req.Header.Set("Authorization", "Bearer "+ann)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if res.StatusCode != http.StatusOK || err != nil || line != "line of a large file\n" || res.ContentLength != int64(len(big)) {
		t.Errorf("streamed through B: %d %q %v (length %d)", res.StatusCode, line, err, res.ContentLength)
	}
}

// TestReplicaConfig: replica: refuses an advertised URL that is not a
// plain http(s) origin (a path, a query, credentials, another scheme), a
// heartbeat out of range and a short secret, naming the field.
func TestReplicaConfig(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short.key")
	if err := os.WriteFile(short, []byte("tooshort\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"replica:\n  advertise_url: ftp://10.0.0.1:21\n", "replica.advertise_url"},
		{"replica:\n  advertise_url: http://user:pw@10.0.0.1:8080\n", "replica.advertise_url"},
		{"replica:\n  advertise_url: http://10.0.0.1:8080/evil\n", "replica.advertise_url"},
		{"replica:\n  advertise_url: http://10.0.0.1:8080?x=1\n", "replica.advertise_url"},
		{"replica:\n  advertise_url: http://\n", "replica.advertise_url"},
		{"replica:\n  heartbeat: 10ms\n", "replica.heartbeat"},
		{"replica:\n  secret_file: " + short + "\n", "replica.secret_file"},
		{"replica:\n  secret_file: /nonexistent/replica.key\n", "replica.secret_file"},
		{"replica:\n  advertise_url: https://moat-0.moat:8443/\n  heartbeat: 2s\n", ""},
	} {
		_, err := server.ParseConfig("c.yaml", []byte(tt.yaml))
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%q: %v; want an error naming %q", tt.yaml, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "tooshort") {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
}
