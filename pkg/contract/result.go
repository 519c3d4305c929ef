package contract

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"warden/pkg/gates"
)

// Result is one validator's verdict, in the shape pkg/gates reads from a
// validator's last line of output (gates.ValidatorResult):
//
//	{"verdict": "pass"|"fail"|"error", "detail": "...", "figures": {...}, "class": "..."}
type Result struct {
	Verdict string             `json:"verdict"`
	Detail  string             `json:"detail,omitempty"`
	Figures map[string]float64 `json:"figures"`
	// Class is gates.ClassProfileArtifact on a failed Layer-2 check: the
	// outcome policy then allows the seed's one exact rerun.
	Class string `json:"class,omitempty"`
}

// Gate converts r to the gate verdict the runner would record.
func (r Result) Gate(name string, at time.Time) gates.Verdict {
	figs := make(map[string]float64, len(r.Figures))
	for k, v := range r.Figures {
		figs[k] = v
	}
	return gates.Verdict{Gate: "validator:" + name, Verdict: r.Verdict, Detail: r.Detail, Figures: figs, At: at, Class: r.Class}
}

// Passed reports whether r is a pass.
func (r Result) Passed() bool { return r.Verdict == gates.Pass }

// WriteVerdict writes r as a validator prints it: unless jsonOnly, a
// summary for a person (name, verdict, class and detail, then the figures
// by name); then, as the last line, r as one JSON object, its figures
// never null.
func WriteVerdict(w io.Writer, name string, jsonOnly bool, r Result) error {
	if r.Figures == nil {
		r.Figures = map[string]float64{}
	}
	r = finiteFigures(r)
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if !jsonOnly {
		var figs []string
		for _, k := range slices.Sorted(maps.Keys(r.Figures)) {
			figs = append(figs, k+"="+strconv.FormatFloat(r.Figures[k], 'g', 6, 64))
		}
		class := ""
		if r.Class != "" {
			class = " [" + r.Class + "]"
		}
		fmt.Fprintf(w, "%s: %s%s: %s\n  %s\n", name, r.Verdict, class, r.Detail, strings.Join(figs, " "))
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}

// finiteFigures is r without the figures JSON cannot hold (NaN, ±Inf):
// each is named in the detail, and a verdict that would pass with one
// errs instead (fail closed: a figure that is not a number never passes).
func finiteFigures(r Result) Result {
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(r.Figures)) {
		if v := r.Figures[k]; math.IsNaN(v) || math.IsInf(v, 0) {
			bad = append(bad, fmt.Sprintf("%s is %g", k, v))
		}
	}
	if len(bad) == 0 {
		return r
	}
	figs := maps.Clone(r.Figures)
	for _, k := range slices.Sorted(maps.Keys(figs)) {
		if v := figs[k]; math.IsNaN(v) || math.IsInf(v, 0) {
			delete(figs, k)
		}
	}
	r.Figures = figs
	if r.Verdict == gates.Pass {
		r.Verdict = gates.Error
	}
	r.Detail += "; figures that are not finite numbers, left out: " + strings.Join(bad, ", ")
	return r
}

// findings collects the problems of one check: failures (the artifact
// breaks its contract) and errors (the check could not tell).
type findings struct {
	errs  []string
	fails []string
	notes []string
	figs  map[string]float64
}

func newFindings() *findings { return &findings{figs: map[string]float64{}} }

func (f *findings) errorf(format string, a ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, a...))
}
func (f *findings) failf(format string, a ...any) {
	f.fails = append(f.fails, fmt.Sprintf(format, a...))
}
func (f *findings) notef(format string, a ...any) {
	f.notes = append(f.notes, fmt.Sprintf(format, a...))
}
func (f *findings) fig(name string, v float64) { f.figs[name] = v }

// result is the verdict of the findings: fail when any failure (the
// artifact breaks its contract, whatever else could not be told), error
// when the check could not tell, else pass; the detail lists failures,
// then errors, then notes.
func (f *findings) result(passDetail string) Result {
	r := Result{Verdict: gates.Pass, Figures: f.figs}
	var parts []string
	switch {
	case len(f.fails) > 0:
		r.Verdict = gates.Fail
		parts = append(append(parts, f.fails...), f.errs...)
	case len(f.errs) > 0:
		r.Verdict = gates.Error
		parts = append(parts, f.errs...)
	default:
		parts = append(parts, passDetail)
	}
	r.Detail = strings.Join(append(parts, f.notes...), "; ")
	return r
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
