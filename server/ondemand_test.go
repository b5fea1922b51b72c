package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// TestLoadOnDemandHostile: replicas on one PostgreSQL database; modules
// are uploaded through a, and b and b2 have not loaded them yet (their
// loads are held in flight by SetBeforeLoad until a case lets them go).
// A module the store holds is never a 404: a request waits for its load
// up to modules.load_wait (b: 300 ms; b2: the default) and is then 503
// unavailable with Retry-After; GET /v1/modules/NAME and GET /v1/modules
// describe it from the store meanwhile; concurrent first calls share one
// load; and what the store does not hold for the caller's organization
// (another organization's module, a name never stored, a deleted module,
// one deleted while it loaded) is a 404 that starts no load. No load is
// left in flight after any case.
func TestLoadOnDemandHostile(t *testing.T) {
	db := pgtest.Database(t)
	a := start(t, "", func(c *server.Config) { c.DatabaseURL = db })
	var mu sync.Mutex
	loads := map[string]int{}           // "replica org/name" → loads started
	gates := map[string]chan struct{}{} // name → closed when its loads may go on
	hold := func(s *server.Server, replica string) {
		server.SetBeforeLoad(s, func(org, name string) {
			mu.Lock()
			loads[replica+" "+org+"/"+name]++
			g := gates[name]
			mu.Unlock()
			if g != nil {
				<-g
			}
		})
	}
	b := start(t, "", func(c *server.Config) {
		c.DatabaseURL, c.Modules.LoadWait = db, policy.Duration(300*time.Millisecond)
	})
	b2 := start(t, "", func(c *server.Config) { c.DatabaseURL = db })
	// b3's profile grants no capability: a module asking for kv, which
	// a's profile grants, is stored but does not load on b3.
	strict := filepath.Join(t.TempDir(), "strict.yaml")
	os.WriteFile(strict, []byte("name: strict\ndefault:\n  capabilities: {}\n"), 0o644)
	b3 := start(t, "", func(c *server.Config) { c.DatabaseURL, c.Profile = db, strict })
	hold(b.Server, "b")
	hold(b2.Server, "b2")
	hold(b3.Server, "b3")
	ann := a.key(t, "acme", "ann", "admin")
	eve := a.key(t, "evil", "eve", "admin")
	wasm := helloWasm(t)
	loadsOf := func(replica, module string) int {
		mu.Lock()
		defer mu.Unlock()
		return loads[replica+" "+module]
	}
	gate := func(name string) (release func()) {
		g := make(chan struct{})
		mu.Lock()
		gates[name] = g
		mu.Unlock()
		var once sync.Once
		return func() { once.Do(func() { close(g) }) }
	}
	upload := func(t *testing.T, name string) {
		t.Helper()
		if r := a.upload(t, ann, wasm, renamed(t, name, "")); r.status != 201 {
			t.Fatalf("upload of %s through a: %d %s", name, r.status, r.body)
		}
	}
	invoke := func(ts *testServer, key, name string) response {
		return ts.do(t, "POST", "/v1/modules/"+name+"/actions/greet", key, strings.NewReader("World"))
	}
	want404 := func(t *testing.T, r response, what string) {
		t.Helper()
		if r.status != 404 || !strings.Contains(string(r.body), `"code":"not_found"`) {
			t.Errorf("%s: %d %s; want 404 not_found", what, r.status, r.body)
		}
	}
	want503 := func(t *testing.T, r response, what string) {
		t.Helper()
		if r.status != 503 || r.header.Get("Retry-After") != "2" || !strings.Contains(string(r.body), `"code":"unavailable"`) ||
			!strings.Contains(string(r.body), "modules.load_wait") || !strings.Contains(string(r.body), "still loading on this replica") {
			t.Errorf("%s: %d Retry-After=%q %s; want 503 unavailable, Retry-After 2, naming modules.load_wait", what, r.status, r.header.Get("Retry-After"), r.body)
		}
	}
	served := func(t *testing.T, ts *testServer, name string) {
		t.Helper()
		var last response
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if last = invoke(ts, ann, name); last.status == 200 {
				return
			}
		}
		t.Fatalf("%s is not served once its load went on: %d %s", name, last.status, last.body)
	}
	gone := func(t *testing.T, ts *testServer, name string) {
		t.Helper()
		var last response
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if last = invoke(ts, ann, name); last.status == 404 {
				break
			}
		}
		want404(t, last, "invoke of the deleted "+name)
		want404(t, ts.do(t, "GET", "/v1/modules/"+name, ann, nil), "GET /v1/modules/"+name+" deleted")
		if l := ts.do(t, "GET", "/v1/modules", ann, nil); l.status != 200 || strings.Contains(string(l.body), `"name":"`+name+`"`) {
			t.Errorf("GET /v1/modules after %s's deletion: %d %s; want it left out", name, l.status, l.body)
		}
	}

	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"stored, still loading past load_wait: 503 with Retry-After, described from the store", func(t *testing.T) {
			release := gate("m1")
			defer release()
			upload(t, "m1")
			want503(t, invoke(b, ann, "m1"), "b's first call while m1 loads")
			info := b.do(t, "GET", "/v1/modules/m1", ann, nil)
			if info.status != 200 || info.json(t)["state"] != "loading" || info.json(t)["name"] != "m1" {
				t.Errorf("GET /v1/modules/m1 on b while it loads: %d %s; want 200 with state loading", info.status, info.body)
			}
			var list struct{ Modules []map[string]any }
			l := b.do(t, "GET", "/v1/modules", ann, nil)
			if json.Unmarshal(l.body, &list) != nil || len(list.Modules) != 1 || list.Modules[0]["name"] != "m1" || list.Modules[0]["state"] != "loading" {
				t.Errorf("GET /v1/modules on b while m1 loads: %d %s; want m1 with state loading", l.status, l.body)
			}
			release()
			served(t, b, "m1")
			if n := loadsOf("b", "acme/m1"); n != 1 {
				t.Errorf("b loaded m1 %d times; want once (the calls, the listing and the change feed share one load)", n)
			}
		}},
		{"concurrent first calls share one load, and wait for it", func(t *testing.T) {
			release := gate("m2")
			defer release()
			upload(t, "m2")
			var wg sync.WaitGroup
			rs := make([]response, 8)
			for i := range rs {
				wg.Go(func() { rs[i] = invoke(b2, ann, "m2") })
			}
			for end := time.Now().Add(10 * time.Second); loadsOf("b2", "acme/m2") == 0 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // every call is waiting
			release()
			wg.Wait()
			for i, r := range rs {
				if r.status != 200 || !strings.Contains(string(r.body), "World") {
					t.Errorf("b2's concurrent first call %d: %d %s; want 200 after the load", i, r.status, r.body)
				}
			}
			if n := loadsOf("b2", "acme/m2"); n != 1 {
				t.Errorf("b2 loaded m2 %d times for 8 concurrent first calls; want once", n)
			}
		}},
		{"another organization's stored module is a 404 and starts no load", func(t *testing.T) {
			upload(t, "m3")
			r := invoke(b, eve, "m3")
			want404(t, r, "eve calls acme's m3")
			if strings.Contains(string(r.body), "acme") {
				t.Errorf("the 404 names the other organization: %s", r.body)
			}
			want404(t, b.do(t, "GET", "/v1/modules/m3", eve, nil), "eve's GET of acme's m3")
			if n := loadsOf("b", "evil/m3"); n != 0 {
				t.Errorf("eve's call started %d loads", n)
			}
		}},
		{"names never stored are 404 and start no load", func(t *testing.T) {
			for _, name := range []string{"nosuch", strings.Repeat("x", 4096), "m1%00", "..%2Fm1", "M1"} {
				r := b.do(t, "POST", "/v1/modules/"+name+"/actions/greet", ann, strings.NewReader("World"))
				if r.status != 404 {
					t.Errorf("invoke of %.40q: %d %s; want 404", name, r.status, r.body)
				}
				for _, m := range []string{"GET /v1/modules/%s", "GET /v1/modules/%s/versions", "DELETE /v1/modules/%s"} {
					method, path, _ := strings.Cut(fmt.Sprintf(m, name), " ")
					if r := b.do(t, method, path, ann, nil); r.status != 404 {
						t.Errorf("%s %.60s: %d %s; want 404", method, path, r.status, r.body)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for k := range loads {
				if strings.Contains(k, "nosuch") || strings.Contains(k, "xxxx") || strings.Contains(k, "M1") || strings.Contains(k, "..") {
					t.Errorf("a load was started for %.60q", k)
				}
			}
		}},
		{"deleted while it loads: 404 once the load ends, not swapped in", func(t *testing.T) {
			release := gate("m4")
			defer release()
			upload(t, "m4")
			want503(t, invoke(b, ann, "m4"), "b's first call while m4 loads")
			if r := a.do(t, "DELETE", "/v1/modules/m4", ann, nil); r.status != 204 {
				t.Fatalf("delete through a: %d %s", r.status, r.body)
			}
			release()
			gone(t, b, "m4")
		}},
		{"stored but not loadable here: 503 naming the correlation id, one load per failedLoadTTL, described as not_loadable", func(t *testing.T) {
			upload(t, "m6")
			for i := range 3 {
				r := invoke(b3, ann, "m6")
				if r.status != 503 || r.header.Get("Retry-After") != "30" || !strings.Contains(string(r.body), "does not load on this replica") ||
					!strings.Contains(string(r.body), r.header.Get("X-Request-Id")) {
					t.Errorf("b3's call %d of m6: %d Retry-After=%q %s; want 503, Retry-After 30, naming the correlation id", i, r.status, r.header.Get("Retry-After"), r.body)
				}
				if strings.Contains(string(r.body), "capabilit") || strings.Contains(string(r.body), strict) {
					t.Errorf("the 503 tells the caller the operator's profile: %s", r.body)
				}
			}
			if n := loadsOf("b3", "acme/m6"); n != 1 {
				t.Errorf("b3 tried to load m6 %d times for 3 calls; want once (failures are remembered)", n)
			}
			if info := b3.do(t, "GET", "/v1/modules/m6", ann, nil); info.status != 200 || info.json(t)["state"] != "not_loadable" {
				t.Errorf("GET /v1/modules/m6 on b3: %d %s; want 200 with state not_loadable", info.status, info.body)
			}
		}},
		{"deleted after it loaded: 404 on every replica", func(t *testing.T) {
			upload(t, "m5")
			served(t, b, "m5")
			served(t, b2, "m5")
			if r := a.do(t, "DELETE", "/v1/modules/m5", ann, nil); r.status != 204 {
				t.Fatalf("delete through a: %d %s", r.status, r.body)
			}
			for _, ts := range []*testServer{a, b, b2} {
				gone(t, ts, "m5")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t)
			var left string
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if left = fmt.Sprint(server.Loading(b.Server), server.Loading(b2.Server)); left == "0 0" {
					return
				}
			}
			t.Errorf("loads left in flight (b, b2): %s", left)
		})
	}
}

// TestLoadWaitConfig: modules.load_wait is bounded, and named with the fix
// when out of bounds.
func TestLoadWaitConfig(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"modules: {load_wait: 1ms}", ""},
		{"modules: {load_wait: 10m}", ""},
		{"modules: {load_wait: 11m}", "modules.load_wait: 11m is outside 1ms to 10m"},
		{"modules: {load_wait: 1us}", "modules.load_wait: "},
		{"modules: {load_wait: -1s}", "modules.load_wait"},
	} {
		_, err := server.ParseConfig("moat-server.yaml", []byte(tt.yaml+"\n"))
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want %q", tt.yaml, err, tt.want)
		}
	}
	if c := server.DefaultConfig(); time.Duration(c.Modules.LoadWait) != server.DefaultModuleLoadWait {
		t.Errorf("default modules.load_wait = %s; want %s", c.Modules.LoadWait, server.DefaultModuleLoadWait)
	}
}
