package policy

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed cron expression: the five fields of crontab(5),
// minute, hour, day of month, month and day of week, read in UTC. It
// accepts numbers, *, ranges (1-5), steps (*/15, 0-30/10, 5/20: from 5
// to the end), lists (1,15,30), month and weekday names (jan, MON; 7 is
// Sunday as 0 is), and the shorthands @yearly (@annually), @monthly,
// @weekly, @daily (@midnight) and @hourly. As in Vixie cron, when both
// the day of month and the day of week are restricted (neither starts
// with *), a day matching either runs.
//
// It is written here rather than taken from a library because it is
// small, policy imports nothing it can avoid, and an expression that
// can never fire (February 30th) must be refused when the manifest is
// loaded, naming the field, which ParseCron does.
type Cron struct {
	minute, hour, dom, month, dow uint64 // bit i set: value i matches
	domStar, dowStar              bool
	src                           string
}

// String is the expression, its fields separated by single spaces.
func (c *Cron) String() string { return c.src }

// cronField is one field's range and names.
type cronField struct {
	name     string
	min, max int
	names    []string // names[i] stands for min+i
}

var cronFields = [5]cronField{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day of month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{name: "day of week", min: 0, max: 7, names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

var cronShorthands = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
	"@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// maxCronLen bounds an expression: no field needs more.
const maxCronLen = 256

// ParseCron parses a cron expression. Its errors name the field and the
// part of it that is wrong, and refuse an expression that never fires.
func ParseCron(s string) (*Cron, error) {
	if len(s) > maxCronLen {
		return nil, fmt.Errorf("%d bytes long; a cron expression is at most %d", len(s), maxCronLen)
	}
	fields := strings.Fields(s)
	if len(fields) > 0 && strings.HasPrefix(fields[0], "@") {
		exp, ok := cronShorthands[strings.ToLower(fields[0])]
		if !ok || len(fields) > 1 {
			return nil, fmt.Errorf("%q is not a shorthand; use @yearly, @monthly, @weekly, @daily or @hourly", fields[0])
		}
		c, err := ParseCron(exp)
		if err == nil {
			c.src = strings.ToLower(fields[0])
		}
		return c, err
	}
	if len(fields) != 5 {
		return nil, fmt.Errorf("%q has %d fields; write five: minute hour day-of-month month day-of-week, like \"0 7 * * *\" (every day at 07:00 UTC)", s, len(fields))
	}
	c := &Cron{src: strings.Join(fields, " ")}
	dst := [5]*uint64{&c.minute, &c.hour, &c.dom, &c.month, &c.dow}
	for i, f := range fields {
		set, err := cronFields[i].parse(f)
		if err != nil {
			return nil, fmt.Errorf("%s field %q: %w", cronFields[i].name, f, err)
		}
		*dst[i] = set
	}
	if c.dow&(1<<7) != 0 { // 7 is Sunday too
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar, c.dowStar = strings.HasPrefix(fields[2], "*"), strings.HasPrefix(fields[4], "*")
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("%q never fires (no such day in any year)", c.src)
	}
	return c, nil
}

// parse reads one field into a bit set.
func (f cronField) parse(s string) (uint64, error) {
	var set uint64
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			return 0, fmt.Errorf("an empty list item; separate values with single commas")
		}
		rng, stepText, hasStep := strings.Cut(part, "/")
		lo, hi := f.min, f.max
		if f.max == 7 {
			hi = 6 // * in day of week is 0-6
		}
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if lo, err = f.value(a); err != nil {
				return 0, err
			}
			if hi, err = f.value(b); err != nil {
				return 0, err
			}
			if lo > hi {
				return 0, fmt.Errorf("the range %s goes backwards; write it low-high", rng)
			}
		default:
			v, err := f.value(rng)
			if err != nil {
				return 0, err
			}
			lo = v
			if !hasStep {
				hi = v
			}
		}
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > f.max {
				return 0, fmt.Errorf("step %q must be a number from 1 to %d", stepText, f.max)
			}
			step = n
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

// value reads one number or name of the field.
func (f cronField) value(s string) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || len(s) > 2 || strings.HasPrefix(s, "+") {
		if f.names != nil {
			return 0, fmt.Errorf("%q is not a number from %d to %d nor a name (%s)", s, f.min, f.max, strings.Join(f.names, " "))
		}
		return 0, fmt.Errorf("%q is not a number from %d to %d", s, f.min, f.max)
	}
	if n < f.min || n > f.max {
		return 0, fmt.Errorf("%d is outside %d-%d", n, f.min, f.max)
	}
	return n, nil
}

// Next returns the first time the expression matches strictly after
// after (to the minute, in UTC), or the zero time when it matches none
// in the next ten years.
func (c *Cron) Next(after time.Time) time.Time {
	t := after.UTC().Truncate(time.Minute).Add(time.Minute)
	limit := t.Year() + 10
	for t.Year() <= limit {
		if c.month&(1<<int(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if !c.dayMatches(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if c.hour&(1<<t.Hour()) == 0 {
			t = t.Truncate(time.Hour).Add(time.Hour)
			continue
		}
		if c.minute&(1<<t.Minute()) == 0 {
			// Jump to the next matching minute of this hour, or the
			// next hour.
			rest := c.minute >> (t.Minute() + 1)
			if rest == 0 {
				t = t.Truncate(time.Hour).Add(time.Hour)
				continue
			}
			t = t.Add(time.Duration(bits.TrailingZeros64(rest)+1) * time.Minute)
			continue
		}
		return t
	}
	return time.Time{}
}

func (c *Cron) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}
