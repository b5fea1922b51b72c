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

	r := &reporter{e: e, line: line}
	refusal := r.refusal
	line("")
	line("capabilities")
	if r := refusal("signature"); r != nil {
		line("  signature\t✗ required (%s): %s", r.Rule, r.Reason)
	}
	req := e.Requested
	if req.IsZero() {
		line("  (none requested)")
	}
	for _, k := range table() {
		k.shape.report(r, k, k.value(&req))
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

	if len(m.Routes) > 0 {
		reportRoutes(line, m)
		tw.Flush()
	}

	if len(m.Pages) > 0 {
		line("")
		line("pages	viewer needs	files")
		for _, pg := range m.Pages {
			var needs []string
			if len(pg.Roles) > 0 {
				needs = append(needs, "a role of "+strings.Join(pg.Roles, ", "))
			}
			if len(pg.Permissions) > 0 {
				needs = append(needs, "permissions "+strings.Join(pg.Permissions, ", "))
			}
			if len(needs) == 0 {
				needs = append(needs, "nothing (any signed-in person)")
			}
			line("  %s	%s	%s", pg.Name, strings.Join(needs, "; "), strings.Join(append([]string{pg.Entry}, pg.Files...), " "))
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

// reporter is what a shape writes its rows of a report with.
type reporter struct {
	e    *Evaluation
	line func(format string, args ...any)
}

// refusal returns the refusal of what, or nil when it was granted.
func (r *reporter) refusal(what string) *Refusal {
	for i := range r.e.Refusals {
		if r.e.Refusals[i].Capability == what {
			return &r.e.Refusals[i]
		}
	}
	return nil
}

// row writes what as granted or refused.
func (r *reporter) row(what string) {
	if rf := r.refusal(what); rf != nil {
		r.line("  %s\t✗ refused (%s): %s", what, rf.Rule, rf.Reason)
	} else {
		r.line("  %s\t✓ granted", what)
	}
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
