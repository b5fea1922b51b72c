package textdist_test

import (
	"fmt"
	"testing"

	"github.com/moat-sandbox/moat/internal/textdist"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "run", 3},
		{"run", "", 3},
		{"run", "run", 0},
		{"rnu", "run", 1},         // a transposition
		{"timoeut", "timeout", 1}, // a transposition inside
		{"pyton", "python", 1},    // an insertion
		{"pythonn", "python", 1},  // a deletion
		{"rsut", "rust", 1},
		{"pyhton", "python", 1},
		{"javscript", "javascript", 1},
		{"c", "go", 2},
		{"kitten", "sitting", 3},
		{"ca", "abc", 3}, // optimal string alignment, not full Damerau: no edit twice
	} {
		if got := textdist.Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := textdist.Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func ExampleDistance() {
	fmt.Println(textdist.Distance("pyton", "python"), textdist.Distance("rnu", "run"))
	// Output: 1 1
}
