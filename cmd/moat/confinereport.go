package main

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// confinementEvents are the audit events of a host's confinement report:
// one allow event listing the layers applied, and one deny event per layer
// it runs without (Rule: the layer, Reason: why), so that a layer best
// effort dropped is on the record, not only in a log.
func confinementEvents(who string, rep *kernel.HostReport) []audit.Event {
	evs := []audit.Event{{Kind: audit.KindConfinement, Decision: audit.Allow, Module: who,
		Rule: "applied", Reason: strings.Join(rep.Applied, ", ")}}
	for _, layer := range slices.Sorted(maps.Keys(rep.Missing)) {
		evs = append(evs, audit.Event{Kind: audit.KindConfinement, Decision: audit.Deny, Module: who,
			Rule: layer, Reason: "running without it: " + rep.Missing[layer]})
	}
	return evs
}

// warnConfinement logs the report: the layers applied at debug, each
// missing one at warn.
func warnConfinement(log *slog.Logger, who string, rep *kernel.HostReport) {
	log.Debug(who+": confined", "applied", rep.Applied)
	for _, layer := range slices.Sorted(maps.Keys(rep.Missing)) {
		log.Warn(who+": running without a kernel layer", "layer", layer, "why", rep.Missing[layer])
	}
}

// recordConfinement logs the report and writes its audit events.
func recordConfinement(ctx context.Context, log *slog.Logger, a *audit.Log, who string, rep *kernel.HostReport) {
	if rep == nil {
		return
	}
	warnConfinement(log, who, rep)
	if a == nil {
		return
	}
	for _, ev := range confinementEvents(who, rep) {
		a.Record(ctx, ev)
	}
}
