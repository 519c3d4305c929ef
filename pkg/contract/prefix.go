package contract

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
)

// The prefix rule of seed 002 ("Prefix sharing"): "none: no intentionally
// shared prefix. Synthetic token streams are unique per request. The
// manifest must have no common prefix longer than 16 tokens, and the clean
// Layer-1 prefix-query hit ratio must remain below 1%; otherwise the cell
// is invalid."

// PrefixOptions are the knobs of the prefix check.
type PrefixOptions struct {
	Manifest        string  // JSONL, each line's prompt_token_ids
	MaxCommonPrefix int     // seed: 16 tokens
	Layer1, Phases  string  // the clean Layer-1 records: both or neither
	MaxHitRatio     float64 // seed: 0.01, exclusive
}

// DefaultPrefix is the seed's rule.
func DefaultPrefix() PrefixOptions { return PrefixOptions{MaxCommonPrefix: 16, MaxHitRatio: 0.01} }

// LongestCommonPrefix gives the longest prefix, in tokens, that two of the
// sequences share, and the two rows (0-based) that share it. Sorted
// lexicographically, the longest common prefix of any pair is that of two
// neighbours.
func LongestCommonPrefix(seqs [][]int64) (int, int, int) {
	idx := make([]int, len(seqs))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return slices.Compare(seqs[idx[a]], seqs[idx[b]]) < 0 })
	best, ra, rb := 0, -1, -1
	for k := 1; k < len(idx); k++ {
		a, b := seqs[idx[k-1]], seqs[idx[k]]
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		if n > best {
			best, ra, rb = n, min(idx[k-1], idx[k]), max(idx[k-1], idx[k])
		}
	}
	return best, ra, rb
}

// PrefixCheck checks a prefix-none cell: the manifest, and, when given,
// the clean Layer-1 prefix hit ratio (sum prefix_cache_hits / sum prefix_cache_queries
// over the records submitted inside the phase file's clean segments).
//
// Figures: requests, longest_common_prefix (counted up to
// MaxCommonPrefix+1 tokens: a longer one fails all the same), and with
// Layer 1 prefix_queries, prefix_hits, prefix_hit_ratio.
func PrefixCheck(o PrefixOptions) Result {
	f := newFindings()
	checkManifestPrefix(f, o)
	if (o.Layer1 == "") != (o.Phases == "") {
		f.errorf("the hit ratio needs both the Layer-1 stream and the phase file")
	} else if o.Layer1 != "" {
		checkHitRatio(f, o)
	}
	return f.result(fmt.Sprintf("no two requests share more than %d tokens; clean prefix hit ratio below %.2g", o.MaxCommonPrefix, o.MaxHitRatio))
}

func checkManifestPrefix(f *findings, o PrefixOptions) {
	fh, err := os.Open(o.Manifest)
	if err != nil {
		f.errorf("manifest: %v", err)
		return
	}
	defer fh.Close()
	// Only the first MaxCommonPrefix+1 tokens of a row can decide the
	// rule: a manifest of 32,768 rows of 8,192 tokens (P03, 1.2 GB) is
	// read a line at a time and holds 17 tokens a row.
	keep := o.MaxCommonPrefix + 1
	var seqs [][]int64
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var row struct {
			IDs *[]int64 `json:"prompt_token_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil || row.IDs == nil {
			f.errorf("manifest line %d: no prompt_token_ids (%v): the prefix cannot be told", n, err)
			return
		}
		ids := *row.IDs
		seqs = append(seqs, slices.Clone(ids[:min(len(ids), keep)]))
	}
	if err := sc.Err(); err != nil {
		f.errorf("manifest: %v", err)
		return
	}
	n, a, c := LongestCommonPrefix(seqs)
	f.fig("requests", float64(len(seqs)))
	f.fig("longest_common_prefix", float64(n))
	if n > o.MaxCommonPrefix {
		f.failf("manifest rows %d and %d share a prefix of more than %d tokens", a+1, c+1, o.MaxCommonPrefix)
	}
}

func checkHitRatio(f *findings, o PrefixOptions) {
	recs, err := ReadL1File(o.Layer1)
	if err != nil {
		f.errorf("%v", err)
		return
	}
	clean, err := cleanSpans(o.Phases)
	if err != nil {
		f.errorf("%v", err)
		return
	}
	if len(clean) == 0 {
		f.errorf("the phase file has no clean segment")
		return
	}
	var q, h int64
	for _, r := range recs {
		in := false
		for _, s := range clean {
			in = in || *r.SubmitMonoNS >= s.lo && *r.SubmitMonoNS < s.hi
		}
		if !in {
			continue
		}
		if r.PrefixQueries == nil || r.PrefixHits == nil {
			f.errorf("Layer-1 step %d has no prefix_cache_queries/prefix_cache_hits: the hit ratio cannot be told", *r.Step)
			return
		}
		q += *r.PrefixQueries
		h += *r.PrefixHits
	}
	f.fig("prefix_queries", float64(q))
	f.fig("prefix_hits", float64(h))
	if q == 0 {
		f.errorf("no prefix queries in the clean segments: the hit ratio cannot be told")
		return
	}
	ratio := float64(h) / float64(q)
	f.fig("prefix_hit_ratio", ratio)
	if !(ratio < o.MaxHitRatio) {
		f.failf("clean prefix hit ratio %.4f is not below %.4f", ratio, o.MaxHitRatio)
	}
}

// cleanSpans gives the clean segments of a phase file: each clean line to
// the next line.
func cleanSpans(path string) ([]monoSpan, error) {
	pb, err := readPhaseLines(path)
	if err != nil {
		return nil, err
	}
	var out []monoSpan
	for i, p := range pb {
		if p.Phase == "clean" && i+1 < len(pb) {
			out = append(out, monoSpan{p.MonoNS, pb[i+1].MonoNS})
		}
	}
	return out, nil
}
