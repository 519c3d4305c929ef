// Package levenshtein is the edit distance of two strings, for the
// did-you-mean of a mistyped name (a run id, a provenance path).
package levenshtein

// Distance is the Levenshtein distance of a and b, by bytes: the fewest
// insertions, deletions and substitutions that turn a into b.
func Distance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
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
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
