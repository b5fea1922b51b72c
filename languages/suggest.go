package languages

import "strings"

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
		d := editDistance(name, alias)
		if d < bestDist || d == bestDist && best != "" && canon < best {
			best, bestDist = canon, d
		}
	}
	if best == "" || 2*bestDist >= len(name) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes, with a
// transposition of neighbours counting one edit ("rnu" is one from "run").
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
