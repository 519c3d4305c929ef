package contract

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/gpu/sample"
	"warden/pkg/phasefile"
)

// The clock and load check (seed 002, A-P3-2: "A run reaches complete
// only after client, Layer-1, Layer-2, sanity, command, clock/load, and
// zero-GPU-memory cleanup checks have all succeeded"; A-P3-1: "Every run
// records host load average and a full GPU clock snapshot before and
// after its measured interval"). It judges what the controller recorded
// in the attempt directory: the GPU samples (gpu-samples.jsonl, every
// sample_interval_s while the server ran, each with NVML's clock-event
// reasons) over the measured interval, and the host's load average in the
// records before the run and after its measured interval (preflight.json,
// postmeasure.json). A GPU whose clocks a thermal, power-brake or hardware
// slowdown held down, or a loaded host, measured the host, not the
// server: the failure carries class infrastructure (the seed's one exact
// rerun for an infrastructure failure).

// gpuSamplesFile is the attempt's GPU samples (dirlayout.GPUSamplesFile:
// dirlayout opens the store, which a validator does not import).
const gpuSamplesFile = "gpu-samples.jsonl"

// ClockLoadRules are the rules' names, as the failures start.
var ClockLoadRules = []string{"clock_reasons", "host_load"}

// DefaultForbiddenReasons are the clock-event reasons that fail a run:
// thermal, power-brake and hardware slowdowns. The software power cap
// (sw_power_cap) is not among them: a GPU at its power limit under load
// is the normal state of a saturated H100/H200.
var DefaultForbiddenReasons = []string{"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}

// ClockLoadOptions are the knobs of the check.
type ClockLoadOptions struct {
	AttemptDir string // gpu-samples.jsonl, preflight.json, postmeasure.json
	Phases     string // the client's phase file: the measured interval
	// ForbiddenReasons are clock-event reason names (gpu.ReasonNames)
	// that fail the run when any sample of the interval reports one.
	ForbiddenReasons []string
	// MaxLoad1 bounds the host's 1-minute load average in both records.
	MaxLoad1 float64
}

// DefaultClockLoad: the forbidden reasons above and a load bound of the
// host's CPU count (more runnable tasks than CPUs).
func DefaultClockLoad() ClockLoadOptions {
	return ClockLoadOptions{ForbiddenReasons: slices.Clone(DefaultForbiddenReasons), MaxLoad1: float64(runtime.NumCPU())}
}

// reasonBits maps a reason name to its bit.
func reasonBits(names []string) (uint64, error) {
	var mask uint64
	for _, n := range names {
		found := false
		for b := range 64 {
			if got := gpu.ReasonNames(1 << b); len(got) == 1 && got[0] == n {
				mask |= 1 << b
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown clock-event reason %q (NVML's: %s)", n, strings.Join(gpu.ReasonNames(^uint64(0)>>53), ", "))
		}
	}
	return mask, nil
}

// measuredInterval is [first clean line, drain line) of the phase file;
// a run without clean segments (a burn-in) is measured from its first
// line. Without a drain line the interval ends at the done line.
func measuredInterval(path string) (lo, hi int64, err error) {
	lines, err := readPhaseLines(path)
	if err != nil {
		return 0, 0, err
	}
	if len(lines) == 0 {
		return 0, 0, fmt.Errorf("the phase file %s has no line: the measured interval cannot be told", path)
	}
	lo = lines[0].MonoNS
	if i := slices.IndexFunc(lines, func(l phasefile.Line) bool { return l.Phase == phasefile.Clean }); i >= 0 {
		lo = lines[i].MonoNS
	}
	for _, end := range []string{phasefile.Drain, phasefile.Done} {
		if i := slices.IndexFunc(lines, func(l phasefile.Line) bool { return l.Phase == end }); i >= 0 {
			return lo, lines[i].MonoNS, nil
		}
	}
	return 0, 0, fmt.Errorf("the phase file %s has no drain or done line: the measured interval has no end", path)
}

// ClockLoad applies the check. Figures: interval_s, samples,
// samples_unread (reads that failed in the interval), throttled_samples,
// throttled_gpus, max_load1, preflight_load1, postmeasure_load1,
// load1_bound. A failure carries class infrastructure; what cannot be
// told (no phase file, no sample in the interval, a sample without clock
// reasons, a missing host record) is an error.
func ClockLoad(o ClockLoadOptions) Result {
	f := newFindings()
	forbid, err := reasonBits(o.ForbiddenReasons)
	if err != nil {
		f.errorf("%v", err)
		return f.result("")
	}
	checkClockReasons(f, o, forbid)
	checkHostLoad(f, o)
	r := f.result(fmt.Sprintf("no %s during the measured interval; host load within %g", strings.Join(o.ForbiddenReasons, ", "), o.MaxLoad1))
	if r.Verdict == gates.Fail {
		r.Class = gates.ClassInfrastructure
	}
	return r
}

// checkClockReasons: no sample of the measured interval reports a
// forbidden clock-event reason on any GPU.
func checkClockReasons(f *findings, o ClockLoadOptions, forbid uint64) {
	lo, hi, err := measuredInterval(o.Phases)
	if err != nil {
		f.errorf("clock_reasons: %v", err)
		return
	}
	f.fig("interval_s", float64(hi-lo)/1e9)
	recs, err := sample.ReadFile(filepath.Join(o.AttemptDir, gpuSamplesFile))
	if err != nil {
		f.errorf("clock_reasons: %v", err)
		return
	}
	n, unread, throttled, noReasons := 0, 0, 0, 0
	gpus := map[int]bool{}
	first := ""
	for _, rec := range recs {
		if rec.Kind == sample.KindEnergy || rec.MonoNS < lo || rec.MonoNS >= hi {
			continue
		}
		if rec.Error != "" {
			unread++
			continue
		}
		n++
		hit := false
		for _, g := range rec.GPUs {
			if g.ClockEventReasons == nil {
				noReasons++
				continue
			}
			if bad := *g.ClockEventReasons & forbid; bad != 0 {
				hit = true
				if !gpus[g.Index] && first == "" {
					first = fmt.Sprintf("GPU %d at %.1f s into the interval: %s", g.Index, float64(rec.MonoNS-lo)/1e9, strings.Join(gpu.ReasonNames(bad), ", "))
				}
				gpus[g.Index] = true
			}
		}
		if hit {
			throttled++
		}
	}
	f.fig("samples", float64(n))
	f.fig("samples_unread", float64(unread))
	f.fig("throttled_samples", float64(throttled))
	f.fig("throttled_gpus", float64(len(gpus)))
	if throttled > 0 {
		f.failf("clock_reasons: %d of %d sample(s) of the measured interval report a forbidden clock-event reason on %d GPU(s) (first: %s)", throttled, n, len(gpus), first)
	}
	switch {
	case n == 0:
		f.errorf("clock_reasons: no GPU sample in the measured interval (%d unread): the clocks cannot be told", unread)
	case noReasons > 0:
		f.errorf("clock_reasons: %d GPU reading(s) of the interval carry no clock-event reasons: the clocks cannot be told", noReasons)
	}
}

// checkHostLoad: the 1-minute load average before the run and after its
// measured interval is within the bound.
func checkHostLoad(f *findings, o ClockLoadOptions) {
	f.fig("load1_bound", o.MaxLoad1)
	peak := 0.0
	for _, rec := range [...]struct{ name, fig string }{{"preflight", "preflight_load1"}, {"postmeasure", "postmeasure_load1"}} {
		name := rec.name
		load, err := readLoad1(filepath.Join(o.AttemptDir, name+".json"))
		if err != nil {
			f.errorf("host_load: %v", err)
			continue
		}
		f.fig(rec.fig, load)
		peak = max(peak, load)
		if load > o.MaxLoad1 {
			f.failf("host_load: the host's 1-minute load average %.2f in %s.json is above the bound %g", load, name, o.MaxLoad1)
		}
	}
	f.fig("max_load1", peak)
}

// readLoad1 reads host.loadavg1 of a host record (pkg/attempt's
// hostRecord: {"at", "gpus", "host": gates.HostRecord, "error"}).
func readLoad1(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("host record: %w", err)
	}
	var rec struct {
		Host *struct {
			LoadAvg1 *float64 `json:"loadavg1"`
		} `json:"host"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return 0, fmt.Errorf("host record %s: %w", path, err)
	}
	if rec.Host == nil || rec.Host.LoadAvg1 == nil {
		return 0, fmt.Errorf("host record %s has no host.loadavg1: the host's load was not read", path)
	}
	return *rec.Host.LoadAvg1, nil
}
