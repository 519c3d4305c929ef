package contract

import (
	"fmt"
	"strings"
)

// The waste identities of a Layer-1 step (seed 002, "Data sanity block
// contract": "bucket >= unpadded, padding identity, graph-mode
// consistency, and waste numerator <= denominator"; "Waste accounting":
// padding is counted "for graph-hit steps with positive bucket b_s and
// unpadded tokens u_s", and "NONE steps are excluded from padding and
// counted under graph miss"). H1b's padding fraction and the graph-miss
// rates are computed from these fields, so a record that breaks them is
// data the analysis would take as valid. Both `validate layer1` (every
// data line) and `validate sanity` (every JSON-lines record that carries
// the fields) apply them; docs/validators.md's layer1 section lists them
// in this order.
//
// vLLM's runtime mode is what CudagraphDispatcher.dispatch returns
// (vllm/v1/cudagraph_dispatcher.py, docs/servers.md): FULL or PIECEWISE
// only when a captured graph's key matched the batch, NONE otherwise. So a
// FULL or PIECEWISE step is a graph hit and a NONE step is not.

// Layer1WasteRules are the rules' names, as the failures start.
var Layer1WasteRules = []string{"bucket_ge_unpadded", "padding_identity", "graph_mode"}

// The rules as bits of one record's violations.
const (
	wasteBucket uint8 = 1 << iota
	wastePadding
	wasteMode
)

// wasteStep is the part of a record the rules read.
type wasteStep struct {
	executed, hit            bool
	mode                     string
	unpadded, bucket, padded int64
}

// wasteViolations judges one step; why[i] says what breaks rule i.
func wasteViolations(s wasteStep) (bits uint8, why [3]string) {
	if s.bucket < s.unpadded {
		bits |= wasteBucket
		why[0] = fmt.Sprintf("bucket_tokens %d < unpadded_tokens %d", s.bucket, s.unpadded)
	}
	if s.padded != s.bucket-s.unpadded {
		bits |= wastePadding
		why[1] = fmt.Sprintf("padding_tokens %d != bucket_tokens %d - unpadded_tokens %d", s.padded, s.bucket, s.unpadded)
	}
	var m string
	switch graph := s.mode == "FULL" || s.mode == "PIECEWISE"; {
	case !runtimeModes[s.mode]:
		m = fmt.Sprintf("runtime_mode %q is not FULL, PIECEWISE or NONE", s.mode)
	case s.hit && !graph:
		m = "cuda_graph_hit true under runtime_mode NONE (a NONE step is a graph miss)"
	case !s.hit && graph:
		m = fmt.Sprintf("cuda_graph_hit false under runtime_mode %s (vLLM dispatches %s only for a captured graph)", s.mode, s.mode)
	case s.hit && !s.executed:
		m = "cuda_graph_hit true on a step with model_executed false"
	case s.hit && s.bucket <= 0:
		m = fmt.Sprintf("cuda_graph_hit true with bucket_tokens %d (a graph hit has a positive bucket)", s.bucket)
	}
	if m != "" {
		bits |= wasteMode
		why[2] = m
	}
	return bits, why
}

// wasteTally counts one stream's violations, rule by rule, with the first
// of each.
type wasteTally struct {
	n     [3]int
	first [3]string
}

// add notes the violations of the step on line (1-based) with index step.
func (w *wasteTally) add(line int, step int64, bits uint8, why [3]string) {
	for i := range w.n {
		if bits&(1<<i) == 0 {
			continue
		}
		if w.n[i] == 0 {
			w.first[i] = fmt.Sprintf("line %d, step %d: %s", line, step, why[i])
		}
		w.n[i]++
	}
}

// failures are the rules broken, each "rule: N record(s) ... (first: ...)".
func (w *wasteTally) failures() []string {
	var out []string
	for i, rule := range Layer1WasteRules {
		if w.n[i] > 0 {
			out = append(out, fmt.Sprintf("%s: %d record(s) break it (first: %s)", rule, w.n[i], w.first[i]))
		}
	}
	return out
}

// checkWaste fails the stream for each rule its records break. Figures
// bucket_ge_unpadded_violations, padding_identity_violations,
// graph_mode_violations.
func checkWaste(f *findings, s streamScan) {
	for i, name := range [...]string{"bucket_ge_unpadded_violations", "padding_identity_violations", "graph_mode_violations"} {
		f.fig(name, float64(s.waste.n[i]))
	}
	for _, m := range s.waste.failures() {
		f.failf("%s", m)
	}
}

// sanityWasteKeys are the keys that make a JSON-lines record a Layer-1
// step for the rules (runtime_mode alone does not: streams of step modes
// without the padding fields exist); such a record must carry every key of
// sanityWasteFields, or the rules cannot be told for it.
var (
	sanityWasteKeys   = []string{"unpadded_tokens", "bucket_tokens", "padding_tokens", "cuda_graph_hit"}
	sanityWasteFields = append([]string{"runtime_mode"}, sanityWasteKeys...)
)

// sanityWaste applies the rules to one decoded JSON-lines record m of a
// sanity input; it reports whether m is a Layer-1 step, and incomplete
// when the record carries some of the fields but not all.
func sanityWaste(m map[string]any) (s wasteStep, step int64, isStep bool, incomplete []string) {
	for _, k := range sanityWasteKeys {
		if _, ok := m[k]; ok {
			isStep = true
		}
	}
	if !isStep {
		return s, 0, false, nil
	}
	ints := map[string]*int64{"unpadded_tokens": &s.unpadded, "bucket_tokens": &s.bucket, "padding_tokens": &s.padded}
	for _, k := range sanityWasteFields {
		v := m[k]
		ok := false
		switch k {
		case "runtime_mode":
			s.mode, ok = v.(string)
		case "cuda_graph_hit":
			s.hit, ok = v.(bool)
		default:
			var n int64
			if n, ok = jsonInt(v); ok {
				*ints[k] = n
			}
		}
		if !ok {
			incomplete = append(incomplete, k)
		}
	}
	s.executed = true
	if e, ok := m["model_executed"].(bool); ok {
		s.executed = e
	}
	step, _ = jsonInt(m["step"])
	return s, step, true, incomplete
}

// jsonInt reads an integer json.Number.
func jsonInt(v any) (int64, bool) {
	n, ok := v.(interface{ Int64() (int64, error) })
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// sanityWasteFlags are the red flags of one JSON-lines file's records:
// the rules' failures, and records that carry part of the fields.
func sanityWasteFlags(w *wasteTally, incomplete int, firstIncomplete string) []string {
	flags := w.failures()
	if incomplete > 0 {
		flags = append(flags, fmt.Sprintf("%s: %d record(s) carry only part of %s, so padding and graph mode cannot be checked (first: %s)",
			"waste_fields", incomplete, strings.Join(sanityWasteFields, ", "), firstIncomplete))
	}
	return flags
}
