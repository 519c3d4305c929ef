package protocols

import (
	"fmt"
	"math"
)

// MaxRuns bounds the runs one protocol may plan. A protocol of a few lines
// can ask for far more (repeats: 1000000000, or ten axes of ten values):
// expanding it would exhaust the machine's memory before any check could
// say so. The seed's matrix is 52 runs; a campaign of this many would run
// for years.
const MaxRuns = 100_000

// checkRunCount counts, without building them, the runs the matrix phases
// would plan: per phase, the cells the axes and includes can give (before
// excludes, so it is an upper bound) times repeats times loads. It reports
// the phase that passes MaxRuns, or the first that makes the total pass
// it, at the field that multiplies most, and returns false: expand must
// not run then. Co-location phases list their runs one by one in the
// file, so its size bounds them.
func (b *builder) checkRunCount() bool {
	total := 0
	for i := range b.p.Phases {
		ph := &b.p.Phases[i]
		if ph.Kind == "colocation" || ph.Matrix == nil || len(ph.Loads) == 0 {
			continue
		}
		cells := matrixBound(ph.Matrix)
		n := mulCap(mulCap(cells, max(ph.Repeats, 1)), len(ph.Loads))
		total = addCap(total, n)
		if total <= MaxRuns {
			continue
		}
		f := fmt.Sprintf("phases[%d]", i)
		pos, field := ph.Meta.At("repeats"), f+".repeats"
		if ph.Repeats <= cells {
			pos, field = ph.Matrix.Pos, f+".matrix"
		}
		sofar := ""
		if total != n {
			sofar = fmt.Sprintf(", %s with the phases before it", countText(total))
		}
		b.c.add(pos, field, "phase %q plans %s runs (%s cells x %d repeats x %d loads)%s; a protocol may plan at most %d runs",
			ph.Name, countText(n), countText(cells), max(ph.Repeats, 1), len(ph.Loads), sofar, MaxRuns)
		return false
	}
	return true
}

// matrixBound is the number of cells a matrix can give before excludes:
// the product of its axes' selections plus each include's product,
// saturating at math.MaxInt.
func matrixBound(m *Matrix) int {
	product := func(sel map[string]Selection) int {
		n := 1
		for _, s := range sel {
			n = mulCap(n, len(s.Values))
		}
		return n
	}
	n := product(m.Axes)
	for _, inc := range m.Include {
		n = addCap(n, product(inc))
	}
	return n
}

func mulCap(a, b int) int {
	if a < 0 || b < 0 {
		return 0
	}
	if a != 0 && b > math.MaxInt/a {
		return math.MaxInt
	}
	return a * b
}

func addCap(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// countText prints a saturated count as "more than" the largest int.
func countText(n int) string {
	if n == math.MaxInt {
		return fmt.Sprintf("more than %d", math.MaxInt-1)
	}
	return fmt.Sprint(n)
}
