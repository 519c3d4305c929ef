package contract

import (
	"fmt"
	"math"
)

// The power check's measurements on a run that judges no sample itself
// (a burn-in): how often the literal representativeness and recovery
// rules would fail this run's own steady data, so that a campaign can be
// told, before its matrix, whether it can be expected to complete under
// its gates (docs/protocol.md, power_check). The reference is the run's
// last clean segment, or, without one, the last --reference-tail-s of its
// warm-up (a burn-in's). The figures are those layer2 and recovery report
// on their own runs (smd.self.*, recovery.self.*, power.*).

// PowerOptions are the knobs of the power measurement.
type PowerOptions struct {
	Layer1Dir string // holds the run's one Layer-1 stream
	// BlockSteps is a profile window's active steps (seed: 8); Windows a
	// run's windows (seed: 2), also its recoveries.
	BlockSteps, Windows int
	// ReferenceTailS: without a clean segment, the last this many seconds
	// of the warm-up are the reference.
	ReferenceTailS float64
	MaxSMD         float64 // seed: 0.25
	// WindowS and StepS are the recovery rule's rolling window and sample
	// spacing; Tolerance its band (seed: 10 s, 1 s, 0.10).
	WindowS, StepS, Tolerance float64
}

// DefaultPower is the seed's figures.
func DefaultPower() PowerOptions {
	return PowerOptions{BlockSteps: 8, Windows: 2, ReferenceTailS: 30, MaxSMD: 0.25, WindowS: 10, StepS: 1, Tolerance: 0.10}
}

// PowerDir measures the run of the client's result directory dir.
//
// Verdict: pass when both rules could be measured; error when either
// could not (no reference segment, no Layer-1 stream, too few steps or
// samples): a measurement that cannot be made is never a pass. Figures:
// reference_s, reference_steps, those of layer2's and recovery's own
// false-failure rate, and power.representativeness.* and power.recovery.*.
func PowerDir(dir string, o PowerOptions) Result {
	f := newFindings()
	res, ok := readSeedResult(f, dir)
	if !ok {
		return f.result("")
	}
	ref, ok := powerReference(f, res, o)
	if !ok {
		return f.result("")
	}
	f.fig("reference_s", float64(ref.EndMonoNS-ref.StartMonoNS)/1e9)
	if o.Layer1Dir == "" {
		f.errorf("the measurements need the run's Layer-1 stream (--layer1-dir)")
		return f.result("")
	}
	stream, sr := Layer1Stream(o.Layer1Dir)
	if stream == "" {
		f.errorf("%s", sr.Detail)
		return f.result("")
	}
	steps, err := ReadL1File(stream)
	if err != nil {
		f.errorf("%v", err)
		return f.result("")
	}
	var inRef []L1Step
	for _, s := range steps {
		if t := *s.SubmitMonoNS; t >= ref.StartMonoNS && t < ref.EndMonoNS && (s.ModelExecuted == nil || *s.ModelExecuted) {
			inRef = append(inRef, s)
		}
	}
	f.fig("reference_steps", float64(len(inRef)))
	sc := recordSelfCheck(f, "the reference", inRef, o.BlockSteps, o.Windows, o.MaxSMD, RepresentativenessOptions{Rule: RuleLiteral})
	if sc.self.Blocks == 0 {
		f.errorf("representativeness cannot be measured: %s", sc.problem)
	}
	reqs, err := readRequests(dir, res.Files.Requests)
	if err != nil {
		f.errorf("client records: %v", err)
		return f.result("")
	}
	recs, err := ReadLayer1Records(stream)
	if err != nil {
		f.errorf("Layer-1 records: %v", err)
		return f.result("")
	}
	window := int64(math.Round(o.WindowS * 1e9))
	if ref.EndMonoNS-ref.StartMonoNS < window {
		f.errorf("recovery cannot be measured: the %.3f s reference is shorter than the %g s window", float64(ref.EndMonoNS-ref.StartMonoNS)/1e9, o.WindowS)
		return f.result("")
	}
	roll := newRolling(reqs, recs, window)
	step := int64(math.Round(o.StepS * 1e9))
	medRate, medWait, ok := referenceMedians(f, roll, ref, step, "the reference")
	if !ok {
		return f.result("")
	}
	ro := DefaultRecovery()
	ro.Tolerance = o.Tolerance
	recoverySelf(f, roll, []seedSegment{ref}, o.Windows, step, medRate, medWait, ro)
	if f.figs["recovery.self.samples"] == 0 {
		f.errorf("recovery cannot be measured: no sample of both series in the reference")
	}
	return f.result(fmt.Sprintf("measured on %s (%.1f s, %d steps): a representative window passes the literal representativeness rule %.1f%% of the time, a recovery the literal recovery rule %.1f%%",
		ref.Name, f.figs["reference_s"], len(inRef), 100*f.figs["power.representativeness.unit_pass_fraction"], 100*f.figs["power.recovery.unit_pass_fraction"]))
}

// powerReference is the run's last clean segment, else the tail of its
// warm-up.
func powerReference(f *findings, res seedResult, o PowerOptions) (seedSegment, bool) {
	var warm *seedSegment
	var clean *seedSegment
	for i, s := range res.Segments {
		switch s.Kind {
		case "clean":
			clean = &res.Segments[i]
		case "warmup":
			warm = &res.Segments[i]
		}
	}
	switch {
	case clean != nil:
		return *clean, true
	case warm != nil && o.ReferenceTailS > 0:
		ref := *warm
		ref.Name = fmt.Sprintf("the last %g s of %s", o.ReferenceTailS, warm.Name)
		if start := ref.EndMonoNS - int64(math.Round(o.ReferenceTailS*1e9)); start > ref.StartMonoNS {
			ref.StartMonoNS = start
		} else {
			f.notef("the warm-up (%.3f s) is shorter than --reference-tail-s %g: the whole warm-up is the reference", warm.Seconds, o.ReferenceTailS)
			ref.Name = warm.Name
		}
		return ref, true
	}
	f.errorf("result.json has no clean segment and no warm-up to measure on")
	return seedSegment{}, false
}
