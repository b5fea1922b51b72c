package server_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
)

// syncBuf is a log sink safe for the server's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestAuditRetention: with audit.retention set, the server prunes at
// start what is older, keeps what is not, logs the count and exposes it
// on /metrics; without it nothing is removed.
func TestAuditRetention(t *testing.T) {
	for _, tt := range []struct {
		retention string
		wantLeft  int
	}{
		{"", 8},
		{"2d", 4},
	} {
		t.Run("retention="+tt.retention, func(t *testing.T) {
			dir := t.TempDir()
			st, err := store.Open(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			var evs []store.AuditEvent
			for i := range 8 {
				at := now.Add(-time.Hour)
				if i < 4 {
					at = now.Add(-72 * time.Hour)
				}
				evs = append(evs, store.AuditEvent{Kind: "decision", Decision: "deny", Org: "acme", CorrelationID: "seed", Time: at})
			}
			if err := st.AuditInsert(context.Background(), evs); err != nil {
				t.Fatal(err)
			}
			st.Close()
			var logs syncBuf
			ts := start(t, dir, func(c *server.Config) {
				withMetricsToken(c)
				c.Audit.Retention = tt.retention
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			count := func() int {
				got, err := ts.Store().AuditQuery(context.Background(), store.AuditFilter{CorrelationID: "seed", Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				return len(got)
			}
			deadline := time.Now().Add(10 * time.Second)
			for count() != tt.wantLeft && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if n := count(); n != tt.wantLeft {
				t.Fatalf("%d events left, want %d", n, tt.wantLeft)
			}
			m := ts.do(t, "GET", "/metrics", "", nil, "Authorization", "Bearer "+metricsToken)
			want := fmt.Sprintf("moat_audit_pruned_events_total %d", 8-tt.wantLeft)
			if !strings.Contains(string(m.body), want) {
				t.Errorf("/metrics lacks %q", want)
			}
			if tt.retention != "" && !strings.Contains(logs.String(), `msg="audit prune: removed events older than the retention"`) || tt.retention != "" && !strings.Contains(logs.String(), "removed=4") {
				t.Errorf("no log line with the count:\n%s", logs.String())
			}
		})
	}
}

// TestUpgradeConfig: migrate: and audit: are checked at load, each
// refusal naming the field and what to write.
func TestUpgradeConfig(t *testing.T) {
	for _, tt := range []struct {
		yaml, want string
	}{
		{"migrate: auto\n", ""},
		{"migrate: manual\n", ""},
		{"migrate: yes\n", `migrate: "yes" is not a migration mode; write auto`},
		{"audit: {retention: 90d}\n", ""},
		{"audit: {retention: 720h, prune_every: 10m}\n", ""},
		{"audit: {retention: \"0\"}\n", ""},
		{"audit: {retention: 90s}\n", `audit.retention: "90s" is shorter than 1h0m0s`},
		{"audit: {retention: 90}\n", `audit.retention: "90" is not a duration; write it like 90d`},
		{"audit: {retention: -5d}\n", `audit.retention: "-5d" is not a number of days`},
		{"audit: {retention: 9999999d}\n", `is not a number of days`},
		{"audit: {retention: 90d, prune_every: 1s}\n", `prune_every "1s": write a duration of at least 1m`},
	} {
		_, err := server.ParseConfig("moat-server.yaml", []byte(tt.yaml))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v", tt.yaml, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: %v, want %q", tt.yaml, err, tt.want)
		}
	}
}
