package views

import (
	"fmt"
	"slices"
	"strings"
	"warden/internal/levenshtein"
)

// UnknownRun is the message for a run id the campaign does not have: the
// closest ids it has (Closest), when any is close.
func UnknownRun(id string, ids []string) string {
	msg := fmt.Sprintf("no run %q in this campaign", id)
	if near := Closest(id, ids, 3); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, ", ") + "?"
	} else if len(ids) > 0 {
		msg += " (ctlq runs lists its runs)"
	}
	return msg
}

// Closest returns at most n of ids that id is likely a slip of, closest
// first: those within an edit distance of a third of id's length (at
// least 2), then those that hold id as a part (a prefix typed alone, say),
// shortest first; of them only those no more than one edit farther than
// the closest. Ties keep ids' order.
func Closest(id string, ids []string, n int) []string {
	type cand struct {
		id   string
		dist int
		at   int
	}
	limit := max(2, len(id)/3)
	var cs []cand
	for i, c := range ids {
		switch d := levenshtein.Distance(id, c); {
		case d <= limit:
			cs = append(cs, cand{c, d, i})
		case id != "" && strings.Contains(c, id):
			cs = append(cs, cand{c, limit + 1 + len(c) - len(id), i})
		}
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return a.dist - b.dist })
	var out []string
	for _, c := range cs[:min(n, len(cs))] {
		if c.dist > cs[0].dist+1 {
			break
		}
		out = append(out, c.id)
	}
	return out
}
