package languages

import (
	"strings"
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"python", "python", 0},
		{"pyton", "python", 1},
		{"pyhton", "python", 1}, // a transposition
		{"rnu", "run", 1},
		{"javscript", "javascript", 1},
		{"c", "go", 2},
		{"", "rust", 4},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.b, tc.a, got, tc.want)
		}
	}
}

// TestSuggestBounded: a name from a request past 64 bytes gets no
// suggestion and costs nothing (a 1 MiB name would be 10^7 cells per alias).
func TestSuggestBounded(t *testing.T) {
	if got := suggest(strings.Repeat("p", 1<<20)); got != "" {
		t.Errorf("suggest(1 MiB) = %q, want none", got)
	}
}
