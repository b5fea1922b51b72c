package policy_test

import (
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

// TestCompareVersions: the order the server's signed-rollback refusal
// relies on, as the hand-written comparator had it: numeric parts by
// value, a release after its prereleases, prerelease identifiers numeric
// before alphanumeric, leading zeros ignored; what is not a moat version
// (a build suffix, a v, an empty identifier, hostile junk) sorts first.
func TestCompareVersions(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"1.0.0", "1.0.0", 0},
		{"1.0.0", "1.0.1", -1},
		{"1.10.0", "1.9.0", 1}, // by value, not as text
		{"2.0.0", "10.0.0", -1},
		{"01.02.003", "1.2.3", 0}, // moat accepts leading zeros; semver does not
		{"1.0.0-rc.1", "1.0.0", -1},
		{"1.0.0-rc.1", "0.9.9", 1},
		{"1.0.0-alpha", "1.0.0-alpha.1", -1},
		{"1.0.0-alpha.1", "1.0.0-alpha.beta", -1},
		{"1.0.0-beta.2", "1.0.0-beta.11", -1},
		{"1.0.0-1", "1.0.0-a", -1}, // numeric identifiers first
		{"1.0.0-007", "1.0.0-7", 0},
		{"1.0.0-rc--1", "1.0.0-rc-1", -1},
		{"99999999999999999999999.0.0", "1.0.0", 1}, // past int64
		{"1.0.0+build.5", "0.0.1", -1},              // build metadata is not moat's syntax
		{"1.0.0+a", "1.0.0+b", -1},                  // two invalid: as strings
		{"v1.0.0", "0.0.1", -1},
		{"1.0.0-a..b", "0.0.1", -1}, // an empty identifier
		{"1.0.0-", "0.0.1", -1},
		{"", "0.0.0", -1},
		{"1.0", "0.0.1", -1},
		{"1.0.0 ", "0.0.1", -1},
		{"1.0.0\n", "1.0.0", -1},
		{"-1.0.0", "0.0.1", -1},
		{"1.0.0-é", "0.0.1", -1},
		{strings.Repeat("9", 4096) + ".0.0", "1.0.0", 1},
	} {
		if got := policy.CompareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := policy.CompareVersions(tt.b, tt.a); got != -tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
	// semver.org's own chain, each before the next.
	chain := []string{"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "2.0.0"}
	for i := range chain {
		for j := range chain {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := policy.CompareVersions(chain[i], chain[j]); got != want {
				t.Errorf("CompareVersions(%q, %q) = %d, want %d", chain[i], chain[j], got, want)
			}
		}
	}
}
