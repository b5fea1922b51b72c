package server_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// TestAdmissionFairness floods the server from one organization with
// guests that compute without pause, spread over copies of a module
// (each copy has its own manifest concurrency, so copies once multiplied
// it), and measures another organization's small invocations meanwhile:
// they stay fast, and the flood is refused past its organization's bound
// with 429, Retry-After, the setting named and the refusal audited.
func TestAdmissionFairness(t *testing.T) {
	testenv.Timing(t)
	ts := start(t, "", func(c *server.Config) {
		c.Admission.Wait = policy.Duration(2 * time.Second)
		withMetricsToken(c)
	})
	acme := ts.key(t, "acme", "ann", "admin")
	globex := ts.key(t, "globex", "gus", "admin")
	wasm := testwasm.BuildGo(t, "./testdata/goguest", true)
	for i := range 4 {
		spinModule(t, ts, acme, fmt.Sprintf("spin%d", i), wasm)
	}
	spinModule(t, ts, globex, "spin0", wasm)
	echo := func() time.Duration {
		start := time.Now()
		r := ts.do(t, "POST", "/v1/modules/spin0/actions/echo", globex, strings.NewReader("small"))
		if r.status != http.StatusOK || string(r.body) != "small" {
			t.Fatalf("globex's echo: %d %s", r.status, r.body)
		}
		return time.Since(start)
	}
	var quiet []time.Duration
	for range 5 {
		quiet = append(quiet, echo())
	}

	const flood = 40
	var wg sync.WaitGroup
	results := make([]response, flood)
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = ts.do(t, "POST", fmt.Sprintf("/v1/modules/spin%d/actions/loop", i%4), acme, nil)
		}()
	}
	time.Sleep(300 * time.Millisecond) // the flood is running and queued
	var busy []time.Duration
	for range 10 {
		busy = append(busy, echo())
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	slices.Sort(busy)
	t.Logf("globex's echo: quiet %v; during acme's flood of %d spinning invocations: median %v, max %v", slices.Max(quiet), flood, busy[len(busy)/2], busy[len(busy)-1])
	if busy[len(busy)-1] > 150*time.Millisecond {
		t.Errorf("globex's echo took up to %v while acme flooded (all: %v); want under 150 ms", busy[len(busy)-1], busy)
	}

	statuses := map[int]int{}
	for _, r := range results {
		statuses[r.status]++
		switch r.status {
		case http.StatusGatewayTimeout: // ran to its 1.5 s timeout
		case http.StatusTooManyRequests:
			p := r.json(t)
			if p["code"] != "rate_limited" || r.header.Get("Retry-After") != "2" ||
				!strings.Contains(fmt.Sprint(p["detail"]), "organization acme runs its limit of") || !strings.Contains(fmt.Sprint(p["detail"]), "(admission.org_invocations)") {
				t.Errorf("refused flood request: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.body)
			}
		default:
			t.Errorf("flood request: %d %s", r.status, r.body)
		}
	}
	if statuses[http.StatusTooManyRequests] == 0 || statuses[http.StatusGatewayTimeout] == 0 {
		t.Errorf("flood outcomes %v; want some run (504) and some refused (429)", statuses)
	}
	t.Logf("flood outcomes: %v", statuses)
	r := ts.do(t, "GET", "/v1/audit?kind=decision&decision=deny&limit=1000", acme, nil)
	n := strings.Count(string(r.body), `"rule":"admission.org_invocations"`)
	if n != statuses[http.StatusTooManyRequests] {
		t.Errorf("%d refusals audited for acme; want %d", n, statuses[http.StatusTooManyRequests])
	}
	if r := ts.do(t, "GET", "/v1/audit?kind=decision&decision=deny", globex, nil); strings.Contains(string(r.body), "admission") {
		t.Errorf("globex's audit trail holds acme's refusals: %s", r.body)
	}
	if m := ts.scrape(t); !strings.Contains(m, fmt.Sprintf(`moat_admission_refusals_total{kind="invocations",limit="admission.org_invocations"} %d`, n)) {
		t.Errorf("refusals not counted:\n%s", grepLines(m, "moat_admission"))
	}
}

// TestAdmissionBounds: the server's bound is a 503 naming
// admission.max_invocations; a full queue refuses at once naming
// admission.queue; confirmations count as invocations.
func TestAdmissionBounds(t *testing.T) {
	testenv.Timing(t)
	ts := start(t, "", func(c *server.Config) {
		c.Admission = server.AdmissionConfig{MaxInvocations: 2, OrgInvocations: 1, Wait: policy.Duration(700 * time.Millisecond), Queue: 1}
	})
	wasm := testwasm.BuildGo(t, "./testdata/goguest", true)
	keys := map[string]string{}
	for _, org := range []string{"acme", "globex", "initech"} {
		keys[org] = ts.key(t, org, "u", "admin")
		spinModule(t, ts, keys[org], "spin", wasm)
	}
	loop := func(org string) chan response {
		ch := make(chan response, 1)
		go func() { ch <- ts.do(t, "POST", "/v1/modules/spin/actions/loop", keys[org], nil) }()
		return ch
	}
	a, g := loop("acme"), loop("globex")
	time.Sleep(200 * time.Millisecond) // both slots of the server are taken
	queued := make(chan response, 1)
	go func() {
		queued <- ts.do(t, "POST", "/v1/modules/spin/actions/echo", keys["acme"], strings.NewReader("x"))
	}()
	time.Sleep(100 * time.Millisecond)

	tests := []struct {
		name   string
		org    string
		status int
		code   string
		detail string
		after  time.Duration // at least
		before time.Duration // at most
	}{
		{"a full queue", "acme", 429, "rate_limited", "organization acme runs its limit of 1 invocations at once (admission.org_invocations) and has 1 more waiting (admission.queue)", 0, 300 * time.Millisecond},
		{"the server's bound", "initech", 503, "unavailable", "the server runs its limit of 2 invocations at once (admission.max_invocations)", 600 * time.Millisecond, 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			r := ts.do(t, "POST", "/v1/modules/spin/actions/echo", keys[tt.org], strings.NewReader("x"))
			took := time.Since(start)
			p := r.json(t)
			if r.status != tt.status || p["code"] != tt.code || !strings.Contains(fmt.Sprint(p["detail"]), tt.detail) || r.header.Get("Retry-After") != "1" {
				t.Errorf("%d Retry-After %q %s; want %d %s %q", r.status, r.header.Get("Retry-After"), r.body, tt.status, tt.code, tt.detail)
			}
			if took < tt.after || took > tt.before {
				t.Errorf("answered after %v; want %v to %v", took, tt.after, tt.before)
			}
		})
	}
	if r := <-queued; r.status != 429 || !strings.Contains(string(r.body), "none ended within") {
		t.Errorf("acme's queued echo behind its 1.5 s loop with a 0.7 s wait: %d %s", r.status, r.body)
	}
	<-a
	<-g
	r := ts.do(t, "GET", "/v1/audit?kind=decision&decision=deny", keys["initech"], nil)
	if !strings.Contains(string(r.body), `"rule":"admission.max_invocations"`) || !strings.Contains(string(r.body), `"module":"spin"`) {
		t.Errorf("initech's refusal is not audited: %s", r.body)
	}
	// Free again: every organization runs.
	for org, k := range keys {
		if r := ts.do(t, "POST", "/v1/modules/spin/actions/echo", k, strings.NewReader("x")); r.status != 200 {
			t.Errorf("%s after the load: %d %s", org, r.status, r.body)
		}
	}
}

// TestRunAdmission: code-execution runs have bounds of their own
// (admission.org_runs): a second run of an organization waits, then is
// refused naming the setting, while another organization's run goes.
func TestRunAdmission(t *testing.T) {
	testenv.Timing(t)
	ts := start(t, "", func(c *server.Config) {
		withExecutor(t)(c)
		c.Admission.OrgRuns, c.Admission.MaxRuns, c.Admission.Wait = 1, 2, policy.Duration(300*time.Millisecond)
	})
	requireC(t, ts)
	acme, globex := ts.key(t, "acme", "ann"), ts.key(t, "globex", "gus")
	spin := make(chan response, 1)
	go func() {
		spin <- ts.do(t, "POST", "/v1/runs", acme, strings.NewReader(`{"language":"c","files":[{"name":"main.c","content":"int main(void){for(;;);}"}],"limits":{"timeout":"2s"}}`))
	}()
	time.Sleep(200 * time.Millisecond)
	r := ts.do(t, "POST", "/v1/runs", acme, strings.NewReader(`{"language":"c","files":[{"name":"main.c","content":"int main(void){return 0;}"}]}`))
	if p := r.json(t); r.status != 429 || p["code"] != "rate_limited" || !strings.Contains(fmt.Sprint(p["detail"]), "organization acme runs its limit of 1 runs at once (admission.org_runs)") {
		t.Errorf("acme's second run: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/v1/runs", globex, strings.NewReader(`{"language":"c","files":[{"name":"main.c","content":"int main(void){return 0;}"}]}`))
	if r.status != 200 || r.json(t)["status"] != "ok" {
		t.Errorf("globex's run while acme's runs: %d %s", r.status, r.body)
	}
	if r := <-spin; r.status != 200 || r.json(t)["status"] != "timeout" {
		t.Errorf("acme's spinning run: %d %s", r.status, r.body)
	}
}
