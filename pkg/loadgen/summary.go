package loadgen

import (
	"math"
	"sort"
)

// Dist summarizes a sample in milliseconds. Quantiles are nearest-rank
// (the smallest value with at least q of the sample at or below it). An
// empty sample has N = 0 and zeros.
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// distNS summarizes nanosecond values in milliseconds; it sorts v.
func distNS(v []int64) Dist {
	if len(v) == 0 {
		return Dist{}
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	var sum float64
	for _, x := range v {
		sum += float64(x)
	}
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		if i < 0 {
			i = 0
		}
		return ms(v[i])
	}
	return Dist{N: len(v), Mean: sum / float64(len(v)) / 1e6, P50: q(0.50), P90: q(0.90), P95: q(0.95), P99: q(0.99), Max: ms(v[len(v)-1])}
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// logHist is a histogram of positive nanosecond values in buckets 1%
// wide, for inter-token gaps, which are too many to keep one by one.
// Quantiles it gives are within 1% of the exact ones.
type logHist struct {
	counts []int64
	n      int64
	sum    float64
	max    int64
}

const histGrowth = 1.01

func newLogHist() *logHist { return &logHist{counts: make([]int64, 2600)} }

func (h *logHist) add(ns int64) {
	if ns < 1 {
		ns = 1
	}
	i := int(math.Log(float64(ns)) / math.Log(histGrowth))
	if i >= len(h.counts) {
		i = len(h.counts) - 1
	}
	h.counts[i]++
	h.n++
	h.sum += float64(ns)
	if ns > h.max {
		h.max = ns
	}
}

// dist summarizes the histogram; a quantile is its bucket's upper bound,
// capped at the largest value seen.
func (h *logHist) dist() Dist {
	if h.n == 0 {
		return Dist{}
	}
	q := func(p float64) float64 {
		rank := int64(math.Ceil(p * float64(h.n)))
		if rank < 1 {
			rank = 1
		}
		var c int64
		for i, k := range h.counts {
			c += k
			if c >= rank {
				v := math.Pow(histGrowth, float64(i+1))
				return math.Min(v, float64(h.max)) / 1e6
			}
		}
		return ms(h.max)
	}
	return Dist{N: int(h.n), Mean: h.sum / float64(h.n) / 1e6, P50: q(0.50), P90: q(0.90), P95: q(0.95), P99: q(0.99), Max: ms(h.max)}
}
