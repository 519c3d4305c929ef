package protocols

import (
	"fmt"
	"math"
	"strconv"
)

// RateVar is the variable a capacity point's client reads its arrival
// rate from: kept as ${CAPACITY_RATE} in the plan, substituted when the point's
// attempt starts with the rate the search decided from recorded results.
const RateVar = "CAPACITY_RATE"

// Defaults of a capacity search (seed 000 section 13: "then repeat at
// 0.5λ*, 0.8λ*, 0.95λ* and in the overload region").
var (
	DefaultFollowUps = []float64{0.5, 0.8, 0.95}
	DefaultOverload  = 1.2
)

// CapacitySpec is a capacity phase's search in the plan's JSON form.
type CapacitySpec struct {
	RateMin    float64   `json:"rate_min"`
	RateMax    float64   `json:"rate_max"`
	Resolution float64   `json:"resolution"`
	FollowUps  []float64 `json:"follow_ups"`
	Overload   float64   `json:"overload"`
	SLO        SLO       `json:"slo"`
	// OnNonMonotonic is stop or continue (Capacity.OnNonMonotonic); ""
	// in a plan made before there was a choice reads as stop.
	OnNonMonotonic string `json:"on_non_monotonic,omitempty"`
	// BisectionPoints is how many points the bisection runs at most (the
	// first at rate_min, then one per halving of the interval), MaxPoints
	// that plus the follow-ups and the overload point: the worst case the
	// plan counts and reserves for, per cell.
	BisectionPoints int `json:"bisection_points"`
	MaxPoints       int `json:"max_points"`
}

// CapacityPoint says which point of a capacity search a run is.
type CapacityPoint struct {
	// Search names the search the point belongs to: its phase and cell.
	Search string `json:"search"`
	// Point is the 1-based place of the point in its search, in plan order.
	Point int `json:"point"`
	// Rate is the point's arrival rate (requests/s): 0 in the plan, set in
	// the run a launch starts, as the search decided it.
	Rate float64 `json:"rate,omitempty"`
	// Bisect is the 1-based bisection point; 0 for a follow-up.
	Bisect int `json:"bisect,omitempty"`
	// Fraction is a follow-up's multiple of the found rate (the overload
	// point's is above 1).
	Fraction float64 `json:"fraction,omitempty"`
}

// LaunchRate is the value of ${CAPACITY_RATE} for the point as it
// launches: its decided rate, or an error when none was decided (a plan's
// own run, never given one), so that no point runs at a rate of 0.
func (pt *CapacityPoint) LaunchRate() (string, error) {
	if !(pt.Rate > 0) || math.IsInf(pt.Rate, 0) {
		return "", fmt.Errorf("point %d of capacity search %s has no decided rate", pt.Point, pt.Search)
	}
	return strconv.FormatFloat(pt.Rate, 'g', -1, 64), nil
}

// Halvings is how many times the interval [lo, hi] is halved before it is
// no wider than res: ceil(log2((hi-lo)/res)), counted the way the search
// narrows it, so that the plan's bound and the search agree exactly.
func Halvings(lo, hi, res float64) int {
	n := 0
	for w := hi - lo; w > res && n < 64; w /= 2 {
		n++
	}
	return n
}

// capacitySpec is the plan's form of a validated search.
func capacitySpec(c *Capacity) *CapacitySpec {
	n := Halvings(c.RateMin, c.RateMax, c.Resolution) + 1
	return &CapacitySpec{
		RateMin: c.RateMin, RateMax: c.RateMax, Resolution: c.Resolution,
		FollowUps: c.FollowUps, Overload: c.Overload, SLO: c.SLO, OnNonMonotonic: c.OnNonMonotonic,
		BisectionPoints: n, MaxPoints: n + len(c.FollowUps) + 1,
	}
}

// capacityPoints are the search's points in run order, each with its run
// id suffix: b1..bN, then xNNN per follow-up (the percentage of the found
// rate, x050 for 0.5) and the overload point.
func capacityPoints(s *CapacitySpec, search string) ([]CapacityPoint, []string) {
	var pts []CapacityPoint
	var ids []string
	for i := 1; i <= s.BisectionPoints; i++ {
		pts = append(pts, CapacityPoint{Search: search, Point: len(pts) + 1, Bisect: i})
		ids = append(ids, "b"+strconv.Itoa(i))
	}
	for _, f := range append(append([]float64(nil), s.FollowUps...), s.Overload) {
		pts = append(pts, CapacityPoint{Search: search, Point: len(pts) + 1, Fraction: f})
		ids = append(ids, fmt.Sprintf("x%03d", int(math.Round(f*100))))
	}
	return pts, ids
}

// CapacitySearch returns the capacity spec of the phase named phase.
func (p *Plan) CapacitySearch(phase string) (*CapacitySpec, bool) {
	for _, ph := range p.Phases {
		if ph.Name == phase && ph.Capacity != nil {
			return ph.Capacity, true
		}
	}
	return nil, false
}
