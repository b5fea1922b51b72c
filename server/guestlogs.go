package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// A module invocation's guest log records (moat.Log.Info and the like,
// and the plugin's stdout and stderr lines) go to the host's log. A
// caller who asks with ?logs=true gets them back in the response too: the
// invocation's own records, gathered while it runs, in a JSON envelope
// (InvocationJSON) rather than the raw output. See RATIONALE.md, "Guest
// logs come back in the response, on request".
//
// The records are gathered by a slog.Handler the hosts log through
// (guestLogCapture): a record whose source is "guest" and whose context
// carries a collector (put there by the invoke handler, on the request's
// context, which the invocation's runs under) is copied into that
// collector. So only the caller's own invocation can fill its collector,
// and nothing outlives the response.

// Bounds of one invocation's gathered records. The invocation's budget
// (limits.budget.log_records, log_bytes) already bounds what a guest may
// log; these bound what the server holds for one response whatever the
// operator sets there: past either, records are counted in logs_dropped
// and not kept.
const (
	maxGuestLogRecords = 200
	maxGuestLogBytes   = 64 << 10
)

// GuestLogRecord is one record a guest logged during an invocation.
type GuestLogRecord struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"` // DEBUG, INFO, WARN, ERROR
	Message string    `json:"message"`
	// Stream is "stdout" or "stderr" for a line the plugin printed there,
	// empty for a record of log.write.
	Stream string         `json:"stream,omitempty"`
	Fields map[string]any `json:"fields,omitempty"` // the guest's own fields
}

// InvocationJSON is the answer to an invocation asked with ?logs=true.
type InvocationJSON struct {
	Output string `json:"output"`
	// Encoding is "base64" when the output is not UTF-8 (Output is then
	// its base64), empty otherwise.
	Encoding      string           `json:"encoding,omitempty"`
	CorrelationID string           `json:"correlation_id"`
	Logs          []GuestLogRecord `json:"logs"`
	// LogsDropped counts the records past the bounds of one response
	// (200 records, 64 KiB).
	LogsDropped int `json:"logs_dropped,omitempty"`
}

// guestLogs gathers one invocation's records, bounded in count and bytes.
type guestLogs struct {
	mu      sync.Mutex
	recs    []GuestLogRecord
	bytes   int
	dropped int
	taken   bool // the response has them: later records are not kept
}

type guestLogsKey struct{}

func withGuestLogs(ctx context.Context, g *guestLogs) context.Context {
	return context.WithValue(ctx, guestLogsKey{}, g)
}

func guestLogsFrom(ctx context.Context) *guestLogs {
	if ctx == nil {
		return nil
	}
	g, _ := ctx.Value(guestLogsKey{}).(*guestLogs)
	return g
}

// add keeps r when it fits the bounds, and counts it as dropped if not.
func (g *guestLogs) add(r slog.Record) {
	rec := GuestLogRecord{Time: r.Time.UTC(), Level: r.Level.String(), Message: r.Message}
	guest := false
	r.Attrs(func(a slog.Attr) bool {
		switch {
		case a.Key == "source":
			guest = a.Value.String() == "guest"
		case a.Key == "stream":
			rec.Stream = a.Value.String()
		case strings.HasPrefix(a.Key, "guest."):
			if rec.Fields == nil {
				rec.Fields = map[string]any{}
			}
			rec.Fields[strings.TrimPrefix(a.Key, "guest.")] = a.Value.Any()
		}
		return true
	})
	if !guest {
		return
	}
	if g.full() {
		return
	}
	// The record's size as the response will carry it (measured outside
	// the lock: it is work in proportion to what the guest logged); a
	// guest's field that does not marshal (it came from JSON, so it
	// should) is dropped.
	b, err := json.Marshal(rec)
	if err != nil {
		rec.Fields = nil
		b, _ = json.Marshal(rec)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.taken {
		return
	}
	if len(g.recs) >= maxGuestLogRecords || g.bytes+len(b) > maxGuestLogBytes {
		g.dropped++
		return
	}
	g.bytes += len(b)
	g.recs = append(g.recs, rec)
}

// full counts a record as dropped, and says so, when no more fit.
func (g *guestLogs) full() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.taken {
		return true
	}
	if len(g.recs) >= maxGuestLogRecords || g.bytes >= maxGuestLogBytes {
		g.dropped++
		return true
	}
	return false
}

func (g *guestLogs) take() ([]GuestLogRecord, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.taken = true
	out := g.recs
	if out == nil {
		out = []GuestLogRecord{}
	}
	return out, g.dropped
}

// guestLogCapture is the handler the hosts log through: the server's
// handler, and a copy of each guest record into the collector of the
// invocation it belongs to. It answers Enabled for every level under a
// collector's context, so that a guest's debug records are gathered even
// when the operator's log leaves them out (they are passed on only at the
// levels the server's handler enables).
type guestLogCapture struct {
	inner slog.Handler
}

func (h guestLogCapture) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l) || guestLogsFrom(ctx) != nil
}

func (h guestLogCapture) Handle(ctx context.Context, r slog.Record) error {
	if g := guestLogsFrom(ctx); g != nil {
		g.add(r)
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h guestLogCapture) WithAttrs(as []slog.Attr) slog.Handler {
	return guestLogCapture{inner: h.inner.WithAttrs(as)}
}

func (h guestLogCapture) WithGroup(name string) slog.Handler {
	return guestLogCapture{inner: h.inner.WithGroup(name)}
}

// wantsLogs reads ?logs=: true or 1 asks for the envelope.
func wantsLogs(c echo.Context) (bool, error) {
	switch v := c.QueryParam("logs"); v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		return false, problem(http.StatusBadRequest, "invalid_argument", "logs=%q: give logs=true for the output and the guest's log records as JSON, or leave it out for the raw output", v)
	}
}

// logsFor prepares an invocation of the request in c: when the caller
// asked for logs (?logs=true), a collector, on the context the invocation
// is to run under; else nil and the request's context, and no allocation.
func logsFor(c echo.Context) (*guestLogs, context.Context, error) {
	ctx := c.Request().Context()
	want, err := wantsLogs(c)
	if err != nil || !want {
		return nil, ctx, err
	}
	g := &guestLogs{}
	return g, withGuestLogs(ctx, g), nil
}

// answer sends an invocation's output: raw, or with g's records in an
// InvocationJSON when g is not nil.
func (g *guestLogs) answer(c echo.Context, out []byte) error {
	if g == nil {
		return writeOutput(c, out)
	}
	res := InvocationJSON{Output: string(out), CorrelationID: correlationID(c)}
	if !utf8.Valid(out) {
		res.Output, res.Encoding = base64.StdEncoding.EncodeToString(out), "base64"
	}
	res.Logs, res.LogsDropped = g.take()
	return c.JSON(http.StatusOK, res)
}

// failed puts g's records, when g is not nil, on the problem of a failed
// invocation.
func (g *guestLogs) failed(p *Problem) *Problem {
	if g != nil {
		p.Logs, p.LogsDropped = g.take()
	}
	return p
}
