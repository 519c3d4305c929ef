package loadgen

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/google/renameio/v2"
)

// Spec is what `loadgen materialize` builds: a synthetic manifest of
// token ids of exact lengths, drawn without a tokenizer. Lengths are
// token-exact because the prompt is the ids themselves, sent to
// /v1/completions as prompt token ids; what the ids decode to is
// meaningless text, which is what the seed's synthetic patterns ask for.
type Spec struct {
	// ID prefixes request ids: ID-000000, ID-000001, ...
	ID string
	// Kind is "synthetic" (input lengths from Input) or "prefix-pool"
	// (NumPrefixes shared prefixes of PrefixLen ids, each request one of
	// them plus a unique suffix of SuffixLen ids).
	Kind string
	// Input is the input-length distribution of "synthetic".
	Input Mixture
	// OutputTokens is requested of every request.
	OutputTokens int
	// Prefix is "none" for synthetic manifests.
	Prefix                 string
	NumPrefixes, PrefixLen int
	SuffixLen              int
	Arrival                Arrival
	NumRequests            int
	Seed                   uint64
	// VocabMin and VocabMax bound the ids, [VocabMin, VocabMax).
	VocabMin, VocabMax int
}

// Mixture is a weighted set of integer-uniform length ranges. Component
// counts are exact: weight × N rounded by largest remainder, so a 50/50
// mixture of 32,768 rows has exactly 16,384 of each; the rows are then
// permuted with the seed.
type Mixture []Component

// Component is U[Min, Max], inclusive, with its weight.
type Component struct {
	Min, Max int
	Weight   float64
}

// ParseUniform reads "A:B".
func ParseUniform(s string) (Component, error) {
	a, b, ok := strings.Cut(s, ":")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || lo < 1 || hi < lo {
		return Component{}, fmt.Errorf("uniform range %q: want A:B with 1 <= A <= B", s)
	}
	return Component{Min: lo, Max: hi, Weight: 1}, nil
}

// ParseMixture reads the seed's JSON form, {"uniform:128:512":0.5, ...}.
// Weights must be positive and sum to 1 (within 1e-9).
func ParseMixture(s string) (Mixture, error) {
	var raw map[string]float64
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("input mixture: %w", err)
	}
	var m Mixture
	sum := 0.0
	for k, w := range raw {
		rest, ok := strings.CutPrefix(k, "uniform:")
		if !ok {
			return nil, fmt.Errorf("input mixture: component %q: want uniform:A:B", k)
		}
		c, err := ParseUniform(rest)
		if err != nil {
			return nil, fmt.Errorf("input mixture: %w", err)
		}
		if !(w > 0) {
			return nil, fmt.Errorf("input mixture: component %q has weight %v", k, w)
		}
		c.Weight = w
		sum += w
		m = append(m, c)
	}
	if len(m) == 0 || math.Abs(sum-1) > 1e-9 {
		return nil, fmt.Errorf("input mixture: weights sum to %v, want 1", sum)
	}
	// Map order is random; the draw must not be.
	sort.Slice(m, func(i, j int) bool {
		if m[i].Min != m[j].Min {
			return m[i].Min < m[j].Min
		}
		return m[i].Max < m[j].Max
	})
	return m, nil
}

// counts splits n rows among the components by largest remainder.
func (m Mixture) counts(n int) []int {
	out := make([]int, len(m))
	type rem struct {
		i int
		r float64
	}
	var rems []rem
	left := n
	for i, c := range m {
		x := c.Weight * float64(n)
		out[i] = int(math.Floor(x))
		left -= out[i]
		rems = append(rems, rem{i, x - math.Floor(x)})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; k < left; k++ {
		out[rems[k%len(rems)].i]++
	}
	return out
}

// MaterializeSummary describes a written manifest.
type MaterializeSummary struct {
	Schema      string `json:"schema"`
	ID          string `json:"id"`
	Rows        int    `json:"rows"`
	SHA256      string `json:"sha256"`
	Arrival     string `json:"arrival"`
	InputMin    int    `json:"input_min"`
	InputMedian int    `json:"input_median"`
	InputMax    int    `json:"input_max"`
	InputSum    int64  `json:"input_sum"`
	Output      int    `json:"output_tokens"`
	Seed        uint64 `json:"workload_seed"`
}

// sharedPrefixLimit is the longest common prefix two rows of a manifest
// without intended prefixes may share (the seed: "no common prefix longer
// than 16 tokens").
const sharedPrefixLimit = 16

func (s *Spec) check() error {
	switch {
	case s.ID == "":
		return errors.New("no id")
	case s.NumRequests < 1:
		return errors.New("the number of requests must be at least 1")
	case s.OutputTokens < 1:
		return errors.New("output tokens must be at least 1")
	case s.VocabMin < 0 || s.VocabMax-s.VocabMin < 2:
		return fmt.Errorf("vocabulary [%d, %d) is empty or too small", s.VocabMin, s.VocabMax)
	}
	switch s.Kind {
	case "synthetic":
		if s.Prefix != "none" {
			return fmt.Errorf("prefix %q: synthetic manifests have --prefix none; shared prefixes are --kind prefix-pool", s.Prefix)
		}
		if len(s.Input) == 0 {
			return errors.New("synthetic manifests need one of --input-uniform, --input-mixture, --input-fixed")
		}
	case "prefix-pool":
		if s.NumPrefixes < 1 || s.PrefixLen < 1 || s.SuffixLen < 1 {
			return errors.New("prefix-pool needs --num-prefixes, --prefix-len and --suffix-fixed, all positive")
		}
	default:
		return fmt.Errorf("kind %q: want synthetic or prefix-pool", s.Kind)
	}
	return nil
}

// Materialize writes the manifest of spec to path atomically and returns
// its summary. The same spec and seed give the same bytes.
func Materialize(spec Spec, path string) (*MaterializeSummary, error) {
	if err := spec.check(); err != nil {
		return nil, fmt.Errorf("materialize: %w", err)
	}
	rng := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x5851f42d4c957f2d))
	n := spec.NumRequests
	lengths := make([]int, n)
	var prefixes [][]int32
	var groups []int
	if spec.Kind == "synthetic" {
		i := 0
		for ci, k := range spec.Input.counts(n) {
			c := spec.Input[ci]
			for j := 0; j < k; j++ {
				lengths[i] = c.Min + rng.IntN(c.Max-c.Min+1)
				i++
			}
		}
		rng.Shuffle(n, func(a, b int) { lengths[a], lengths[b] = lengths[b], lengths[a] })
	} else {
		for p := 0; p < spec.NumPrefixes; p++ {
			prefixes = append(prefixes, spec.draw(rng, spec.PrefixLen))
		}
		groups = make([]int, n)
		for i := range groups {
			groups[i] = i % spec.NumPrefixes // balanced
			lengths[i] = spec.PrefixLen + spec.SuffixLen
		}
		rng.Shuffle(n, func(a, b int) { groups[a], groups[b] = groups[b], groups[a] })
	}

	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithPermissions(0o600))
	if err != nil {
		return nil, fmt.Errorf("materialize %s: %w", path, err)
	}
	defer f.Cleanup()
	h := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	seen := map[[sharedPrefixLimit + 1]int32]int{}
	width := len(strconv.Itoa(n - 1))
	sum := summaryOf(spec, lengths)
	for i := 0; i < n; i++ {
		var ids []int32
		if spec.Kind == "synthetic" {
			ids = spec.draw(rng, lengths[i])
			if len(ids) > sharedPrefixLimit {
				var key [sharedPrefixLimit + 1]int32
				copy(key[:], ids)
				if j, dup := seen[key]; dup {
					return nil, fmt.Errorf("materialize: rows %d and %d share a prefix longer than %d tokens; use a larger vocabulary", j, i, sharedPrefixLimit)
				}
				seen[key] = i
			}
		} else {
			ids = append(append(ids, prefixes[groups[i]]...), spec.draw(rng, spec.SuffixLen)...)
		}
		if err := writeRow(w, spec, fmt.Sprintf("%s-%0*d", spec.ID, width, i), ids, groups, i); err != nil {
			return nil, fmt.Errorf("materialize %s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("materialize %s: %w", path, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return nil, fmt.Errorf("materialize %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("materialize: %w", err)
	}
	sum.SHA256 = hex.EncodeToString(h.Sum(nil))
	return sum, nil
}

// draw returns n ids uniform in the vocabulary.
func (s *Spec) draw(rng *rand.Rand, n int) []int32 {
	ids := make([]int32, n)
	span := s.VocabMax - s.VocabMin
	for i := range ids {
		ids[i] = int32(s.VocabMin + rng.IntN(span))
	}
	return ids
}

func writeRow(w io.Writer, spec Spec, id string, ids []int32, groups []int, i int) error {
	buf := make([]byte, 0, 16+len(ids)*7)
	buf = append(buf, `{"id":`...)
	buf = strconv.AppendQuote(buf, id)
	buf = append(buf, `,"prompt_token_ids":[`...)
	for k, t := range ids {
		if k > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(t), 10)
	}
	buf = append(buf, `],"input_tokens":`...)
	buf = strconv.AppendInt(buf, int64(len(ids)), 10)
	buf = append(buf, `,"output_tokens":`...)
	buf = strconv.AppendInt(buf, int64(spec.OutputTokens), 10)
	buf = append(buf, `,"arrival":`...)
	buf = strconv.AppendQuote(buf, spec.Arrival.String())
	if groups != nil {
		buf = append(buf, `,"prefix_group":`...)
		buf = strconv.AppendInt(buf, int64(groups[i]), 10)
	}
	buf = append(buf, "}\n"...)
	_, err := w.Write(buf)
	return err
}

func summaryOf(spec Spec, lengths []int) *MaterializeSummary {
	sorted := append([]int(nil), lengths...)
	sort.Ints(sorted)
	var sum int64
	for _, l := range sorted {
		sum += int64(l)
	}
	return &MaterializeSummary{Schema: "warden.loadgen.manifest-summary/1", ID: spec.ID, Rows: len(lengths),
		Arrival: spec.Arrival.String(), InputMin: sorted[0], InputMedian: sorted[(len(sorted)-1)/2],
		InputMax: sorted[len(sorted)-1], InputSum: sum, Output: spec.OutputTokens, Seed: spec.Seed}
}
