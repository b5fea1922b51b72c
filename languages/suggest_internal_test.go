package languages

import (
	"strings"
	"testing"
)

// TestSuggestBounded: a name from a request past 64 bytes gets no
// suggestion and costs nothing (a 1 MiB name would be 10^7 cells per alias).
func TestSuggestBounded(t *testing.T) {
	if got := suggest(strings.Repeat("p", 1<<20)); got != "" {
		t.Errorf("suggest(1 MiB) = %q, want none", got)
	}
}
