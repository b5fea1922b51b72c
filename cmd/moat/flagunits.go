package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Flags with units, one rule for the CLI and the HTTP API: a size in MiB
// says so in its name (--memory-mib, --disk-mib, --host-memory-mib), as
// the API's fields say theirs (limits.memory_bytes, max_output_bytes); a
// time is what the API takes (RFC 3339) or, for the command line's sake,
// a duration back from now.

// mibFlag registers NAME-mib, a size in MiB, and NAME, its first name,
// kept working on the same variable for scripts but deprecated (cobra
// says so on stderr when it is used) and hidden from --help: `--memory 64`
// beside a JSON memory_bytes read as bytes to too many.
func mibFlag(fl *pflag.FlagSet, p *int, name string, def int, usage string) {
	fl.IntVar(p, name+"-mib", def, usage)
	fl.IntVar(p, name, def, usage)
	fl.MarkDeprecated(name, "use --"+name+"-mib (the same number, in MiB)")
}

// mibChanged reports whether NAME-mib or its deprecated NAME was given.
func mibChanged(changed func(string) bool, name string) bool {
	return changed(name+"-mib") || changed(name)
}

// parseTimeOrAgo is the one reader of a point in time on the command line:
// written either as the HTTP API writes it (RFC 3339, e.g.
// 2026-01-02T15:04:05Z) or as an age back from now, which age reads (and
// refuses, with the message the flag gives). Each flag says what an age
// is: a Go duration for --since and --until (durationAge), an age as
// audit.retention writes it for `moat audit prune --before` (parseBefore).
// The two forms never overlap, so which is tried first decides nothing.
func parseTimeOrAgo(s string, now time.Time, age func(string) (time.Duration, error)) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := age(s)
	if err != nil {
		return time.Time{}, err
	}
	return now.Add(-d), nil
}

// durationAge reads an age as a Go duration (1h, 90m). A negative one
// (the future, spelt backwards) is refused rather than guessed at.
func durationAge(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a duration back from now (1h, 90m) nor an RFC 3339 time (2026-01-02T15:04:05Z)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q: give a positive duration back from now, e.g. 1h, or an RFC 3339 time", s)
	}
	return d, nil
}

// timeOrAgo is a flag's value that is a point in time (parseTimeOrAgo,
// an age being a duration: durationAge), as /v1/audit's since and until
// take it: `moat audit --since 1h --until 10m`, or the times a script
// read from the API.
type timeOrAgo struct {
	t   *time.Time
	now func() time.Time
}

func newTimeOrAgo(t *time.Time) *timeOrAgo { return &timeOrAgo{t: t, now: time.Now} }

func (v *timeOrAgo) Set(s string) error {
	t, err := parseTimeOrAgo(s, v.now(), durationAge)
	if err != nil {
		return err
	}
	*v.t = t
	return nil
}

func (v *timeOrAgo) String() string {
	if v == nil || v.t == nil || v.t.IsZero() {
		return ""
	}
	return v.t.Format(time.RFC3339Nano)
}

func (v *timeOrAgo) Type() string { return "TIME|DURATION" }
