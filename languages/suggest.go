package languages

import (
	"strings"

	"github.com/moat-sandbox/moat/internal/textdist"
)

// suggest returns the registered name or alias closest to name, as its
// language's name, when it is near enough to be a typo ("pyton", "javscript",
// "rsut"): at most two edits, and fewer than half of name's letters. It
// returns "" otherwise. name comes from a request: past 64 bytes nothing
// is near enough, which also bounds the work.
func suggest(name string) string {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" || len(name) > 64 {
		return ""
	}
	best, bestDist := "", 3
	for alias, canon := range aliases {
		d := textdist.Distance(name, alias)
		if d < bestDist || d == bestDist && best != "" && canon < best {
			best, bestDist = canon, d
		}
	}
	if best == "" || 2*bestDist >= len(name) {
		return ""
	}
	return best
}
