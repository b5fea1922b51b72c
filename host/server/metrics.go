package server

import (
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
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
}

// layers says which layer a failure code belongs to: the policy refused,
// the request was bad, the guest failed, or the host did.
var layers = map[abi.Code]string{
	abi.CodeDenied: "policy", abi.CodeConfirmationRequired: "policy", abi.CodeRateLimited: "policy",
	abi.CodeInvalidArgument: "request", abi.CodeInputTooLarge: "request", abi.CodeNoSuchAction: "request", abi.CodeNotFound: "request",
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
	m.invocations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_invocations_total", Help: "Action invocations by module, action and outcome (ok or a moat error code)."}, []string{"module", "action", "outcome"})
	m.invokeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "moat_invocation_duration_seconds", Help: "Invocation latency by module and action, policy checks included.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 14)}, []string{"module", "action"})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_invocation_failures_total", Help: "Failed invocations by layer (policy, request, guest, host) and code."}, []string{"layer", "code"})
	m.denials = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_denials_total", Help: "Refused requests: unauthenticated, denied by policy, rate limited."}, []string{"code"})
	m.uploads = prometheus.NewCounter(prometheus.CounterOpts{Name: "moat_module_uploads_total", Help: "Modules uploaded and loaded."})
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moat_runs_total", Help: "Code-execution jobs by language and status."}, []string{"language", "status"})
	for _, c := range []prometheus.Collector{m.requests, m.requestSeconds, m.inflight, m.invocations, m.invokeSeconds, m.failures, m.denials, m.uploads, m.runs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	f(&poolCollector{s: s,
		idle:   prometheus.NewDesc("moat_pool_idle_instances", "Instances pooled and ready, by organization and module.", []string{"org", "module"}, nil),
		loaded: prometheus.NewDesc("moat_modules_loaded", "Modules loaded, over all organizations.", nil, nil)})
	return m
}

func (m *metrics) observeInvocation(module, action string, start time.Time, err error) {
	outcome := "ok"
	if err != nil {
		code := host.CodeOf(err)
		if code == "" {
			code = abi.CodeInternal
		}
		outcome = string(code)
		layer := layers[code]
		if layer == "" {
			layer = "host"
		}
		m.failures.WithLabelValues(layer, outcome).Inc()
	}
	m.invocations.WithLabelValues(module, action, outcome).Inc()
	m.invokeSeconds.WithLabelValues(module, action).Observe(time.Since(start).Seconds())
}

func (m *metrics) handler(c echo.Context) error {
	promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}).ServeHTTP(c.Response(), c.Request())
	return nil
}

// poolCollector reads the pools at scrape time rather than tracking them
// on every call.
type poolCollector struct {
	s            *Server
	idle, loaded *prometheus.Desc
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- p.idle; ch <- p.loaded }

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	n := 0
	p.s.modules.each(func(k modKey, e *entry) {
		n++
		ch <- prometheus.MustNewConstMetric(p.idle, prometheus.GaugeValue, float64(e.mod.IdleInstances()), k.org, k.name)
	})
	ch <- prometheus.MustNewConstMetric(p.loaded, prometheus.GaugeValue, float64(n))
}
