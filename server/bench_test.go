package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host"
	_ "github.com/moat-sandbox/moat/host/store/postgres" // greet-postgres, echo-postgres
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// benchWorkers is the number of keep-alive connections of the load
// generator: enough to keep both cores of the test machine busy.
const benchWorkers = 8

// benchResults keeps each sub-benchmark's figures for the comparison line.
var benchResults sync.Map // name → [3]float64{req/s, p50 µs, p99 µs}

// BenchmarkGreetVsCeiling measures hello-go's greet through the whole
// server (bearer auth, rate limits, metrics, policy, a pooled instance,
// the kv.get and kv.put the action makes, the audit trail) against the
// ceiling: an echo handler that does nothing, on the same machine, over
// the same kind of keep-alive HTTP/1.1 connections, in the same run. The
// echo action of a Go guest (no ops, an audit row) shows the server's own
// cost. greet runs as one organization (the default admission then runs
// one of its invocations at a time), as one organization allowed 8 at
// once, and as 8 organizations, as a multi-tenant server sees it; each
// greet row reports the kv writes per group commit. All again with the
// store on PostgreSQL (a throwaway cluster, see pgtest; skipped without
// one). With MOAT_BENCH_PROFILE=DIR each row's measured loop is profiled
// to DIR/ROW.cpu.
//
//	go test -run '^$' -bench GreetVsCeiling -benchtime 5000x ./server/
func BenchmarkGreetVsCeiling(b *testing.B) {
	b.Cleanup(func() { pgtest.Stop() })
	b.Run("ceiling", func(b *testing.B) {
		e := echo.New()
		e.HideBanner, e.HidePort = true, true
		e.POST("/noop", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		hs := &http.Server{Handler: e}
		go hs.Serve(ln)
		defer hs.Shutdown(context.Background())
		load(b, "ceiling", "http://"+ln.Addr().String()+"/noop")
	})
	serve := func(b *testing.B, databaseURL string, edits ...func(*server.Config)) (*testServer, string) {
		profPath := benchProfile(b)
		ts := start(b, "", func(c *server.Config) {
			for _, f := range edits {
				f(c)
			}
			c.Profile = profPath
			c.DatabaseURL = databaseURL
			c.Limits.KeyRate, c.Limits.KeyBurst = 1e9, 1e9
			c.Limits.OrgRate, c.Limits.OrgBurst = 1e9, 1e9
		})
		return ts, ts.key(b, "acme", "bench", "admin")
	}
	for _, db := range []string{"", "postgres"} {
		suffix, url := "", func(*testing.B) string { return "" }
		if db != "" {
			suffix, url = "-"+db, func(b *testing.B) string { return pgtest.Database(b) }
		}
		b.Run("echo"+suffix, func(b *testing.B) {
			ts, key := serve(b, url(b))
			spinModule(b, ts, key, "spin", goGuest(b))
			load(b, "echo"+suffix, ts.URL+"/v1/modules/spin/actions/echo", key)
		})
		// greet calls hello-go's greet as orgs organizations at once, each
		// with its own API key and its own copy of the module, the
		// requests spread over them in turn.
		greet := func(name string, orgs int, edits ...func(*server.Config)) {
			b.Run(name, func(b *testing.B) {
				ts, _ := serve(b, url(b), edits...)
				keys := make([]string, orgs)
				for i := range keys {
					keys[i] = ts.key(b, fmt.Sprintf("org%d", i), "bench", "admin")
					if r := ts.upload(b, keys[i], helloWasm(b), helloManifest(b)); r.status != http.StatusCreated {
						b.Fatalf("upload: %d %s", r.status, r.body)
					}
				}
				st := ts.Store()
				g0, w0 := st.GroupCommitStats()
				load(b, name, ts.URL+"/v1/modules/hello-go/actions/greet", keys...)
				if g1, w1 := st.GroupCommitStats(); g1 > g0 {
					b.ReportMetric(float64(w1-w0)/float64(g1-g0), "kv-writes/commit")
				}
			})
		}
		greet("greet"+suffix, 1)
		// The same greet in JavaScript, Python and Ruby: resident
		// interpreters (their handlers registered with moat.action), one
		// instance serving call after call.
		if db == "" {
			// A multi-tenant server's interpreted plugins: hello-python
			// uploaded by 8 organizations, called by all at once, where
			// more resident calls are in flight than processors to
			// spare (host/resident.go's spinning).
			b.Run("greet-python-8orgs", func(b *testing.B) {
				ts, _ := serve(b, url(b))
				keys := make([]string, benchWorkers)
				for i := range keys {
					keys[i] = ts.key(b, fmt.Sprintf("org%d", i), "bench", "admin")
					if r := ts.do(b, "POST", "/v1/modules", keys[i], scriptArchive(b, "hello-python", nil), "Content-Type", "application/gzip"); r.status != http.StatusCreated {
						b.Fatalf("upload: %d %s", r.status, r.body)
					}
				}
				load(b, "greet-python-8orgs", ts.URL+"/v1/modules/hello-python/actions/greet", keys...)
			})
			for _, lang := range []string{"js", "python", "ruby"} {
				b.Run("greet-"+lang, func(b *testing.B) {
					ts, key := serve(b, url(b))
					if r := ts.do(b, "POST", "/v1/modules", key, scriptArchive(b, "hello-"+lang, nil), "Content-Type", "application/gzip"); r.status != http.StatusCreated {
						b.Fatalf("upload hello-%s: %d %s", lang, r.status, r.body)
					}
					load(b, "greet-"+lang, ts.URL+"/v1/modules/hello-"+lang+"/actions/greet", key)
				})
			}
		}
		// With the default admission (GOMAXPROCS/2 invocations of one
		// organization at once: 1 on two cores) one org's kv writes never
		// overlap, so no commit can hold two of them; with 8 they can.
		greet("greet-org8"+suffix, 1, func(c *server.Config) { c.Admission.OrgInvocations = benchWorkers })
		// A multi-tenant server: 8 organizations, the default admission.
		// Each runs one invocation at a time, the server several, and the
		// group commit takes the kv writes of several organizations.
		greet("greet-8orgs"+suffix, benchWorkers)
	}
	// The same action called in-process on the host, with the same
	// parallelism: what greet costs without HTTP, so that the server's own
	// share of the difference to the ceiling is visible.
	b.Run("greet-in-process", func(b *testing.B) {
		prof := benchProfile(b)
		pr, err := policy.LoadProfile(prof)
		if err != nil {
			b.Fatal(err)
		}
		h, err := host.New(context.Background(), host.Config{DataDir: b.TempDir(), Logger: quietLogger(), Profile: pr})
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close(context.Background())
		mf, err := policy.ParseManifest("moat.yaml", helloManifest(b))
		if err != nil {
			b.Fatal(err)
		}
		m, err := h.Load(context.Background(), helloWasm(b), host.LoadOptions{Manifest: mf})
		if err != nil {
			b.Fatal(err)
		}
		p := policy.Principal{User: "bench", Org: "acme"}
		run(b, "greet-in-process", func() error {
			_, err := m.Invoke(context.Background(), host.Request{Action: "greet", Input: []byte("World"), Principal: p})
			return err
		})
	})
	c, ok := benchResults.Load("ceiling")
	if !ok {
		return
	}
	cv := c.([3]float64)
	for _, name := range []string{"echo", "greet", "greet-org8", "greet-8orgs", "echo-postgres", "greet-postgres", "greet-org8-postgres", "greet-8orgs-postgres"} {
		if g, ok := benchResults.Load(name); ok {
			gv := g.([3]float64)
			b.Logf("%s/ceiling: throughput %.0f%% (%.0f vs %.0f req/s), p50 %.2fx, p99 %.2fx (%.0f vs %.0f µs)",
				name, 100*gv[0]/cv[0], gv[0], cv[0], gv[1]/cv[1], gv[2]/cv[2], gv[2], cv[2])
		}
	}
	if g, ok := benchResults.Load("greet"); ok {
		if d, ok := benchResults.Load("greet-in-process"); ok {
			gv, dv := g.([3]float64), d.([3]float64)
			b.Logf("greet over HTTP / greet in process: throughput %.0f%% (%.0f vs %.0f calls/s), p99 %.0f vs %.0f µs",
				100*gv[0]/dv[0], gv[0], dv[0], gv[2], dv[2])
		}
	}
}

// BenchmarkGreetInterleaved measures the greet of hello-js, hello-python
// and hello-ruby against hello-go's on one server, in alternating rounds:
// 10 rounds of b.N/10 requests to each, the order swapped every round, so
// that both plugins see the same machine. On a shared machine throughput
// moves by ±15% between runs seconds apart, more than the difference a
// ratio of two separate runs is meant to show. x-go is the median of the
// rounds' ratios (this language's time per request over Go's).
//
//	go test -run '^$' -bench GreetInterleaved -benchtime 20000x ./server/
func BenchmarkGreetInterleaved(b *testing.B) {
	for _, lang := range []string{"js", "python", "ruby"} {
		b.Run(lang, func(b *testing.B) {
			ts := start(b, "", func(c *server.Config) {
				c.Profile = benchProfile(b)
				c.Limits.KeyRate, c.Limits.KeyBurst = 1e9, 1e9
				c.Limits.OrgRate, c.Limits.OrgBurst = 1e9, 1e9
			})
			key := ts.key(b, "acme", "bench", "admin")
			if r := ts.upload(b, key, helloWasm(b), helloManifest(b)); r.status != http.StatusCreated {
				b.Fatalf("upload hello-go: %d %s", r.status, r.body)
			}
			if r := ts.do(b, "POST", "/v1/modules", key, scriptArchive(b, "hello-"+lang, nil), "Content-Type", "application/gzip"); r.status != http.StatusCreated {
				b.Fatalf("upload hello-%s: %d %s", lang, r.status, r.body)
			}
			goURL, langURL := ts.URL+"/v1/modules/hello-go/actions/greet", ts.URL+"/v1/modules/hello-"+lang+"/actions/greet"
			tr := &http.Transport{MaxIdleConnsPerHost: benchWorkers, MaxConnsPerHost: benchWorkers, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			burst := func(url string, n int) time.Duration {
				var next atomic.Int64
				var wg sync.WaitGroup
				begin := time.Now()
				for range benchWorkers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(n) {
							if err := post(client, url, key); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				return time.Since(begin)
			}
			burst(goURL, benchWorkers*4) // warm up: connections, pools
			burst(langURL, benchWorkers*4)
			const rounds = 10
			per := max(b.N/rounds, benchWorkers)
			ratios := make([]float64, 0, rounds)
			var goTotal, langTotal time.Duration
			b.ResetTimer()
			for i := range rounds {
				var g, l time.Duration
				if i%2 == 0 {
					g, l = burst(goURL, per), burst(langURL, per)
				} else {
					l, g = burst(langURL, per), burst(goURL, per)
				}
				goTotal, langTotal = goTotal+g, langTotal+l
				ratios = append(ratios, float64(l)/float64(g))
			}
			b.StopTimer()
			slices.Sort(ratios)
			b.ReportMetric((ratios[rounds/2-1]+ratios[rounds/2])/2, "x-go")
			b.ReportMetric(float64(per*rounds)/goTotal.Seconds(), "go-req/s")
			b.ReportMetric(float64(per*rounds)/langTotal.Seconds(), lang+"-req/s")
			b.ReportMetric(ratios[0], "x-go-min")
			b.ReportMetric(ratios[rounds-1], "x-go-max")
		})
	}
}

// goGuest builds testdata/goguest (its echo action makes no op).
func goGuest(b *testing.B) []byte { return testwasm.BuildGo(b, "./testdata/goguest", true) }

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchProfile writes minimal's limits with the calls-per-minute cap out
// of the way: the benchmark measures the server, not a limit.
func benchProfile(b *testing.B) string {
	minimal, err := os.ReadFile(filepath.Join("..", "policy", "profiles", "minimal.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	prof := strings.Replace(string(minimal), "calls_per_minute: 60000", "calls_per_minute: 100000000", 1)
	prof = strings.Replace(prof, "concurrency: 4", "concurrency: 16", 1)
	path := filepath.Join(b.TempDir(), "bench.yaml")
	if err := os.WriteFile(path, []byte(prof), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// load sends b.N POSTs to url from benchWorkers goroutines, each on its
// own keep-alive connection, with the API keys in turn (none: no
// Authorization).
func load(b *testing.B, name, url string, keys ...string) {
	tr := &http.Transport{MaxIdleConnsPerHost: benchWorkers, MaxConnsPerHost: benchWorkers, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var turn atomic.Uint64
	run(b, name, func() error {
		key := ""
		if len(keys) > 0 {
			key = keys[turn.Add(1)%uint64(len(keys))]
		}
		return post(client, url, key)
	})
}

// post sends "World" to url with the bearer key (none when empty) and
// reads the answer, which must be 200.
func post(client *http.Client, url, key string) error {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("World"))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: status %d", url, res.StatusCode)
	}
	return err
}

// run calls f b.N times from benchWorkers goroutines and reports the
// throughput and the p50 and p99 latencies of the calls.
func run(b *testing.B, name string, f func() error) {
	// Warm up: open the connections, fill the pool.
	for range benchWorkers * 4 {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	stopProfile := profileLoad(b, name)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	cpu0 := cpuTime()
	begin := time.Now()
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := f(); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	stopProfile()
	slices.Sort(lat)
	rps := float64(b.N) / elapsed.Seconds()
	p50 := float64(lat[len(lat)/2].Microseconds())
	p99 := float64(lat[len(lat)*99/100].Microseconds())
	b.ReportMetric(rps, "req/s")
	b.ReportMetric(p50, "p50-µs")
	b.ReportMetric(p99, "p99-µs")
	// CPU time per call, of this whole process (server and load
	// generator): on a shared machine it moves less than wall time does.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	// Heap allocations per call, likewise of the whole process.
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "mallocs/op")
	benchResults.Store(name, [3]float64{rps, p50, p99})
}

// profileLoad writes a CPU profile of the measured loop alone (not the
// server's start, the module's compilation or the warm-up) to
// $MOAT_BENCH_PROFILE/NAME.cpu when that variable names a directory, and
// returns what stops it. go test's -cpuprofile covers the whole run, where
// compiling the guests dwarfs the requests.
func profileLoad(b *testing.B, name string) func() {
	dir := os.Getenv("MOAT_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatalf("%v (MOAT_BENCH_PROFILE cannot be used with -cpuprofile)", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}
