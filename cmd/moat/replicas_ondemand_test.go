package main_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// answer is one HTTP response as a test looks at it.
type answer struct {
	code       int
	body       string
	retryAfter string
	err        error
}

func (a answer) String() string {
	return fmt.Sprintf("%d Retry-After=%q %s %v", a.code, a.retryAfter, strings.TrimSpace(a.body), a.err)
}

// call is api with the response's Retry-After, and no client timeout
// shorter than the loads measured here.
func call(base, key, method, path, body string) answer {
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{code: res.StatusCode, body: string(b), retryAfter: res.Header.Get("Retry-After"), err: err}
}

// TestReplicasLoadOnDemand: a module the store holds is never a 404 on a
// replica that has not loaded it yet. Three replicas on one PostgreSQL
// database, each compiling for itself (no shared compile cache, no code
// key: a Go module takes seconds to compile, a Python plugin's first
// build longer): a, where modules are uploaded; b, whose requests wait
// for a load (modules.load_wait: 3m); c, whose requests wait 1 ms.
// Right after a's 201 (for a Go module uploaded through the API, and a
// Python plugin through `moat deploy`):
//   - concurrent first calls on b all succeed, and b loads the module
//     exactly once (one "module loaded on this replica" line: the calls
//     and the change feed share one load);
//   - the first call on c is 503 unavailable with Retry-After, naming
//     modules.load_wait, never 404; the load goes on, and c serves it
//     once loaded, having loaded it once;
//   - GET /v1/modules/NAME and GET /v1/modules on c never leave the
//     module out;
//   - once deleted through a, the module is 404 on b and c, and a call
//     does not load it back.
func TestReplicasLoadOnDemand(t *testing.T) {
	noSharedCache(t)
	dbURL := pgtest.Database(t)
	dir := t.TempDir()
	limits := "limits: {key_rate: 100000, key_burst: 100000, org_rate: 100000, org_burst: 100000}\n"
	cfgs := map[string]string{}
	for name, wait := range map[string]string{"a": "", "b": "modules: {load_wait: 3m}\n", "c": "modules: {load_wait: 1ms}\n"} {
		cfgs[name] = filepath.Join(dir, name+".yaml")
		os.WriteFile(cfgs[name], []byte("database_url: "+dbURL+"\n"+limits+wait), 0o644)
	}
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--config", cfgs["a"], "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	if !strings.HasPrefix(key, "moat_sk_") {
		t.Fatalf("keys create: %q", key)
	}
	logs := map[string]*lockedBuffer{"a": {}, "b": {}, "c": {}}
	bases := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name := range logs {
		wg.Go(func() {
			_, base, _ := serveLogged(t, logs[name], nil, "--config", cfgs[name], "--data", filepath.Join(dir, name), "--listen", "127.0.0.1:0")
			mu.Lock()
			bases[name] = base
			mu.Unlock()
		})
	}
	wg.Wait()
	if bases["a"] == "" || bases["b"] == "" || bases["c"] == "" {
		t.FailNow()
	}
	loads := func(replica, module string) int {
		n := 0
		for _, ln := range strings.Split(logs[replica].String(), "\n") {
			if strings.Contains(ln, "module loaded on this replica") && strings.Contains(ln, "module="+module+" ") {
				n++
			}
		}
		return n
	}

	type plugin struct {
		name, action, input, want string
		needs                     string // why it cannot run here ("" when it can)
		upload                    func(t *testing.T)
	}
	plugins := []plugin{
		{name: "store", action: "kv", input: "put k v", want: "ok", upload: func(t *testing.T) {
			up, ct := storeModule(t, "1.0.0")
			if code, out, err := api(bases["a"], key, "POST", "/v1/modules", up, ct); code != 201 {
				t.Fatalf("upload through a: %d %s %v", code, out, err)
			}
		}},
	}
	plugins = append(plugins, plugin{name: "pyplug", action: "hello", input: "ann", want: "hello ann", needs: langMissing("python"),
		upload: func(t *testing.T) {
			work := t.TempDir()
			src := filepath.Join(work, "pyplug")
			os.MkdirAll(src, 0o755)
			writeFile(t, filepath.Join(src, "main.py"), "import moat\n\n\n@moat.action(\"hello\")\ndef hello(inp):\n    return \"hello \" + inp.text\n")
			writeFile(t, filepath.Join(src, "moat.yaml"), "name: pyplug\nversion: 0.1.0\nlanguage: python\nkind: moat\nactions:\n  - {name: hello, timeout: 10s}\n")
			if r := moatEnvIn(t, work, []string{"MOAT_API_KEY=" + key}, "deploy", "pyplug", "--server", bases["a"]); r.code != 0 {
				t.Fatalf("moat deploy through a: %+v\n%s", r, logs["a"])
			}
		}})
	for _, p := range plugins {
		t.Run(p.name, func(t *testing.T) {
			testenv.Require(t, p.needs)
			path := "/v1/modules/" + p.name + "/actions/" + p.action
			p.upload(t)
			acked := time.Now()
			// At once: c's first call (1 ms to wait) and four concurrent
			// first calls on b.
			first := call(bases["c"], key, "POST", path, p.input)
			var bs [4]answer
			var bwg sync.WaitGroup
			for i := range bs {
				bwg.Go(func() { bs[i] = call(bases["b"], key, "POST", path, p.input) })
			}
			info := call(bases["c"], key, "GET", "/v1/modules/"+p.name, "")
			list := call(bases["c"], key, "GET", "/v1/modules", "")
			bwg.Wait()
			t.Logf("b's four first calls answered %s after a's 201", time.Since(acked).Round(time.Millisecond))
			for i, a := range bs {
				if a.code != 200 || a.body != p.want {
					t.Errorf("b's first call %d: %s; want 200 %q (b waits for the load)", i, a, p.want)
				}
			}
			if n := loads("b", p.name); n != 1 {
				t.Errorf("b loaded %s %d times; want once (concurrent first calls and the change feed share one load):\n%s", p.name, n, logs["b"])
			}
			switch {
			case first.code == 200 && first.body == p.want:
				t.Logf("c's first call was served (c had loaded it already): %s", first)
			case first.code != 503 || first.retryAfter == "" || !strings.Contains(first.body, `"code":"unavailable"`) || !strings.Contains(first.body, "modules.load_wait"):
				t.Errorf("c's first call: %s; want 503 unavailable with Retry-After naming modules.load_wait (never 404)", first)
			}
			for what, a := range map[string]answer{"GET /v1/modules/" + p.name: info, "GET /v1/modules": list} {
				if a.code != 200 || !strings.Contains(a.body, `"name":"`+p.name+`"`) {
					t.Errorf("%s on c while it loads: %s; want 200 naming the module", what, a)
				}
			}
			var last answer
			if within(3*time.Minute, func() bool {
				last = call(bases["c"], key, "POST", path, p.input)
				return last.code == 200 && last.body == p.want
			}) < 0 {
				t.Fatalf("c does not serve %s once loaded: last answer %s\n%s", p.name, last, logs["c"])
			}
			if n := loads("c", p.name); n != 1 {
				t.Errorf("c loaded %s %d times; want once:\n%s", p.name, n, logs["c"])
			}
			if a := call(bases["c"], key, "GET", "/v1/modules", ""); a.code != 200 || !strings.Contains(a.body, `"name":"`+p.name+`"`) || strings.Contains(a.body, `"state"`) {
				t.Errorf("GET /v1/modules on c once loaded: %s; want the module, loaded", a)
			}

			// Deleted through a: 404 on b and c, and not loaded back.
			if code, out, err := api(bases["a"], key, "DELETE", "/v1/modules/"+p.name, "", ""); code != 204 {
				t.Fatalf("delete through a: %d %s %v", code, out, err)
			}
			for _, r := range []string{"b", "c"} {
				if within(2*time.Second, func() bool {
					last = call(bases[r], key, "POST", path, p.input)
					return last.code == 404
				}) < 0 {
					t.Errorf("%s after the deletion through a: %s; want 404", r, last)
				}
				if a := call(bases[r], key, "GET", "/v1/modules/"+p.name, ""); a.code != 404 || !strings.Contains(a.body, "not_found") {
					t.Errorf("GET /v1/modules/%s on %s after the deletion: %s; want 404 not_found", p.name, r, a)
				}
				if n := loads(r, p.name); n != 1 {
					t.Errorf("%s loaded %s %d times after the deletion; want the one load", r, p.name, n)
				}
			}
		})
	}
}
