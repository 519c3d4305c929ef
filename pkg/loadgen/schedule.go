package loadgen

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Arrival is an open-loop arrival class. The seed's classes are steady
// (one request every 1/λ, the first at t = 0) and burst:N (N requests at
// once every N/λ, the first burst at t = 0, no jitter); the methodology
// adds poisson (exponential gaps of mean 1/λ) and gamma:K (Gamma gaps of
// shape K and mean 1/λ, as vLLM's generator draws them: K < 1 is burstier
// than Poisson, K = 1 is Poisson). The random classes draw from a PCG
// generator seeded with the workload seed, so one seed gives one schedule
// on every host and for every system compared. Every class puts its first
// request at t = 0.
type Arrival struct {
	// Kind is "steady", "burst", "poisson" or "gamma".
	Kind string
	// Burst is the burst size of "burst".
	Burst int
	// Shape is the shape of "gamma".
	Shape float64
}

// ParseArrival reads an arrival class: steady, burst:N, poisson, gamma:K.
func ParseArrival(s string) (Arrival, error) {
	kind, arg, hasArg := strings.Cut(s, ":")
	switch kind {
	case "steady", "poisson":
		if hasArg {
			return Arrival{}, fmt.Errorf("arrival %q: %s takes no argument", s, kind)
		}
		return Arrival{Kind: kind}, nil
	case "burst":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 {
			return Arrival{}, fmt.Errorf("arrival %q: want burst:N with N a positive integer", s)
		}
		return Arrival{Kind: kind, Burst: n}, nil
	case "gamma":
		k, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(k > 0) || math.IsInf(k, 0) {
			return Arrival{}, fmt.Errorf("arrival %q: want gamma:K with K a positive shape", s)
		}
		return Arrival{Kind: kind, Shape: k}, nil
	}
	return Arrival{}, fmt.Errorf("arrival %q: want steady, burst:N, poisson or gamma:K", s)
}

// String is the class as ParseArrival reads it.
func (a Arrival) String() string {
	switch a.Kind {
	case "burst":
		return "burst:" + strconv.Itoa(a.Burst)
	case "gamma":
		return "gamma:" + strconv.FormatFloat(a.Shape, 'g', -1, 64)
	}
	return a.Kind
}

// Planner yields the planned send offsets, from t = 0, of an open-loop
// schedule, one per request in order. It is pure: the same class, rate
// and seed give the same offsets.
type Planner struct {
	a    Arrival
	rate float64
	rng  *rand.Rand
	i    int64
	// t is the offset of the last random arrival, in seconds.
	t float64
}

// NewPlanner plans arrivals of class a at rate requests per second.
func NewPlanner(a Arrival, rate float64, seed uint64) (*Planner, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, errors.New("an open-loop schedule needs a finite positive rate")
	}
	return &Planner{a: a, rate: rate, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
}

// Next returns the planned offset of the next request.
func (p *Planner) Next() time.Duration {
	i := p.i
	p.i++
	switch p.a.Kind {
	case "steady":
		return seconds(float64(i) / p.rate)
	case "burst":
		b := int64(p.a.Burst)
		return seconds(float64(i/b*b) / p.rate)
	case "poisson":
		if i > 0 {
			p.t += p.rng.ExpFloat64() / p.rate
		}
		return seconds(p.t)
	case "gamma":
		if i > 0 {
			p.t += gamma(p.rng, p.a.Shape) / (p.a.Shape * p.rate)
		}
		return seconds(p.t)
	}
	panic("loadgen: planner of unknown arrival kind " + p.a.Kind)
}

// CountBefore is how many requests of class a at rate have a planned
// offset before d: what admission over d needs from the manifest.
func CountBefore(a Arrival, rate float64, seed uint64, d time.Duration) (int64, error) {
	p, err := NewPlanner(a, rate, seed)
	if err != nil {
		return 0, err
	}
	var n int64
	for p.Next() < d {
		n++
	}
	return n, nil
}

// gamma draws from Gamma(k, 1) (Marsaglia and Tsang; for k < 1 through
// Gamma(k+1) times U^(1/k)).
func gamma(r *rand.Rand, k float64) float64 {
	if k < 1 {
		u := r.Float64()
		for u == 0 {
			u = r.Float64()
		}
		return gamma(r, k+1) * math.Pow(u, 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// seconds converts seconds to a duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
