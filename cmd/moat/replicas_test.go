package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moat-sandbox/moat/host/store"
	_ "github.com/moat-sandbox/moat/host/store/backends"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// startServeEnv is startServe with extra environment variables.
func startServeEnv(t *testing.T, rest *bytes.Buffer, env []string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return startServe(t, rest, args...)
}

// replica is one moat serve process of a replica set.
type replica struct {
	name string
	args []string
	proc *os.Process
	base string
	log  *bytes.Buffer
}

// startReplicas starts moat serve on each args in parallel (each must list
// port 0, and a data directory of its own: replicas share no disk).
func startReplicas(t *testing.T, names []string, args func(name string) []string) []*replica {
	t.Helper()
	out := make([]*replica, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		out[i] = &replica{name: n, args: args(n), log: &bytes.Buffer{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].start(t)
		}()
	}
	wg.Wait()
	for _, r := range out {
		if r.base == "" {
			t.FailNow()
		}
	}
	return out
}

func (r *replica) start(t *testing.T) {
	cmd, base := startServe(t, r.log, r.args...)
	r.proc, r.base = cmd.Process, base
}

// api calls a replica with an API key.
func api(base, key, method, path, body, ct string) (int, string, error) {
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	res, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// storeModule is the multipart upload of testdata/goguest as module
// "store": kv runs kv commands, upper needs a confirmation.
func storeModule(t *testing.T, version string) (string, string) {
	body, ct := moduleForm(testwasm.BuildGo(t, "./testdata/goguest", true),
		[]byte("name: store\nversion: "+version+"\nactions: [{name: kv}, {name: upper, confirm: true}]\ncapabilities: {kv: true}\n"))
	return body.String(), ct
}

// moduleForm is the multipart body of POST /v1/modules uploading a
// compiled module with its manifest, and its content type.
func moduleForm(wasm, manifest []byte) (*bytes.Buffer, string) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for name, content := range map[string][]byte{"module": wasm, "manifest": manifest} {
		w, _ := mw.CreateFormFile(name, name)
		w.Write(content)
	}
	mw.Close()
	return &body, mw.FormDataContentType()
}

// within polls f every 20 ms until it reports true or d passes, and
// returns how long it took (or -1).
func within(d time.Duration, f func() bool) time.Duration {
	start := time.Now()
	for time.Since(start) < d {
		if f() {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

// TestReplicas: three moat serve processes on one PostgreSQL database
// (each with a data directory of its own) behave as one service:
//   - keys made by `moat keys create --config` work on every replica;
//   - a module uploaded through one is served by the others within a
//     second, and a deletion through one is seen by all within a second;
//   - under kv-writing load through all three, one is killed with
//     SIGKILL: every write acknowledged (by any replica) is in the
//     database, the two others answer every request after the kill, and
//     the killed one restarts clean on the same database and serves;
//   - a confirmation token used at once through all three runs its
//     action exactly once;
//   - an organization's rate limit holds across the replicas, not once
//     per replica.
func TestReplicas(t *testing.T) {
	testStart := time.Now()
	dbURL := pgtest.Database(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "moat-server.yaml")
	// The replicas share no data directory, but, being on one machine,
	// one compile cache (cache_dir), as pods on one node could: the
	// compile of a 3 MB Go module takes seconds here, and what is
	// measured is how soon a change reaches the others. (With caches of
	// their own and no code key, b and c served the upload after 4.7 s,
	// both compiling at once on 2 cores; TestReplicasSharedCode gives each
	// replica its own cache and one code key instead.)
	os.WriteFile(cfg, []byte("database_url: "+dbURL+"\ncache_dir: "+filepath.Join(dir, "cache")+"\n"+
		"limits: {key_rate: 100000, key_burst: 100000, org_rate: 100000, org_burst: 100000}\n"+
		"admission: {org_invocations: 4, max_invocations: 8}\n"), 0o644)
	create := moat(t, "", "keys", "create", "--config", cfg, "--org", "acme", "--user", "ann", "--role", "admin")
	key := strings.TrimSpace(create.stdout)
	if create.code != 0 || !strings.HasPrefix(key, "moat_sk_") {
		t.Fatalf("keys create --config: %+v", create)
	}
	if strings.Contains(create.stderr, dbURL) && strings.Contains(dbURL, "@") {
		t.Errorf("keys create printed the database URL with its credentials: %s", create.stderr)
	}
	args := func(name string) []string {
		return []string{"--config", cfg, "--data", filepath.Join(dir, name), "--listen", "127.0.0.1:0"}
	}
	rs := startReplicas(t, []string{"a", "b", "c"}, args)
	a, b, c := rs[0], rs[1], rs[2]
	for _, r := range rs {
		if code, out, err := api(r.base, key, "GET", "/v1/whoami", "", ""); code != 200 || !strings.Contains(out, `"org":"acme"`) {
			t.Fatalf("whoami on %s with the key of keys create --config: %d %s %v", r.name, code, out, err)
		}
	}

	// Uploaded through a, served by b and c within a second.
	up, ct := storeModule(t, "1.0.0")
	if code, out, err := api(a.base, key, "POST", "/v1/modules", up, ct); code != 201 {
		t.Fatalf("upload through a: %d %s %v", code, out, err)
	}
	for _, r := range []*replica{b, c} {
		var last string
		d := within(time.Second, func() bool {
			code, out, err := api(r.base, key, "POST", "/v1/modules/store/actions/kv", "put seen-by-"+r.name+" yes", "")
			last = fmt.Sprint(code, " ", out, " ", err)
			return code == 200 && out == "ok"
		})
		if d < 0 {
			t.Fatalf("the module uploaded through a is not served by %s within a second: last answer %s\n%s", r.name, last, r.log)
		}
		t.Logf("upload through a served by %s after %s", r.name, d.Round(time.Millisecond))
	}

	// Load through all three; c is killed in the middle.
	type result struct {
		replica string
		at      time.Time
		ok      bool
		err     string
	}
	var mu sync.Mutex
	acked := map[string]string{}
	var results []result
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		r := rs[w%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("k%d-%d", w, i), fmt.Sprintf("v%d-%d-%s", w, i, strings.Repeat("x", i%100))
				// A request counts as after the kill when it was sent after
				// it: a response the killed replica wrote just before dying
				// may still be read a moment later.
				sent := time.Now()
				code, out, err := api(r.base, key, "POST", "/v1/modules/store/actions/kv", "put "+k+" "+v, "")
				res := result{replica: r.name, at: sent, ok: err == nil && code == 200 && out == "ok"}
				if !res.ok {
					res.err = fmt.Sprintf("%d %q %v", code, out, err)
				}
				mu.Lock()
				if res.ok {
					acked[k] = v
				}
				results = append(results, res)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	killedPid := c.proc.Pid
	if err := c.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now() // a request sent after this cannot be answered by c
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	perReplica := map[string][2]int{} // after the kill: ok, failed
	before := 0
	for _, r := range results {
		if r.at.Before(killedAt) {
			if r.ok {
				before++
			}
			continue
		}
		n := perReplica[r.replica]
		if r.ok {
			n[0]++
		} else {
			n[1]++
			if r.replica != "c" && n[1] <= 3 {
				t.Errorf("replica %s failed a request after c was killed: %s", r.replica, r.err)
			}
		}
		perReplica[r.replica] = n
	}
	t.Logf("load: %d writes acknowledged before the kill, %d in all; after it (ok, failed): %v", before, len(acked), perReplica)
	if before < 100 {
		t.Fatalf("only %d writes acknowledged before the kill: the load did not run", before)
	}
	for _, r := range []string{"a", "b"} {
		if n := perReplica[r]; n[0] == 0 || n[1] != 0 {
			t.Errorf("replica %s after the kill: %d ok, %d failed; want some ok and none failed", r, n[0], n[1])
		}
	}
	if n := perReplica["c"]; n[0] != 0 {
		t.Errorf("the killed replica answered %d writes after SIGKILL", n[0])
	}

	// Every acknowledged write is in the database.
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lost := 0
	for k, v := range acked {
		got, found, err := st.KVGet(context.Background(), store.Scope{Org: "acme", Module: "store"}, k)
		if err != nil || !found || string(got) != v {
			if lost++; lost <= 5 {
				t.Errorf("acknowledged write %s=%s: %q found=%v %v", k, v, got, found, err)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes lost", lost, len(acked))
	}

	// The killed replica restarts clean on the same database and serves
	// what the others wrote.
	c.log.Reset()
	c.start(t)
	var someKey, someValue string
	for k, v := range acked {
		someKey, someValue = k, v
		break
	}
	if code, out, err := api(c.base, key, "POST", "/v1/modules/store/actions/kv", "get "+someKey, ""); code != 200 || out != someValue {
		t.Errorf("restarted c: get %s = %d %q %v, want %q:\n%s", someKey, code, out, err, someValue, c.log)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("moat-serve-%d-*", killedPid))); len(left) > 0 {
		t.Errorf("the killed replica's scratch directories are left after its restart: %v", left)
	}

	// A confirmation used at once through all three runs once.
	code, out, err := api(a.base, key, "POST", "/v1/modules/store/actions/upper", "pay bob", "")
	var pr struct {
		Code         string `json:"code"`
		Confirmation struct {
			Token string `json:"token"`
		} `json:"confirmation"`
	}
	if code != http.StatusPreconditionRequired || json.Unmarshal([]byte(out), &pr) != nil || pr.Confirmation.Token == "" {
		t.Fatalf("upper through a: %d %s %v; want 428 with a confirmation token", code, out, err)
	}
	var cmu sync.Mutex
	outcomes := map[string]int{}
	gate := make(chan struct{})
	var cwg sync.WaitGroup
	for i := range 9 {
		r := rs[i%3]
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			<-gate
			code, out, err := api(r.base, key, "POST", "/v1/confirmations/"+pr.Confirmation.Token, "", "")
			// The losers: 404 when the token was used before they
			// looked it up, 403 "already used" when they lost the claim.
			o := fmt.Sprint(code)
			switch {
			case err != nil:
				o = err.Error()
			case code == 200:
				o += " " + out
			case code == 403 && strings.Contains(out, "the confirmation token was already used"):
				o += " used"
			case code == 403:
				o += " " + out
			}
			cmu.Lock()
			outcomes[o]++
			cmu.Unlock()
		}()
	}
	close(gate)
	cwg.Wait()
	t.Logf("one confirmation token used 9 times at once through 3 replicas: %v", outcomes)
	if outcomes["200 PAY BOB"] != 1 || outcomes["200 PAY BOB"]+outcomes["404"]+outcomes["403 used"] != 9 {
		t.Errorf("confirmation outcomes %v; want exactly one 200 PAY BOB, the rest 404 (no pending token) or 403 (already used)", outcomes)
	}
	// The audit trail agrees: one confirmed run of upper. Each replica
	// flushes its own events when asked, so ask all three.
	runs := 0
	for _, r := range rs {
		code, out, err := api(r.base, key, "GET", "/v1/audit?module=store&kind=confirmation&decision=allow&limit=1000", "", "")
		if code != 200 {
			t.Fatalf("audit through %s: %d %s %v", r.name, code, out, err)
		}
		var events struct {
			Events []struct {
				Action string `json:"action"`
			} `json:"events"`
		}
		json.Unmarshal([]byte(out), &events)
		runs = len(events.Events)
	}
	if runs != 1 {
		t.Errorf("the audit trail holds %d allowed confirmations, want 1", runs)
	}

	// Replaced through c (the restarted one): a new manifest, which
	// gives the action echo, served by a and b within a second.
	up2 := strings.Replace(up, "version: 1.0.0\nactions: [{name: kv},", "version: 1.1.0\nactions: [{name: kv}, {name: echo},", 1)
	if up2 == up {
		t.Fatal("the manifest of the replacement is not different")
	}
	if code, out, err := api(c.base, key, "POST", "/v1/modules", up2, ct); code != 201 || !strings.Contains(out, `"version":"1.1.0"`) {
		t.Fatalf("replace through c: %d %s %v", code, out, err)
	}
	for _, r := range []*replica{a, b} {
		d := within(time.Second, func() bool {
			code, out, _ := api(r.base, key, "POST", "/v1/modules/store/actions/echo", "hi", "")
			return code == 200 && out == "hi"
		})
		if d < 0 {
			t.Errorf("the version uploaded through c is not served by %s within a second", r.name)
		} else {
			t.Logf("replacement through c served by %s after %s", r.name, d.Round(time.Millisecond))
		}
	}

	// Deleted through b, gone from all within a second.
	if code, out, err := api(b.base, key, "DELETE", "/v1/modules/store", "", ""); code != 204 {
		t.Fatalf("delete through b: %d %s %v", code, out, err)
	}
	for _, r := range []*replica{a, c} {
		d := within(time.Second, func() bool {
			code, _, _ := api(r.base, key, "POST", "/v1/modules/store/actions/kv", "get k0-0", "")
			return code == 404
		})
		if d < 0 {
			t.Errorf("the module deleted through b is still served by %s after a second", r.name)
		} else {
			t.Logf("deletion through b seen by %s after %s", r.name, d.Round(time.Millisecond))
		}
	}

	// An organization's rate holds across replicas: three replicas with
	// org_rate 1, org_burst 10 admit about 10 of 60 quick requests of
	// globex, not 10 on each.
	for _, r := range rs {
		r.proc.Signal(syscall.SIGTERM)
	}
	slow := filepath.Join(dir, "slow.yaml")
	os.WriteFile(slow, []byte("database_url: "+dbURL+"\nlimits: {key_rate: 100000, key_burst: 100000, org_rate: 1, org_burst: 10}\n"), 0o644)
	gkey := strings.TrimSpace(moat(t, "", "keys", "create", "--config", slow, "--org", "globex", "--user", "gus").stdout)
	rl := startReplicas(t, []string{"ra", "rb", "rc"}, func(name string) []string {
		return []string{"--config", slow, "--data", filepath.Join(dir, name), "--listen", "127.0.0.1:0"}
	})
	admitted, limited := 0, 0
	begin := time.Now()
	for i := range 60 {
		code, out, err := api(rl[i%3].base, gkey, "GET", "/v1/whoami", "", "")
		switch {
		case code == 200:
			admitted++
		case code == 429 && strings.Contains(out, `"code":"rate_limited"`) && strings.Contains(out, "organization"):
			limited++
		default:
			t.Fatalf("request %d: %d %s %v", i, code, out, err)
		}
	}
	window := time.Since(begin)
	most := 10 + int(window.Seconds()) + 1
	t.Logf("org rate 1/s, burst 10, 3 replicas: %d of 60 admitted, %d refused in %s", admitted, limited, window.Round(time.Millisecond))
	if admitted < 10 || admitted > most {
		t.Errorf("%d requests admitted in %s; want 10 to %d (the burst and the refill, shared by the replicas)", admitted, window, most)
	}
	t.Logf("TestReplicas wall time %s", time.Since(testStart).Round(time.Millisecond))
}

// TestServeConfinedDatabase: a confined moat serve reaches its PostgreSQL
// database after confinement, over a unix socket and over TCP: the
// connections it had are cut (pg_terminate_backend), so serving needs new
// ones, which Landlock would refuse had serve not allowed the database's
// port.
func TestServeConfinedDatabase(t *testing.T) {
	dbURL := pgtest.Database(t)
	socketURL := dbURL
	// A TCP endpoint for the same server: a loopback listener passing
	// bytes to the unix socket.
	tcpURL := tcpForward(t, dbURL)
	for _, tt := range []struct{ name, url string }{{"unix socket", socketURL}, {"tcp", tcpURL}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "moat-server.yaml")
			os.WriteFile(cfg, []byte("database_url: "+tt.url+"\n"), 0o644)
			key := strings.TrimSpace(moat(t, "", "keys", "create", "--config", cfg, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
			var log bytes.Buffer
			_, base := startServe(t, &log, "--config", cfg, "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--confine", "best-effort")
			terminate(t, dbURL)
			// pgxpool pings a connection idle for over a second before
			// handing it out, and replaces it when the ping fails.
			time.Sleep(1200 * time.Millisecond)
			up, ct := storeModule(t, "1.0.0")
			if code, out, err := api(base, key, "POST", "/v1/modules", up, ct); code != 201 {
				t.Fatalf("upload after the database connections were cut: %d %s %v\n%s", code, out, err, log.String())
			}
			if code, out, err := api(base, key, "POST", "/v1/modules/store/actions/kv", "put a b", ""); code != 200 || out != "ok" {
				t.Fatalf("kv put: %d %s %v\n%s", code, out, err, log.String())
			}
			if strings.Contains(log.String(), "running without a kernel layer") && strings.Contains(log.String(), "landlock") {
				t.Skipf("Landlock is not applied here, so this proves nothing:\n%s", log.String())
			}
		})
	}
}

// terminate cuts every connection to the database of url but its own.
func terminate(t *testing.T, url string) {
	t.Helper()
	n, err := pgTerminate(url)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no connection of the server to cut")
	}
}

// tcpForward listens on a loopback port and forwards each connection to
// the unix socket of url's host, and returns url with that host and port.
func tcpForward(t *testing.T, url string) string {
	t.Helper()
	sock, u, err := pgSocket(url)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				d, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer d.Close()
				go io.Copy(d, c)
				io.Copy(c, d)
			}()
		}
	}()
	q := u.Query()
	q.Del("host")
	u.RawQuery = q.Encode()
	u.Host = ln.Addr().String()
	return u.String()
}

// pgTerminate ends every other connection to url's database and says how
// many it ended.
func pgTerminate(url string) (int, error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").Scan(&n)
	return n, err
}

// pgSocket is the unix socket a postgres:///db?host=DIR URL names.
func pgSocket(url string) (string, *neturl.URL, error) {
	u, err := neturl.Parse(url)
	if err != nil {
		return "", nil, err
	}
	dir := u.Query().Get("host")
	if !strings.HasPrefix(dir, "/") {
		return "", nil, fmt.Errorf("%s names no socket directory", url)
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	return filepath.Join(dir, ".s.PGSQL."+port), u, nil
}
