package contract

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"warden/pkg/atomicfile"
)

// The seed's Layer-2 gates over the windows that have the right shape:
// the family composition and its classifiability, the join to Layer 1,
// the graph-mode segments and representativeness. analyzeWindows records
// their findings and returns the analysis (analysis/kernels.json).

// AnalysisSchema is the schema of the analysis file.
const AnalysisSchema = "warden.layer2.analysis/1"

// Analysis is the per-window report of the Layer-2 gates.
type Analysis struct {
	Schema  string         `json:"schema"`
	Mapping MappingRef     `json:"mapping"`
	Windows []WindowReport `json:"windows"`
	Modes   []ModeReport   `json:"modes"`
	// Representativeness is the rule the windows were judged by and its
	// false-failure rate on the run's clean segment C.
	Representativeness *RepresentativenessReport `json:"representativeness,omitempty"`
}

// MappingRef names the mapping table the shares were computed with.
type MappingRef struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	SHA256  string `json:"sha256"`
}

// WindowReport is one window of one rank.
type WindowReport struct {
	File         string             `json:"file"`
	Rank         int                `json:"rank"`
	Window       int                `json:"window"`
	Shares       map[string]float64 `json:"shares"`
	OtherOpaque  float64            `json:"other_opaque"`
	Classifiable float64            `json:"classifiable"`
	DeviceUS     float64            `json:"device_us"`
	CPULaunchUS  float64            `json:"cpu_launch_us"`
	RuntimeUS    float64            `json:"cuda_runtime_us"`
	MemcpyUS     float64            `json:"memcpy_us"`
	MemsetUS     float64            `json:"memset_us"`
	BusyUS       float64            `json:"device_busy_us"`
	Kernels      int                `json:"kernels"`
	Unlaunched   int                `json:"kernels_without_launch"`
	GraphReplays int                `json:"graph_replays"`
	Opaque       int                `json:"graph_replays_opaque"`
	Unmatched    []NameUS           `json:"top_unmatched"`
	JoinedSteps  []int64            `json:"joined_steps"`
	JoinProblems []string           `json:"join_problems,omitempty"`
	StepModes    []string           `json:"step_modes"`
	SMD          map[string]float64 `json:"smd,omitempty"`
	// StepShares are each active step's family shares of its own kernel
	// time (the co-location check's noise is read from them).
	StepShares []map[string]float64 `json:"step_shares,omitempty"`
}

// ModeReport is one CUDA-graph mode segment of one rank across windows.
type ModeReport struct {
	Rank   int                `json:"rank"`
	Mode   string             `json:"mode"`
	Steps  int                `json:"steps"`
	Shares map[string]float64 `json:"shares,omitempty"` // only with at least 8 steps
}

// runtimeModes are Layer-1 runtime_mode values a step may have (seed:
// "FULL; PIECEWISE; NONE, reported as eager/ungraphed; or ambiguous, which
// invalidates the step").
var runtimeModes = map[string]bool{"FULL": true, "PIECEWISE": true, "NONE": true}

// minModeSteps: "when a mode has at least eight active steps across the
// two windows of a load point".
const minModeSteps = 8

type rankWindow struct {
	file string
	d    *traceData
}

type modeAcc struct {
	steps int
	fam   map[string]float64
	total float64
}

// analyzeWindows runs the gates on the good windows, by rank.
func analyzeWindows(f *l2findings, wins map[int][]rankWindow, opts Layer2Options) *Analysis {
	m := opts.Mapping
	an := &Analysis{Schema: AnalysisSchema, Mapping: MappingRef{m.Name, m.Version, m.SHA256}}
	recs, pb, ok := readJoinInputs(f, opts)
	f.fig("classifiable_min", 1)
	f.fig("other_opaque_max", 0)
	modes := map[int]map[string]*modeAcc{}
	var sc *selfCheck
	if ok && pb != nil && pb.lastClean != nil {
		windows := opts.Windows
		if windows <= 0 {
			for _, ws := range wins {
				windows = max(windows, len(ws))
			}
		}
		c := recordSelfCheck(f.findings, "clean segment C", cleanSteps(recs, pb), opts.ActiveIters, windows, opts.MaxSMD, opts.Representativeness)
		sc = &c
		an.Representativeness = representativenessReport(c, opts)
	}
	for _, r := range sortedRanks(wins) {
		ws := wins[r]
		sort.Slice(ws, func(i, j int) bool { return firstStep(ws[i].d) < firstStep(ws[j].d) })
		modes[r] = map[string]*modeAcc{}
		for k, w := range ws {
			rep := analyzeWindow(f, w, r, k, m.clone(), recs, pb, ok, sc, opts, modes[r])
			an.Windows = append(an.Windows, rep)
		}
	}
	checkModes(f, an, modes, opts)
	return an
}

func sortedRanks(w map[int][]rankWindow) []int {
	var rs []int
	for r := range w {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	return rs
}

func firstStep(d *traceData) float64 {
	if len(d.steps) == 0 {
		return math.Inf(1)
	}
	return d.steps[0].lo
}

// readJoinInputs reads the Layer-1 stream and the phase file; without a
// stream the join cannot be told (error).
func readJoinInputs(f *l2findings, opts Layer2Options) ([]L1Step, *phaseBounds, bool) {
	if opts.Layer1 == "" {
		f.errorf("no Layer-1 stream given: the join of the execute annotations cannot be told")
		return nil, nil, false
	}
	recs, err := ReadL1File(opts.Layer1)
	if err != nil {
		f.errorf("%v", err)
		return nil, nil, false
	}
	f.fig("layer1_records", float64(len(recs)))
	if opts.Phases == "" {
		f.errorf("no phase file given: the clean segment for the SMD test and the windows' bounds cannot be told")
		return recs, nil, true
	}
	pb, err := readPhaseBounds(opts.Phases)
	if err != nil {
		f.errorf("%v", err)
		return recs, nil, true
	}
	return recs, &pb, true
}

func analyzeWindow(f *l2findings, w rankWindow, r, k int, m *Mapping, recs []L1Step, pb *phaseBounds, haveL1 bool, sc *selfCheck, opts Layer2Options, modes map[string]*modeAcc) WindowReport {
	pre := fmt.Sprintf("w%d.r%d.", k, r)
	name := fmt.Sprintf("%s (rank %d, window %d)", w.file, r, k+1)
	c := compose(w.d, m)
	rep := WindowReport{File: w.file, Rank: r, Window: k + 1, DeviceUS: c.DeviceUS, CPULaunchUS: c.CPULaunchUS, RuntimeUS: c.RuntimeUS,
		MemcpyUS: c.MemcpyUS, MemsetUS: c.MemsetUS, BusyUS: c.BusyUS, Kernels: c.Kernels, Unlaunched: c.Unlaunched,
		GraphReplays: c.GraphReplays, Opaque: c.OpaqueReplays, Unmatched: c.Unmatched, StepModes: make([]string, len(w.d.steps))}
	if rep.Unmatched == nil {
		rep.Unmatched = []NameUS{}
	}
	kinds := make([]string, len(w.d.steps))
	joined := joinOne(f, name, w.d, k, recs, pb, haveL1, sc, opts, &rep)
	for i, ex := range w.d.execs {
		if ex.step < 0 {
			continue
		}
		if ri := joined[i]; ri >= 0 {
			kinds[ex.step] = stepKind(*recs[ri].PrefillTokens, *recs[ri].DecodeTokens)
			mode := ""
			if recs[ri].RuntimeMode != nil {
				mode = *recs[ri].RuntimeMode
			}
			rep.StepModes[ex.step] = mode
			if !runtimeModes[mode] {
				f.failf("%s: step %d (Layer-1 step %d): runtime_mode %q is ambiguous; the step is invalid", name, w.d.steps[ex.step].n, *recs[ri].Step, mode)
				rep.StepModes[ex.step] = "ambiguous"
				continue
			}
			acc := modes[mode]
			if acc == nil {
				acc = &modeAcc{fam: map[string]float64{}}
				modes[mode] = acc
			}
			acc.steps++
			for fam, us := range c.StepFamilyUS[ex.step] {
				acc.fam[fam] += us
				acc.total += us
			}
		}
	}
	rep.Shares = c.Shares(kinds)
	for _, fam := range c.StepFamilyUS {
		tot := 0.0
		for _, us := range fam {
			tot += us
		}
		sh := map[string]float64{}
		for f, us := range fam {
			if tot > 0 {
				sh[f] = us / tot
			}
		}
		rep.StepShares = append(rep.StepShares, sh)
	}
	rep.OtherOpaque = c.OtherOpaque()
	rep.Classifiable = 1 - rep.OtherOpaque
	judgeComposition(f, name, pre, c, rep, opts)
	return rep
}

// judgeComposition records a window's shares and fails it when it is not
// classifiable.
func judgeComposition(f *l2findings, name, pre string, c Composition, rep WindowReport, opts Layer2Options) {
	for _, k := range shareKeys(rep.Shares) {
		f.fig(pre+"share."+k, rep.Shares[k])
	}
	f.fig(pre+"other_opaque", rep.OtherOpaque)
	f.fig(pre+"device_us", c.DeviceUS)
	f.fig(pre+"cpu_launch_us", c.CPULaunchUS)
	f.fig(pre+"cuda_runtime_us", c.RuntimeUS)
	f.fig(pre+"memcpy_us", c.MemcpyUS)
	f.fig(pre+"memset_us", c.MemsetUS)
	f.fig(pre+"device_busy_us", c.BusyUS)
	f.fig(pre+"graph_replays_opaque", float64(c.OpaqueReplays))
	f.figs["classifiable_min"] = math.Min(f.figs["classifiable_min"], rep.Classifiable)
	f.figs["other_opaque_max"] = math.Max(f.figs["other_opaque_max"], rep.OtherOpaque)
	sum := 0.0
	for fam, s := range rep.Shares {
		if !strings.HasPrefix(fam, "attention_") {
			sum += s
		}
	}
	switch {
	case c.DeviceUS <= 0:
		f.failf("%s: no kernel time to classify", name)
		return
	case math.Abs(sum-1) > 1e-9:
		f.errorf("%s: shares sum to %.12f, not 1", name, sum)
	}
	if c.OpaqueUnmeasured > 0 {
		f.errorf("%s: %d opaque graph replay(s) whose device time the trace does not give", name, c.OpaqueUnmeasured)
	}
	if rep.OtherOpaque > opts.MaxOtherOpaque {
		var top []string
		for i, u := range rep.Unmatched {
			if i == 3 {
				break
			}
			top = append(top, fmt.Sprintf("%.40q %.1f%%", u.Name, 100*u.US/c.DeviceUS))
		}
		f.failf("%s: not classifiable: other + graph_replay_opaque is %.1f%% of device kernel time, more than %.0f%% (top unmatched: %s)",
			name, 100*rep.OtherOpaque, 100*opts.MaxOtherOpaque, strings.Join(top, ", "))
		f.stop7 = true
	}
}

// joinOne joins a window's annotations; it returns, per annotation, the
// index of its Layer-1 record (-1: none) and records the SMD test.
func joinOne(f *l2findings, name string, d *traceData, k int, recs []L1Step, pb *phaseBounds, haveL1 bool, sc *selfCheck, opts Layer2Options, rep *WindowReport) []int {
	none := make([]int, len(d.execs))
	for i := range none {
		none[i] = -1
	}
	if !haveL1 {
		return none
	}
	var as []annot
	for _, ex := range d.execs {
		a := annot{name: ex.name, tsNS: ex.lo * 1e3}
		var err error
		if a.ctxReqs, a.ctxTok, a.genReqs, a.genTok, err = parseAnnotation(ex.name); err != nil {
			f.failf("%s: %v", name, err)
			return none
		}
		as = append(as, a)
	}
	var cands []int
	switch {
	case pb != nil && k >= len(pb.profiles):
		f.failf("%s: the phase file has %d profile window(s); no bounds for this one", name, len(pb.profiles))
		return none
	case pb != nil:
		for i, r := range recs {
			if s := *r.SubmitMonoNS; s >= pb.profiles[k].lo && s <= pb.profiles[k].hi {
				cands = append(cands, i)
			}
		}
	default:
		for i := range recs {
			cands = append(cands, i)
		}
	}
	var expect *float64
	if pb != nil && pb.haveWall && d.baseNS != 0 {
		// trace µs + baseTimeNanoseconds is wall-clock time
		e := float64(d.baseNS - pb.wallMinusMono)
		expect = &e
	}
	f.fig(fmt.Sprintf("w%d.clock_mapped", k), b2f(expect != nil))
	j := joinWindow(as, recs, cands, float64(opts.JoinTolerance.Nanoseconds()), expect, float64(opts.ClockTolerance.Nanoseconds()))
	rep.JoinProblems = j.problems
	for _, ri := range j.recs {
		if ri >= 0 {
			rep.JoinedSteps = append(rep.JoinedSteps, *recs[ri].Step)
		}
	}
	if !j.ok() {
		f.failf("%s: cannot join to Layer 1: %s", name, strings.Join(j.problems, "; "))
		return none
	}
	f.fig(fmt.Sprintf("w%d.join_placements", k), float64(j.placements))
	if pb != nil {
		checkSMD(f, name, k, recs, j.recs, pb, sc, opts, rep)
	}
	return j.recs
}

// cleanSteps are the model-executed Layer-1 steps submitted in the clean
// segment before the first window (pb.lastClean must be set).
func cleanSteps(recs []L1Step, pb *phaseBounds) []L1Step {
	var clean []L1Step
	for _, r := range recs {
		if s := *r.SubmitMonoNS; s >= pb.lastClean.lo && s < pb.lastClean.hi && (r.ModelExecuted == nil || *r.ModelExecuted) {
			clean = append(clean, r)
		}
	}
	return clean
}

// checkSMD compares the window's joined steps with the clean segment
// before the first window, under the rule sc was computed for.
func checkSMD(f *l2findings, name string, k int, recs []L1Step, joined []int, pb *phaseBounds, sc *selfCheck, opts Layer2Options, rep *WindowReport) {
	if pb.lastClean == nil || sc == nil {
		f.errorf("%s: the phase file has no clean segment before the profile windows: SMD cannot be told", name)
		return
	}
	var prof []L1Step
	for _, ri := range joined {
		prof = append(prof, recs[ri])
	}
	clean := cleanSteps(recs, pb)
	if len(clean) < 2 {
		f.errorf("%s: %d Layer-1 step(s) in the adjacent clean segment: SMD cannot be told", name, len(clean))
		return
	}
	if !sc.ok {
		f.errorf("%s: the calibrated representativeness rule cannot be applied: %s", name, sc.problem)
		return
	}
	smd, over := windowSMD(prof, clean, sc.thr)
	rep.SMD = smd
	worst := 0.0
	for _, v := range smd {
		worst = math.Max(worst, math.Abs(v))
	}
	f.fig(fmt.Sprintf("w%d.smd_max", k), math.Min(worst, math.MaxFloat64))
	if len(over) == 0 {
		return
	}
	if opts.Representativeness.Rule == RuleCalibrated {
		f.failf("%s: not representative of the adjacent clean segment under the calibrated rule (%s, each over both the seed's %.2f and the %g quantile of clean segment C's own %d-step blocks): the load point's operator breakdown is invalid; one exact rerun, a second failure is Layer-2-inconclusive",
			name, strings.Join(over, ", "), opts.MaxSMD, opts.Representativeness.Quantile, opts.ActiveIters)
		return
	}
	f.failf("%s: not representative of the adjacent clean segment (%s, limit %.2f): the load point's operator breakdown is invalid; one exact rerun, a second failure is Layer-2-inconclusive",
		name, strings.Join(over, ", "), opts.MaxSMD)
}

// checkModes reports the mode segments and fails a required one with
// fewer than eight active steps (stop condition 7).
func checkModes(f *l2findings, an *Analysis, modes map[int]map[string]*modeAcc, opts Layer2Options) {
	for _, r := range sortedRankModes(modes) {
		for _, mode := range []string{"FULL", "PIECEWISE", "NONE"} {
			acc := modes[r][mode]
			mr := ModeReport{Rank: r, Mode: mode}
			if acc != nil {
				mr.Steps = acc.steps
			}
			f.fig(fmt.Sprintf("r%d.mode.%s.steps", r, mode), float64(mr.Steps))
			if acc != nil && acc.steps >= minModeSteps && acc.total > 0 {
				mr.Shares = map[string]float64{}
				for fam, us := range acc.fam {
					mr.Shares[fam] = us / acc.total
					f.fig(fmt.Sprintf("r%d.mode.%s.share.%s", r, mode, fam), us/acc.total)
				}
			}
			an.Modes = append(an.Modes, mr)
		}
		for _, mode := range opts.RequireModes {
			n := 0
			if acc := modes[r][mode]; acc != nil {
				n = acc.steps
			}
			if n < minModeSteps {
				f.failf("rank %d: %d active step(s) in the required %s mode segment, fewer than %d", r, n, mode, minModeSteps)
				f.stop7 = true
			}
		}
	}
}

func sortedRankModes(m map[int]map[string]*modeAcc) []int {
	var rs []int
	for r := range m {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	return rs
}

// WriteAnalysis writes the analysis atomically.
func WriteAnalysis(path string, an *Analysis) error {
	b, err := json.MarshalIndent(an, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o644)
}
