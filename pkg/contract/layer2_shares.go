package contract

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Operator shares of one window and rank (seed 002, "Kernel-to-operator-
// family mapping"): "summed GPU kernel duration in a family divided by
// total GPU kernel/replay activity duration in the eight active steps,
// including unmatched/opaque activity in the denominator". The trace holds
// the active steps only (the profiler records no warm-up), so every kernel
// in it counts; a kernel's step is its launch's (the runtime or driver call
// with its correlation id), which places attention in a phase.

// Composition is what a window's kernels add up to.
type Composition struct {
	// DeviceUS is the denominator: every kernel's duration plus the
	// device time of opaque graph replays, µs.
	DeviceUS float64
	// FamilyUS by family, with "other" and "graph_replay_opaque".
	FamilyUS map[string]float64
	// StepFamilyUS: the same by active step (index in time order), for
	// the attention split and the mode segments; kernels whose launch is
	// outside every step are in FamilyUS only.
	StepFamilyUS []map[string]float64
	// Reported apart (seed: "CPU launch time, CUDA runtime time,
	// memcpy/memset time, and unioned device-busy time are reported
	// separately"), µs within the active steps.
	CPULaunchUS, RuntimeUS, MemcpyUS, MemsetUS, BusyUS float64
	Kernels, Unlaunched, OpaqueReplays, GraphReplays   int
	// Unmatched: the kernels no rule matched, by summed duration.
	Unmatched []NameUS
	// OpaqueUnmeasured: opaque replays whose device time the trace does
	// not give (no GPU-timeline copy of their step's annotation).
	OpaqueUnmeasured int
}

// NameUS is a kernel name and its summed duration.
type NameUS struct {
	Name string  `json:"name"`
	US   float64 `json:"us"`
}

var (
	launchCall = regexp.MustCompile(`(?i)launch`)
	graphCall  = regexp.MustCompile(`(?i)graphlaunch`)
)

// matchMemo is re's answer for each name, asked once per name: a trace's
// hundreds of thousands of runtime calls have a few dozen names.
func matchMemo(re *regexp.Regexp) func(string) bool {
	seen := map[string]bool{}
	return func(name string) bool {
		m, ok := seen[name]
		if !ok {
			m = re.MatchString(name)
			seen[name] = m
		}
		return m
	}
}

// compose classifies every kernel of d with m.
func compose(d *traceData, m *Mapping) Composition {
	c := Composition{FamilyUS: map[string]float64{}, StepFamilyUS: make([]map[string]float64, len(d.steps))}
	for i := range c.StepFamilyUS {
		c.StepFamilyUS[i] = map[string]float64{}
	}
	byCorr := map[int64]*apiCall{}
	isLaunch := matchMemo(launchCall)
	for i := range d.calls {
		call := &d.calls[i]
		if call.hasC {
			byCorr[call.corr] = call
		}
		if call.step >= 0 {
			c.RuntimeUS += call.dur
			if isLaunch(call.name) {
				c.CPULaunchUS += call.dur
			}
		}
	}
	withGPU := map[int64]bool{}
	unmatched := map[string]float64{}
	var busy []span
	for _, g := range d.gpu {
		if g.hasC {
			withGPU[g.corr] = true
		}
		busy = append(busy, span{g.ts, g.ts + g.dur})
		switch g.cat {
		case "gpu_memcpy":
			c.MemcpyUS += g.dur
			continue
		case "gpu_memset":
			c.MemsetUS += g.dur
			continue
		}
		c.Kernels++
		var scopes uint64
		step := -1
		if call := byCorr[g.corr]; g.hasC && call != nil {
			scopes, step = call.scopes, call.step
		} else {
			c.Unlaunched++
		}
		f := m.Classify(g.name, scopes)
		c.add(step, f, g.dur)
		if f == FamilyOther {
			unmatched[g.name] += g.dur
		}
	}
	c.BusyUS = unionUS(busy)
	c.opaque(d, byCorr, withGPU)
	for n, us := range unmatched {
		c.Unmatched = append(c.Unmatched, NameUS{n, us})
	}
	sort.Slice(c.Unmatched, func(i, j int) bool {
		if c.Unmatched[i].US != c.Unmatched[j].US {
			return c.Unmatched[i].US > c.Unmatched[j].US
		}
		return c.Unmatched[i].Name < c.Unmatched[j].Name
	})
	if len(c.Unmatched) > 20 {
		c.Unmatched = c.Unmatched[:20]
	}
	return c
}

func (c *Composition) add(step int, family string, us float64) {
	c.DeviceUS += us
	c.FamilyUS[family] += us
	if step >= 0 {
		c.StepFamilyUS[step][family] += us
	}
}

// opaque finds graph launches in active steps with no GPU activity of
// their correlation id (seed: "If CUPTI shows only a graph-launch event
// with no child kernel activity for FULL or PIECEWISE, its device time is
// labeled graph_replay_opaque; it is never distributed among operator
// families"). Its device time is what the GPU-timeline copy of its step's
// execute annotation spans beyond the step's kernels; without that copy it
// cannot be measured.
func (c *Composition) opaque(d *traceData, byCorr map[int64]*apiCall, withGPU map[int64]bool) {
	opaqueSteps := map[int]int{}
	isGraph := matchMemo(graphCall)
	for _, call := range d.calls {
		if call.step < 0 || !isGraph(call.name) {
			continue
		}
		c.GraphReplays++
		if call.hasC && withGPU[call.corr] {
			continue
		}
		c.OpaqueReplays++
		opaqueSteps[call.step]++
	}
	for step := range opaqueSteps {
		var ex *execMark
		for i := range d.execs {
			if d.execs[i].step == step {
				ex = &d.execs[i]
				break
			}
		}
		if ex == nil || ex.gpu == nil {
			c.OpaqueUnmeasured += opaqueSteps[step]
			continue
		}
		known := 0.0
		for _, us := range c.StepFamilyUS[step] {
			known += us
		}
		if left := (ex.gpu.hi - ex.gpu.lo) - known; left > 0 {
			c.add(step, FamilyOpaque, left)
		}
	}
}

// unionUS is the length of the union of the spans.
func unionUS(s []span) float64 {
	sort.Slice(s, func(i, j int) bool { return s[i].lo < s[j].lo })
	total, end := 0.0, 0.0
	started := false
	for _, x := range s {
		switch {
		case !started || x.lo > end:
			total += x.hi - x.lo
			end, started = x.hi, true
		case x.hi > end:
			total += x.hi - end
			end = x.hi
		}
	}
	return total
}

// stepKind names the attention phase of a step by its tokens (seed:
// attention_prefill "prefill tokens >0 and decode tokens =0",
// attention_decode the reverse, attention_mixed "both are nonzero").
func stepKind(prefill, decode int64) string {
	switch {
	case prefill > 0 && decode == 0:
		return "attention_prefill"
	case decode > 0 && prefill == 0:
		return "attention_decode"
	case prefill > 0 && decode > 0:
		return "attention_mixed"
	}
	return "attention_idle"
}

// Shares turns durations into fractions of DeviceUS: every family, other
// and graph_replay_opaque (they sum to 1), and the attention subfamilies
// by the steps' kinds (kinds[i] for step i, "" when unknown:
// attention_unsplit).
func (c Composition) Shares(kinds []string) map[string]float64 {
	out := map[string]float64{}
	if c.DeviceUS <= 0 {
		return out
	}
	for f, us := range c.FamilyUS {
		out[f] = us / c.DeviceUS
	}
	split := 0.0
	for i, fam := range c.StepFamilyUS {
		us := fam[FamilyAttention]
		if us == 0 {
			continue
		}
		k := ""
		if i < len(kinds) {
			k = kinds[i]
		}
		if k == "" {
			k = "attention_unsplit"
		}
		out[k] += us / c.DeviceUS
		split += us
	}
	if rest := c.FamilyUS[FamilyAttention] - split; rest > 1e-9*c.DeviceUS {
		out["attention_unsplit"] += rest / c.DeviceUS
	}
	return out
}

// OtherOpaque is the fraction of device time that is other or opaque.
func (c Composition) OtherOpaque() float64 {
	if c.DeviceUS <= 0 {
		return 1
	}
	return (c.FamilyUS[FamilyOther] + c.FamilyUS[FamilyOpaque]) / c.DeviceUS
}

// annotationTokens reads vLLM's execute_context_N(T)_generation_M(T).
var annotationTokens = regexp.MustCompile(`^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$`)

// parseAnnotation gives (context requests, context tokens, generation
// requests, generation tokens) of an execute annotation.
func parseAnnotation(name string) (ctxReqs, ctxTok, genReqs, genTok int64, err error) {
	m := annotationTokens.FindStringSubmatch(name)
	if m == nil {
		return 0, 0, 0, 0, fmt.Errorf("annotation %q does not name its token counts", name)
	}
	var v [4]int64
	for i := range v {
		if _, err := fmt.Sscan(m[i+1], &v[i]); err != nil {
			return 0, 0, 0, 0, fmt.Errorf("annotation %q: %w", name, err)
		}
	}
	return v[0], v[1], v[2], v[3], nil
}

// shareKeys gives the keys of a share map in a fixed order: families
// sorted, other and graph_replay_opaque last.
func shareKeys(s map[string]float64) []string {
	var ks []string
	for k := range s {
		if k != FamilyOther && k != FamilyOpaque {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	for _, k := range []string{FamilyOther, FamilyOpaque} {
		if _, ok := s[k]; ok {
			ks = append(ks, k)
		}
	}
	return ks
}

func fmtShares(s map[string]float64) string {
	var parts []string
	for _, k := range shareKeys(s) {
		if strings.HasPrefix(k, "attention_") {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f%%", k, 100*s[k]))
	}
	return strings.Join(parts, ", ")
}
