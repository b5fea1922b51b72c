package server

import (
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, in a registry of its own
// (not the global one), so that two servers in one process, as in tests,
// do not collide.
type metrics struct {
	reg            *prometheus.Registry
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
	inflight       prometheus.Gauge
	invocations    *prometheus.CounterVec
	invokeSeconds  *prometheus.HistogramVec
	failures       *prometheus.CounterVec
	denials        *prometheus.CounterVec
	uploads        prometheus.Counter
	runs           *prometheus.CounterVec
	// admissionRefusals counts requests admission refused, by kind
	// (invocations, runs) and the setting that refused them.
	admissionRefusals *prometheus.CounterVec
	// The ops guests call (host.Config.ObserveOp), per family: counts by
	// op and outcome, latency, the bytes that crossed the boundary, and
	// model calls' tokens per organization.
	ops       *prometheus.CounterVec
	opSeconds *prometheus.HistogramVec
	opBytes   *prometheus.CounterVec
	aiTokens  *prometheus.CounterVec
	opSeries  map[[3]string]opSeries
	orgLabels *labelBound
	// invocationLabels bounds the module and action names of the
	// invocation metrics.
	invocationLabels *labelBound

	// The series of the hot path, resolved once: a WithLabelValues call
	// hashes its labels and takes the vector's lock each time, and the
	// invocation labels were cleaned and joined each time (six
	// allocations per request). Both caches are bounded: routes, methods
	// and status classes are few; module and action pairs stop being
	// cached at metrics.max_series (past it the label bound counts them
	// as other anyway).
	seriesMu   sync.RWMutex
	httpSeries map[[3]string]httpSeries
	invSeries  map[[3]string]*invocationSeries
}

type httpSeries struct {
	requests prometheus.Counter
	seconds  prometheus.Observer
}

type opSeries struct {
	count            prometheus.Counter
	seconds          prometheus.Observer
	reqBytes, replyB prometheus.Counter
}

type invocationSeries struct {
	ok      prometheus.Counter
	seconds prometheus.Observer
}

// layers says which layer a failure code belongs to: the policy refused,
// the request was bad, the guest failed, or the host did.
var layers = map[abi.Code]string{
	abi.CodeDenied: "policy", abi.CodeConfirmationRequired: "policy", abi.CodeRateLimited: "policy",
	abi.CodeInvalidArgument: "request", abi.CodeInputTooLarge: "request", abi.CodeNoSuchAction: "request", abi.CodeNotFound: "request", abi.CodeConflict: "request",
	abi.CodeTrap: "guest", abi.CodeGuestFault: "guest", abi.CodeGuestError: "guest", abi.CodeMemoryLimit: "guest", abi.CodeResourceExhausted: "guest",
	abi.CodeOutputTooLarge: "guest", abi.CodeTimeout: "guest", abi.CodeUnknownOp: "guest", abi.CodeABIVersion: "guest", abi.CodeBadModule: "guest",
	abi.CodeUnavailable: "host", abi.CodeInternal: "host", abi.CodeCanceled: "host", abi.CodeTooLarge: "host",
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_http_requests_total", Help: "HTTP requests by route, method and status class."}, []string{"route", "method", "status"})
	m.requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "moat_http_request_duration_seconds", Help: "HTTP request latency by route.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12)}, []string{"route"})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "moat_http_requests_in_flight", Help: "HTTP requests being served."})
	m.invocations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_invocations_total", Help: "Action invocations by organization, module, action and outcome (ok or a moat error code)."}, []string{"org", "module", "action", "outcome"})
	m.invokeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "moat_invocation_duration_seconds", Help: "Invocation latency by module and action, policy checks included.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 14)}, []string{"org", "module", "action"})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_invocation_failures_total", Help: "Failed invocations by layer (policy, request, guest, host) and code."}, []string{"layer", "code"})
	m.denials = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_denials_total", Help: "Refused requests: unauthenticated, denied by policy, rate limited."}, []string{"code"})
	m.uploads = prometheus.NewCounter(prometheus.CounterOpts{Name: "moat_module_uploads_total", Help: "Modules uploaded and loaded."})
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_runs_total", Help: "Code-execution jobs by language and status."}, []string{"language", "status"})
	m.ops = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_ops_total", Help: "Ops guests called, by family, op and outcome (ok or a moat error code)."}, []string{"family", "op", "outcome"})
	m.opSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "moat_op_duration_seconds", Help: "Op latency by family, policy checks included.",
		Buckets: []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}}, []string{"family"})
	m.opBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_op_bytes_total", Help: "Bytes of op requests (from guests) and replies (to them), by family; for http, roughly what left the sandbox and what came back."}, []string{"family", "direction"})
	m.aiTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_ai_tokens_total", Help: "Model tokens charged, by organization and kind (input, output)."}, []string{"org", "kind"})
	m.admissionRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_admission_refusals_total", Help: "Invocations and runs refused for want of a slot, by kind and the setting that refused them."}, []string{"kind", "limit"})
	m.invocationLabels = newLabelBound(s.cfg.Metrics.MaxSeries)
	m.httpSeries = map[[3]string]httpSeries{}
	m.invSeries = map[[3]string]*invocationSeries{}
	m.opSeries = map[[3]string]opSeries{}
	m.orgLabels = newLabelBound(s.cfg.Metrics.MaxSeries)
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "moat_http_connections_open", Help: "HTTP connections open (http.max_connections bounds them)."}, func() float64 {
		if l := s.conns.Load(); l != nil {
			return float64(l.count())
		}
		return 0
	}))
	f(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "moat_http_connections_refused_total", Help: "HTTP connections answered 429 and closed: their address had http.max_connections_per_source open, none idle."}, func() float64 {
		if l := s.conns.Load(); l != nil {
			return float64(l.refusals())
		}
		return 0
	}))
	f(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "moat_audit_pruned_events_total", Help: "Audit events this replica removed as older than audit.retention."}, func() float64 {
		return float64(s.auditPruned.Load())
	}))
	for _, a := range []*admission{s.invocations, s.execs} {
		f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "moat_admission_running", Help: "Admitted requests running, by kind.", ConstLabels: prometheus.Labels{"kind": a.kind}},
			func() float64 { r, _ := a.stats(); return float64(r) }))
		f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "moat_admission_waiting", Help: "Requests waiting for a slot, by kind.", ConstLabels: prometheus.Labels{"kind": a.kind}},
			func() float64 { _, w := a.stats(); return float64(w) }))
	}
	for _, c := range []prometheus.Collector{m.requests, m.requestSeconds, m.inflight, m.invocations, m.invokeSeconds, m.failures, m.denials, m.uploads, m.runs, m.admissionRefusals,
		m.ops, m.opSeconds, m.opBytes, m.aiTokens, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	f(&poolCollector{s: s, max: s.cfg.Metrics.MaxSeries,
		idle: prometheus.NewDesc("moat_pool_idle_instances", "Instances pooled and ready, by organization and module.", []string{"org", "module"}, nil),
		idleMemory: prometheus.NewDesc("moat_pool_idle_memory_bytes", "Linear memory the pooled instances hold while idle, by organization and module (a resident interpreter's heap).",
			[]string{"org", "module"}, nil),
		loaded: prometheus.NewDesc("moat_modules_loaded", "Modules loaded, over all organizations.", nil, nil)})
	f(newStateCollector(s))
	return m
}

func (m *metrics) observeInvocation(org, module, action string, start time.Time, err error) {
	outcome := "ok"
	if err != nil {
		code := abi.CodeOf(err)
		if code == "" {
			code = abi.CodeInternal
		}
		outcome = string(code)
		layer := layers[code]
		if layer == "" {
			layer = "host"
		}
		m.failures.WithLabelValues(layer, outcome).Inc()
		if code == abi.CodeNoSuchAction {
			// The caller made the name up: it names no series.
			action = "_unknown"
		}
	}
	if outcome != "ok" {
		lv := m.invocationLabels.values(org, module, action)
		m.invocations.WithLabelValues(lv[0], lv[1], lv[2], outcome).Inc()
		m.invokeSeconds.WithLabelValues(lv[0], lv[1], lv[2]).Observe(time.Since(start).Seconds())
		return
	}
	is := m.invocationOK(org, module, action)
	is.ok.Inc()
	is.seconds.Observe(time.Since(start).Seconds())
}

// invocationOK returns the series of module's action that a successful
// invocation counts in. Only successes resolve them, so that no series of
// outcome ok appears (at 0) for an action that never succeeded.
func (m *metrics) invocationOK(org, module, action string) *invocationSeries {
	k := [3]string{org, module, action}
	m.seriesMu.RLock()
	is := m.invSeries[k]
	m.seriesMu.RUnlock()
	if is != nil {
		return is
	}
	lv := m.invocationLabels.values(org, module, action)
	is = &invocationSeries{ok: m.invocations.WithLabelValues(lv[0], lv[1], lv[2], "ok"), seconds: m.invokeSeconds.WithLabelValues(lv[0], lv[1], lv[2])}
	m.seriesMu.Lock()
	if len(m.invSeries) < m.invocationLabels.max {
		m.invSeries[k] = is
	}
	m.seriesMu.Unlock()
	return is
}

// observeOp counts one op a guest called (host.Config.ObserveOp). Op
// names and families are the host's own (a fixed table) and outcomes abi
// codes, so their series are few and cached; organizations pass the label
// bound.
func (m *metrics) observeOp(o ops.Observation) {
	family := o.Family
	if family == "" {
		family = "_none"
	}
	k := [3]string{family, o.Op, o.Code}
	m.seriesMu.RLock()
	os, ok := m.opSeries[k]
	m.seriesMu.RUnlock()
	if !ok {
		lv := []string{labelValue(family), labelValue(o.Op), labelValue(o.Code)}
		os = opSeries{count: m.ops.WithLabelValues(lv...), seconds: m.opSeconds.WithLabelValues(lv[0]),
			reqBytes: m.opBytes.WithLabelValues(lv[0], "request"), replyB: m.opBytes.WithLabelValues(lv[0], "reply")}
		m.seriesMu.Lock()
		if len(m.opSeries) < 4096 {
			m.opSeries[k] = os
		}
		m.seriesMu.Unlock()
	}
	os.count.Inc()
	os.seconds.Observe(o.Duration.Seconds())
	os.reqBytes.Add(float64(o.RequestBytes))
	os.replyB.Add(float64(o.ReplyBytes))
	if o.InputTokens > 0 || o.OutputTokens > 0 {
		org := m.orgLabels.values(o.Org)[0]
		m.aiTokens.WithLabelValues(org, "input").Add(float64(o.InputTokens))
		m.aiTokens.WithLabelValues(org, "output").Add(float64(o.OutputTokens))
	}
}

// observeRequest counts one HTTP request of route (a pattern of the
// router, or "unmatched"), method (methodLabel's) and status class.
func (m *metrics) observeRequest(route, method, status string, took time.Duration) {
	k := [3]string{route, method, status}
	m.seriesMu.RLock()
	hs, ok := m.httpSeries[k]
	m.seriesMu.RUnlock()
	if !ok {
		hs = httpSeries{requests: m.requests.WithLabelValues(route, method, status), seconds: m.requestSeconds.WithLabelValues(route)}
		m.seriesMu.Lock()
		m.httpSeries[k] = hs
		m.seriesMu.Unlock()
	}
	hs.requests.Inc()
	hs.seconds.Observe(took.Seconds())
}

func (m *metrics) handler(c echo.Context) error {
	promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}).ServeHTTP(c.Response(), c.Request())
	return nil
}

// metricsAuth lets only the operator read /metrics: its series name every
// organization's modules and actions. The operator's token is no API key
// (keys belong to an organization) but metrics.token_file's.
func (s *Server) metricsAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		want := s.cfg.Metrics.Token
		if want == "" {
			return problem(http.StatusForbidden, string(abi.CodeDenied),
				"/metrics answers only the operator, and no metrics token is configured: set metrics.token_file in the server config and scrape with Authorization: Bearer <token>")
		}
		scheme, got, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(want)) != 1 {
			return problem(http.StatusUnauthorized, "unauthenticated",
				"/metrics needs the operator's metrics token (metrics.token_file in the server config) as Authorization: Bearer <token>; API keys do not open it")
		}
		return next(c)
	}
}

// labelBound bounds the label sets a metric takes from names a tenant
// chooses (modules, actions): each value is made safe for any reader of
// the exposition (at most 64 bytes of letters, digits and ._:/@+-, others
// as _), and past max distinct sets, new ones are counted as "other".
// 1 500 made-up action names once made 27 000 series.
type labelBound struct {
	max  int
	mu   sync.Mutex
	seen map[string]bool
}

func newLabelBound(max int) *labelBound { return &labelBound{max: max, seen: map[string]bool{}} }

// values returns the label values to use for vals.
func (b *labelBound) values(vals ...string) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = labelValue(v)
	}
	key := strings.Join(out, "\x00")
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[key] {
		return out
	}
	if len(b.seen) < b.max {
		b.seen[key] = true
		return out
	}
	for i := range out {
		out[i] = "other"
	}
	return out
}

// labelValue is a name as a label value: control bytes, quotes, newlines,
// escape sequences and anything else outside a small safe set become _,
// and it is cut to 64 bytes.
func labelValue(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:/@+-", c) >= 0) {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// poolCollector reads the pools at scrape time rather than tracking them
// on every call.
type poolCollector struct {
	s                        *Server
	max                      int // label sets; the rest are summed under other
	idle, idleMemory, loaded *prometheus.Desc
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.idle
	ch <- p.idleMemory
	ch <- p.loaded
}

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	type pool struct {
		org, name string
		idle      int
		memory    uint64
	}
	var pools []pool
	p.s.modules.each(func(k modKey, e *entry) {
		pools = append(pools, pool{labelValue(k.org), labelValue(k.name), e.mod.IdleInstances(), e.mod.IdleMemoryBytes()})
	})
	slices.SortFunc(pools, func(a, b pool) int { return strings.Compare(a.org+"\x00"+a.name, b.org+"\x00"+b.name) })
	sums := map[[2]string]int{}
	memory := map[[2]string]uint64{}
	var order [][2]string
	for i, x := range pools {
		k := [2]string{x.org, x.name}
		if i >= p.max {
			k = [2]string{"other", "other"}
		}
		if _, ok := sums[k]; !ok {
			order = append(order, k)
		}
		sums[k] += x.idle
		memory[k] += x.memory
	}
	for _, k := range order {
		ch <- prometheus.MustNewConstMetric(p.idle, prometheus.GaugeValue, float64(sums[k]), k[0], k[1])
		ch <- prometheus.MustNewConstMetric(p.idleMemory, prometheus.GaugeValue, float64(memory[k]), k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(p.loaded, prometheus.GaugeValue, float64(len(pools)))
}
