package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
)

func TestParseByteSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want policy.ByteSize
		err  string
	}{
		{"0", 0, ""},
		{"65536", 65536, ""},
		{"64KiB", 64 << 10, ""},
		{"64 MiB", 64 << 20, ""},
		{"2GiB", 2 << 30, ""},
		{"1TiB", 1 << 40, ""},
		{"10B", 10, ""},
		{"1KB", 1000, ""},
		{"1kB", 1000, ""},
		{"5MB", 5e6, ""},
		{"1GB", 1e9, ""},
		{"64mb", 0, `unknown unit "mb"`},
		{"1.5GiB", 0, "1536MiB"},
		{"-1", 0, "not a size"},
		{"MiB", 0, "not a size"},
		{"", 0, "not a size"},
		{"99999999999TiB", 0, "too large"},
	} {
		got, err := policy.ParseByteSize(tt.in)
		if tt.err == "" && (err != nil || got != tt.want) || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	for _, tt := range []struct {
		in   policy.ByteSize
		want string
	}{
		{0, "0 B"}, {1, "1 B"}, {1500, "1500 B"}, {1000, "1 KB"}, {1024, "1 KiB"},
		{64 << 20, "64 MiB"}, {1e12, "1 TB"}, {3 << 30, "3 GiB"}, {1536 << 20, "1536 MiB"},
	} {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("%d.String() = %q, want %q", uint64(tt.in), got, tt.want)
		}
		if back, err := policy.ParseByteSize(tt.want); err != nil || back != tt.in {
			t.Errorf("ParseByteSize(%q) = %d, %v", tt.want, back, err)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"5s", 5 * time.Second, ""},
		{"500ms", 500 * time.Millisecond, ""},
		{"1m30s", 90 * time.Second, ""},
		{"5 seconds", 0, `"5 seconds" is not a duration; write it like 5s or 500ms`},
		{"30", 0, "has no unit; write it like 30s"},
		{"-5s", 0, "negative"},
	} {
		got, err := policy.ParseDuration(tt.in)
		if tt.err == "" && (err != nil || got.Std() != tt.want) || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
	for d, want := range map[time.Duration]string{5 * time.Minute: "5m", time.Hour: "1h", 90 * time.Second: "1m30s", 2*time.Hour + time.Second: "2h0m1s"} {
		if got := policy.Duration(d).String(); got != want {
			t.Errorf("Duration(%v).String() = %q, want %q", d, got, want)
		}
	}
}
