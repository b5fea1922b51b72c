package policy

import (
	"strings"
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestCronNext(t *testing.T) {
	tests := []struct {
		expr, after, want string
	}{
		{"0 7 * * *", "2026-03-01 06:59", "2026-03-01 07:00"},
		{"0 7 * * *", "2026-03-01 07:00", "2026-03-02 07:00"},
		{"* * * * *", "2026-03-01 07:00", "2026-03-01 07:01"},
		{"*/15 * * * *", "2026-03-01 07:01", "2026-03-01 07:15"},
		{"*/15 * * * *", "2026-03-01 07:45", "2026-03-01 08:00"},
		{"5/20 * * * *", "2026-03-01 07:26", "2026-03-01 07:45"},
		{"0-30/10 9-10 * * *", "2026-03-01 09:31", "2026-03-01 10:00"},
		{"1,15,30 * * * *", "2026-03-01 07:16", "2026-03-01 07:30"},
		{"59 23 31 12 *", "2026-06-01 00:00", "2026-12-31 23:59"},
		{"0 0 29 feb *", "2026-01-01 00:00", "2028-02-29 00:00"},
		{"0 12 * * mon-fri", "2026-03-06 12:00", "2026-03-09 12:00"}, // a Friday, then Monday
		{"0 12 * * 7", "2026-03-01 13:00", "2026-03-08 12:00"},       // 7 is Sunday
		{"0 12 * * SUN", "2026-03-01 13:00", "2026-03-08 12:00"},
		{"0 0 1 * 1", "2026-03-02 00:00", "2026-03-09 00:00"},    // day 1 or Monday (Vixie): Monday the 9th first
		{"0 0 */10 * 1", "2026-03-02 00:00", "2026-05-11 00:00"}, // */ starts with *: both must match
		{"@hourly", "2026-03-01 07:30", "2026-03-01 08:00"},
		{"@daily", "2026-03-01 07:30", "2026-03-02 00:00"},
		{"@weekly", "2026-03-01 07:30", "2026-03-08 00:00"},
		{"@monthly", "2026-03-01 07:30", "2026-04-01 00:00"},
		{"@YEARLY", "2026-03-01 07:30", "2027-01-01 00:00"},
		{"0 0 31 * *", "2026-04-01 00:00", "2026-05-31 00:00"}, // April has no 31st
	}
	for _, tt := range tests {
		c, err := ParseCron(tt.expr)
		if err != nil {
			t.Errorf("ParseCron(%q): %v", tt.expr, err)
			continue
		}
		if got := c.Next(at(tt.after)); !got.Equal(at(tt.want)) {
			t.Errorf("%q after %s = %s, want %s", tt.expr, tt.after, got.Format("2006-01-02 15:04 Mon"), tt.want)
		}
	}
}

func TestCronRefused(t *testing.T) {
	tests := []struct{ expr, want string }{
		{"", "0 fields"},
		{"0 7 * *", "4 fields"},
		{"0 7 * * * *", "6 fields"},
		{"60 * * * *", "minute field"},
		{"* 24 * * *", "hour field"},
		{"* * 0 * *", "day of month field"},
		{"* * * 13 *", "month field"},
		{"* * * * 8", "day of week field"},
		{"*/0 * * * *", "step"},
		{"*/99999999999999999999 * * * *", "step"},
		{"5-1 * * * *", "backwards"},
		{"1,,2 * * * *", "empty list item"},
		{"-1 * * * *", "minute field"},
		{"+5 * * * *", "minute field"},
		{"0 0 30 feb *", "never fires"},
		{"0 0 31 apr,jun *", "never fires"},
		{"@every 5m", "not a shorthand"},
		{"x * * * *", "not a number"},
		{"* * * foo *", "nor a name"},
		{"'; DROP TABLE tasks; -- * * * *", "fields"},
		{strings.Repeat("1,", 200) + "1 * * * *", "at most 256"},
	}
	for _, tt := range tests {
		_, err := ParseCron(tt.expr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseCron(%q) = %v, want an error saying %q", tt.expr, err, tt.want)
		}
	}
}

// Next agrees with a minute-by-minute walk over two years for a set of
// expressions, and every answer matches.
func TestCronNextAgreesWithWalk(t *testing.T) {
	exprs := []string{"*/7 */5 * * *", "0 0 1,15 * mon", "30 2 * 2 *", "0 9-17/4 * * 1-5", "13 13 13 * 5", "0 0 29 2 *"}
	for _, expr := range exprs {
		c, err := ParseCron(expr)
		if err != nil {
			t.Fatal(err)
		}
		start := at("2027-01-01 00:00")
		end := start.Add(2 * 366 * 24 * time.Hour)
		next := c.Next(start.Add(-time.Minute))
		for m := start; m.Before(end); m = m.Add(time.Minute) {
			if !c.matches(m) {
				continue
			}
			if !next.Equal(m) {
				t.Fatalf("%q: Next gave %s, the walk found %s", expr, next, m)
			}
			next = c.Next(m)
		}
	}
}

// matches is the definition Next must agree with.
func (c *Cron) matches(t time.Time) bool {
	return c.minute&(1<<t.Minute()) != 0 && c.hour&(1<<t.Hour()) != 0 && c.month&(1<<int(t.Month())) != 0 && c.dayMatches(t)
}

func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"0 7 * * *", "*/15 1-5 1,15 jan-mar mon-fri", "@daily", "0 0 30 2 *", "5/20 * * * 7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCron(s)
		if err != nil {
			return
		}
		from := time.Date(2026, 5, 17, 13, 37, 0, 0, time.UTC)
		n := c.Next(from)
		if n.IsZero() || !n.After(from) || !c.matches(n) {
			t.Fatalf("%q: Next(%s) = %s, which does not match or is not after", s, from, n)
		}
		if again, err := ParseCron(c.String()); err != nil || *again != *c {
			t.Fatalf("%q: its String %q parses to %v, %v", s, c.String(), again, err)
		}
	})
}
