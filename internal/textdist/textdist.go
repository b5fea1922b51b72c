// Package textdist measures how far apart two names are, for the "did you
// mean" of every error that names a field, a command or a language. It is
// one copy of the measure; each caller keeps its own idea of "near
// enough", because a config key, a language alias and a command differ in
// length and in what a typo looks like.
package textdist

// Distance is the optimal string alignment distance of a and b, in bytes:
// an insertion, a deletion, a substitution or a transposition of adjacent
// bytes each costs 1, so "timoeut" is one edit from "timeout" and "rnu"
// one from "run". It costs O(len(a)·len(b)) time and O(len(b)) memory:
// callers bound what a request can make them compare.
func Distance(a, b string) int {
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
