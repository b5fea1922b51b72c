package main

import (
	"strings"
	"testing"
	"time"
)

// TestTimeOrAgo: the one reader of a point in time (parseTimeOrAgo), as
// --since/--until (an age is a Go duration) and --before of `moat audit
// prune` (an age as audit.retention writes it, never the future or now)
// read it: what each accepts, and each refusal's message.
func TestTimeOrAgo(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	at := "2026-01-02T15:04:05Z"
	atTime, _ := time.Parse(time.RFC3339, at)
	future := "2027-01-02T15:04:05Z"
	futureTime, _ := time.Parse(time.RFC3339, future)
	since := func(s string) (time.Time, error) {
		var got time.Time
		v := &timeOrAgo{t: &got, now: func() time.Time { return now }}
		err := v.Set(s)
		return got, err
	}
	before := func(s string) (time.Time, error) { return parseBefore(s, now) }
	tests := []struct {
		flag    string
		parse   func(string) (time.Time, error)
		in      string
		want    time.Time
		wantErr string
	}{
		{"--since", since, "1h", now.Add(-time.Hour), ""},
		{"--since", since, "90m", now.Add(-90 * time.Minute), ""},
		{"--since", since, at, atTime, ""},
		{"--since", since, future, futureTime, ""}, // --until may name the future
		{"--since", since, "-1h", time.Time{}, "give a positive duration back from now"},
		{"--since", since, "90d", time.Time{}, "is neither a duration back from now (1h, 90m) nor an RFC 3339 time"},
		{"--since", since, "yesterday", time.Time{}, "is neither a duration back from now"},
		{"--before", before, "90d", now.Add(-90 * 24 * time.Hour), ""},
		{"--before", before, "720h", now.Add(-720 * time.Hour), ""},
		{"--before", before, at, atTime, ""},
		{"--before", before, future, time.Time{}, "is in the future: that would remove every event"},
		{"--before", before, "", time.Time{}, "give the cutoff"},
		{"--before", before, "0", time.Time{}, "would remove every event; give an age like 90d"},
		{"--before", before, "10m", time.Time{}, "is shorter than"},
		{"--before", before, "yesterday", time.Time{}, "; or give an RFC 3339 time"},
	}
	for _, tt := range tests {
		got, err := tt.parse(tt.in)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s %q: %v, want an error saying %q", tt.flag, tt.in, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || !got.Equal(tt.want)):
			t.Errorf("%s %q: %v, %v; want %v", tt.flag, tt.in, got, err, tt.want)
		}
	}
}
