package server

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host/store"
)

// MigrateMode is Config.Migrate as the store takes it.
func (c Config) MigrateMode() (store.MigrateMode, error) {
	switch c.Migrate {
	case "":
		return store.MigrateDefault, nil
	case "auto":
		return store.MigrateAuto, nil
	case "manual":
		return store.MigrateNever, nil
	}
	return 0, fmt.Errorf("%q is not a migration mode; write auto (apply pending schema steps at start) or manual (only moat migrate does), or leave it out", c.Migrate)
}

// AuditConfig is the audit trail's retention.
type AuditConfig struct {
	// Retention is how long audit events are kept: 90d, 720h. Left out
	// (or 0), every event is kept: the trail is the record of what was
	// allowed and denied, how long to keep it is a compliance decision
	// (a year is common) that moat cannot make for the operator, and
	// deleting evidence by default would be the one mistake that cannot
	// be undone. Events older than it are removed by a periodic, batched
	// prune on every replica (safe at once: replicas divide the rows),
	// and `moat audit prune --before` removes them by hand.
	Retention string `yaml:"retention"`
	// PruneEvery is how often the prune runs. Default 1h.
	PruneEvery string `yaml:"prune_every"`
}

// MinAuditRetention is the shortest audit.retention accepted: anything
// shorter is more likely a unit mistake (90s for 90d) than a policy.
const MinAuditRetention = time.Hour

// ParseRetention reads a retention: a number of days (90d) or a Go
// duration (720h, 90m); "" or "0" is none (keep everything).
func ParseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 100*365 {
			return 0, fmt.Errorf("%q is not a number of days; write it like 90d", s)
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not a duration; write it like 90d or 720h, or 0 to keep every event", s)
		}
	}
	if d < MinAuditRetention {
		return 0, fmt.Errorf("%q is shorter than %s; write days like 90d (0 keeps every event)", s, MinAuditRetention)
	}
	return d, nil
}

func (a AuditConfig) validate() error {
	if _, err := ParseRetention(a.Retention); err != nil {
		return err
	}
	if a.PruneEvery != "" {
		d, err := time.ParseDuration(a.PruneEvery)
		if err != nil || d < time.Minute {
			return fmt.Errorf("prune_every %q: write a duration of at least 1m, like 1h", a.PruneEvery)
		}
	}
	return nil
}

// pruneEvery is PruneEvery, 1h by default.
func (a AuditConfig) pruneEvery() time.Duration {
	if d, err := time.ParseDuration(a.PruneEvery); err == nil && d >= time.Minute {
		return d
	}
	return time.Hour
}

// PruneAudit removes the audit events older than before from st, and
// logs how many it removed (the line an operator's alert or dashboard
// reads, with the store's location).
func PruneAudit(ctx context.Context, st *store.Store, before time.Time, log *slog.Logger) (store.AuditPruned, error) {
	start := time.Now()
	p, err := st.AuditPrune(ctx, before)
	attrs := []any{"before", before.UTC().Format(time.RFC3339), "removed", p.Events, "segments", p.Segments, "batches", p.Batches, "duration", time.Since(start).Round(time.Millisecond)}
	if err != nil {
		log.Warn("audit prune: stopped", append(attrs, "err", err)...)
		return p, err
	}
	log.Info("audit prune: removed events older than the retention", attrs...)
	return p, nil
}

// startAuditPrune runs PruneAudit every audit.prune_every, from start,
// when audit.retention is set, until Close.
func (s *Server) startAuditPrune() {
	keep, _ := ParseRetention(s.cfg.Audit.Retention)
	if keep == 0 {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stopPrune, s.pruneDone = stop, make(chan struct{})
	every := s.cfg.Audit.pruneEvery()
	go func() {
		defer close(s.pruneDone)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if p, err := PruneAudit(ctx, s.store, time.Now().Add(-keep), s.log); err == nil {
				s.auditPruned.Add(p.Events)
			}
			t.Reset(every)
		}
	}()
}
