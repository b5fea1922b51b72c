package policy

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// Report renders the evaluation for a person deciding whether to deploy m
// under p (`moat policy check`): who the module is, how it is trusted, each
// requested capability with its fate, the limits that will be enforced, what
// each action requires of its caller, and a last line with the verdict. It
// fits one screen for a typical manifest, because it is read in a terminal
// before a deployment, not scrolled through.
func (e *Evaluation) Report(m *Manifest, p *Profile) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	line := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }

	about := []string{"kind " + string(m.Kind), m.Module}
	if m.Language != "" {
		about = append(about, m.Language)
	}
	line("module\t%s %s (%s)", m.Name, m.Version, strings.Join(about, ", "))
	line("profile\t%s (%s)", p.Name, orDash(p.File))
	if e.Mode == ModeTrusted {
		line("mode\ttrusted: %s", e.ModeReason)
	} else {
		line("mode\tsandboxed: %s", e.ModeReason)
	}
	tw.Flush()

	refusal := func(what string) *Refusal {
		for i := range e.Refusals {
			if e.Refusals[i].Capability == what {
				return &e.Refusals[i]
			}
		}
		return nil
	}
	row := func(what string) {
		if r := refusal(what); r != nil {
			line("  %s\t✗ refused (%s): %s", what, r.Rule, r.Reason)
		} else {
			line("  %s\t✓ granted", what)
		}
	}
	// An http target's row also names the headers its grant injects:
	// names and the secrets they hold, never a value.
	httpRow := func(target string) {
		what := "http " + target
		t, err := parseTarget(target)
		if refusal(what) != nil || err != nil {
			row(what)
			return
		}
		var notes []string
		if in := e.injectionsFor(t); len(in) > 0 {
			notes = append(notes, "the host injects "+strings.Join(in, ", "))
		}
		if t.wild() || strings.HasPrefix(t.host, "*.") {
			notes = append(notes, WildcardAddressNote)
		}
		if len(notes) > 0 {
			line("  %s\t✓ granted; %s", what, strings.Join(notes, "; "))
			return
		}
		row(what)
	}
	line("")
	line("capabilities")
	if r := refusal("signature"); r != nil {
		line("  signature\t✗ required (%s): %s", r.Rule, r.Reason)
	}
	req := e.Requested
	if req.IsZero() {
		line("  (none requested)")
	}
	flag := func(name string, asked bool) {
		if asked {
			row(name)
		}
	}
	items := func(name string, list []string) {
		for _, item := range list {
			row(name + " " + item)
		}
	}
	flag("kv", req.KV)
	items("db", req.DB)
	for _, t := range req.HTTP.Targets {
		httpRow(t)
	}
	flag("media", req.Media)
	items("ai", req.AI)
	items("knowledge", req.Knowledge)
	flag("tasks", req.Tasks)
	for _, g := range req.Filesystem {
		what := "filesystem " + g.String()
		if r := refusal(what); r != nil {
			line("  %s\t✗ refused (%s): %s", what, r.Rule, r.Reason)
		} else {
			line("  %s\t✓ granted %s", what, g.Mode())
		}
	}
	line("  log, config\t✓ always available")
	tw.Flush()

	line("")
	line("limits\trequested\tprofile max\tenforced")
	for _, f := range limitFields {
		asked, most, got := f.get(m.Limits), f.get(e.maxLimits), f.get(e.Limits)
		mark := ""
		if asked != 0 && refusal("limits."+f.name+" "+f.format(asked)) != nil {
			mark = "\t✗ clamped: exceeds the maximum"
		}
		line("  %s\t%s\t%s\t%s%s", f.name, limitText(f.format, asked, "-"), limitText(f.format, most, "none"), limitText(f.format, got, "host default"), mark)
	}
	tw.Flush()

	if len(m.Actions) > 0 {
		line("")
		line("actions\tcaller needs")
		for _, a := range m.Actions {
			var needs []string
			if len(a.Roles) > 0 {
				needs = append(needs, "a role of "+strings.Join(a.Roles, ", "))
			}
			if len(a.Permissions) > 0 {
				needs = append(needs, "permissions "+strings.Join(a.Permissions, ", "))
			}
			if a.Confirm {
				needs = append(needs, "confirmation")
			}
			if len(needs) == 0 {
				needs = append(needs, "nothing (any caller)")
			}
			extra := ""
			if a.Timeout != 0 {
				extra += "  timeout " + a.Timeout.String()
			}
			line("  %s\t%s%s", a.Name, strings.Join(needs, "; "), extra)
		}
		if len(p.SensitiveOps) > 0 {
			line("  (any)\tconfirmation for ops %s", strings.Join(p.SensitiveOps, ", "))
		}
		tw.Flush()
	}

	if warns := m.Warnings(); len(warns) > 0 {
		line("")
		line("warnings")
		for _, w := range warns {
			line("  ⚠ %s", w)
		}
		tw.Flush()
	}

	line("")
	line("verdict: %s", e.verdict(p))
	tw.Flush()
	return b.String()
}

// WildcardAddressNote is what policy check says of a granted target with
// a wildcard host: what it reaches does not include the special addresses
// (loopback, private, metadata, ...), which a target reaches only by
// naming them (Evaluation.AddressTargets).
const WildcardAddressNote = "not a loopback, private or metadata address (a target reaches one only by naming it)"

// verdict is the last line of the report.
func (e *Evaluation) verdict(p *Profile) string {
	var caps, limits int
	signature := false
	for _, r := range e.Refusals {
		switch {
		case r.Capability == "signature":
			signature = true
		case strings.HasPrefix(r.Capability, "limits."):
			limits++
		default:
			caps++
		}
	}
	n := caps + limits
	switch {
	case e.Refused:
		var why []string
		if signature {
			why = append(why, "not signed by a trusted key (require_signature: true)")
		}
		if n > 0 && p.OnUngranted != OnUngrantedDenyAtCall {
			why = append(why, fmt.Sprintf("%s not granted (on_ungranted: %s)", plural(n, "request"), orDefault(p.OnUngranted, OnUngrantedRefuse)))
		}
		return "REFUSED at load: " + strings.Join(why, "; ")
	case n == 0:
		return "LOADS"
	}
	var what []string
	if caps > 0 {
		what = append(what, plural(caps, "request")+" will be denied at call time")
	}
	if limits > 0 {
		what = append(what, fmt.Sprintf("%s clamped to the profile's maximum", plural(limits, "limit")))
	}
	return "LOADS; " + strings.Join(what, " and ") + " (on_ungranted: deny_at_call)"
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func limitText(format func(uint64) string, v uint64, zero string) string {
	if v == 0 {
		return zero
	}
	return format(v)
}

func orDash(s string) string { return orDefault(s, "-") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
