package contract

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"warden/pkg/atomicfile"
	"warden/pkg/gates"
)

// The data sanity block (seed 002, "Data sanity block contract"): for
// every numeric family of the run's outputs, n, finite, missing, minimum,
// maximum and distinct count; red flags for a negative counter, a ratio
// outside [0,1], a non-finite value and a declared constant that does not
// hold. Expected constants are recorded as such rather than suspected.
//
// A family is one JSON path in one file: "client/result.json:clean.completed_rps";
// array elements share a family ("result.json:segments[].seconds"), as do
// the lines of a JSON-lines file ("opprof/x.jsonl:step"). Numbers are
// JSON numbers; Python's bare NaN, Infinity and -Infinity are read as
// non-finite values; null and, in JSON lines, an absent key are missing.

// SanitySchema names the format of sanity.json.
const SanitySchema = "warden.sanity/1"

// SanityOptions are the sanity block's rules.
type SanityOptions struct {
	// Signed are glob patterns (* matches anything) of families that may
	// be negative; every other family is a non-negative counter.
	Signed []string
	// Ratio matches the last path element of families that must lie in
	// [0,1].
	Ratio *regexp.Regexp
	// Constants are declared constants: family pattern to value.
	Constants map[string]float64
}

// DefaultSanity: ratios are leaves named ratio, fraction, share, frac or
// usage (or ending in _ratio, _fraction, _share, _frac, _usage).
func DefaultSanity() SanityOptions {
	return SanityOptions{Ratio: regexp.MustCompile(`(^|_)(ratio|fraction|share|frac|usage)$`), Constants: map[string]float64{}}
}

// Family is one numeric family of the block.
type Family struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"` // counter, ratio, signed
	N        int      `json:"n"`
	Finite   int      `json:"finite"`
	Missing  int      `json:"missing"`
	Min      *float64 `json:"min"`
	Max      *float64 `json:"max"`
	Distinct int      `json:"distinct"`
	// Expected is the declared constant, when one is.
	Expected *float64 `json:"expected,omitempty"`
	// Constant is true when every finite value is the same (n > 1).
	Constant bool     `json:"constant"`
	Flags    []string `json:"red_flags,omitempty"`
}

// SanityBlock is sanity.json.
type SanityBlock struct {
	Schema   string   `json:"schema"`
	Inputs   []string `json:"inputs"`
	Families []Family `json:"families"`
	// RedFlags lists every family's red flags, "family: flag".
	RedFlags []string `json:"red_flags"`
	// UndeclaredConstants are families that never varied but were not
	// declared: reported, not flagged.
	UndeclaredConstants []string `json:"undeclared_constants"`
	Verdict             string   `json:"verdict"`
}

// acc accumulates one family.
type acc struct {
	n, finite, missing int
	min, max           float64
	distinct           map[float64]struct{}
	lines              int // JSON-lines records that carried the key, for absent-key missing counts
}

const nonFinitePrefix = "__warden_nonfinite__:"

type sanityReader struct {
	fams map[string]*acc
	// flags are red flags of whole records ("FILE: rule: ..."): the
	// Layer-1 waste rules (layer1waste.go)
	flags []string
}

func (s *sanityReader) fam(name string) *acc {
	a := s.fams[name]
	if a == nil {
		a = &acc{distinct: map[float64]struct{}{}, min: math.Inf(1), max: math.Inf(-1)}
		s.fams[name] = a
	}
	return a
}

// walk records every number under v at path.
func (s *sanityReader) walk(prefix, path string, v any, seen map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			s.walk(prefix, p, e, seen)
		}
	case []any:
		for _, e := range x {
			s.walk(prefix, path+"[]", e, seen)
		}
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		a := s.fam(prefix + path)
		a.n++
		seen[prefix+path] = true
		if err != nil || math.IsInf(f, 0) {
			return // too large to be finite
		}
		a.finite++
		a.min, a.max = math.Min(a.min, f), math.Max(a.max, f)
		if len(a.distinct) < 1<<20 {
			a.distinct[f] = struct{}{}
		}
	case string:
		if strings.HasPrefix(x, nonFinitePrefix) {
			a := s.fam(prefix + path)
			a.n++
			seen[prefix+path] = true
		}
	case nil:
		// a family of nulls only is dropped from the block (not numeric)
		a := s.fam(prefix + path)
		a.n++
		a.missing++
		seen[prefix+path] = true
	}
}

// WriteSanity builds the block as Sanity does and writes it to out as
// JSON ("" or "-": nowhere). A block it cannot write makes the verdict an
// error: the run would have no block to show.
func WriteSanity(inputs []string, base, out string, opts SanityOptions) Result {
	blk, r := Sanity(inputs, base, opts)
	if out != "" && out != "-" {
		if err := atomicfile.WriteJSON(out, blk, 0o644); err != nil {
			r.Verdict = gates.Error
			r.Detail = fmt.Sprintf("write %s: %v; %s", out, err, r.Detail)
		}
	}
	return r
}

// Sanity builds the block over the given files (JSON, or JSON lines when
// the name ends in .jsonl) and directories (every *.json and *.jsonl
// under them, except sanity.json). base, when not empty, is cut from the
// family names.
func Sanity(inputs []string, base string, opts SanityOptions) (SanityBlock, Result) {
	f := newFindings()
	blk := SanityBlock{Schema: SanitySchema, Inputs: []string{}, Families: []Family{}, RedFlags: []string{}, UndeclaredConstants: []string{}}
	files := sanityFiles(inputs, f)
	sr := &sanityReader{fams: map[string]*acc{}}
	for _, p := range files {
		name := p
		if base != "" {
			if rel, err := filepath.Rel(base, p); err == nil && filepath.IsLocal(rel) {
				name = rel
			}
		}
		blk.Inputs = append(blk.Inputs, name)
		if err := sr.readFile(p, name+":"); err != nil {
			f.errorf("%s: %v", name, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sr.fams)) {
		a := sr.fams[name]
		if a.finite == 0 && a.n == a.missing {
			continue // only nulls: not a numeric family
		}
		fam, declared := family(name, a, opts)
		if fam.Constant && !declared {
			blk.UndeclaredConstants = append(blk.UndeclaredConstants, name)
		}
		for _, fl := range fam.Flags {
			blk.RedFlags = append(blk.RedFlags, name+": "+fl)
		}
		blk.Families = append(blk.Families, fam)
	}
	blk.RedFlags = append(blk.RedFlags, sr.flags...)
	for _, pat := range slices.Sorted(maps.Keys(opts.Constants)) {
		found := false
		for _, fam := range blk.Families {
			found = found || globMatch(pat, fam.Name)
		}
		if !found {
			blk.RedFlags = append(blk.RedFlags, pat+": declared constant not found in the outputs")
		}
	}
	f.fig("inputs", float64(len(blk.Inputs)))
	f.fig("families", float64(len(blk.Families)))
	f.fig("red_flags", float64(len(blk.RedFlags)))
	f.fig("undeclared_constants", float64(len(blk.UndeclaredConstants)))
	if n := len(blk.RedFlags); n > 0 {
		shown := blk.RedFlags[:min(n, 5)]
		f.failf("%d red flag(s): %s", n, strings.Join(shown, "; "))
	}
	res := f.result(fmt.Sprintf("%d numeric families in %d file(s), no red flags", len(blk.Families), len(blk.Inputs)))
	blk.Verdict = res.Verdict
	return blk, res
}

// sanityFiles lists the files the inputs name, sorted: each file itself,
// and the .json and .jsonl files under each directory but sanity.json.
// What cannot be read is an error in f.
func sanityFiles(inputs []string, f *findings) []string {
	var files []string
	for _, in := range inputs {
		st, err := os.Stat(in)
		if err != nil {
			f.errorf("input: %v", err)
			continue
		}
		if !st.IsDir() {
			files = append(files, in)
			continue
		}
		err = filepath.WalkDir(in, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (strings.HasSuffix(p, ".json") || strings.HasSuffix(p, ".jsonl")) && d.Name() != "sanity.json" {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			f.errorf("input %s: %v", in, err)
		}
	}
	if len(files) == 0 && len(f.errs) == 0 {
		f.errorf("no input files")
	}
	sort.Strings(files)
	return files
}

// family summarizes the values a of the family name and flags what they
// break; declared says whether a declared constant names it.
func family(name string, a *acc, opts SanityOptions) (fam Family, declared bool) {
	fam = Family{Name: name, N: a.n, Finite: a.finite, Missing: a.missing, Distinct: len(a.distinct), Kind: "counter"}
	if a.finite > 0 {
		lo, hi := a.min, a.max
		fam.Min, fam.Max = &lo, &hi
		fam.Constant = a.finite > 1 && lo == hi
	}
	leaf := name[strings.LastIndexAny(name, ".:")+1:]
	leaf = strings.TrimSuffix(leaf, "[]")
	switch {
	case matchAny(opts.Signed, name):
		fam.Kind = "signed"
	case opts.Ratio != nil && opts.Ratio.MatchString(leaf):
		fam.Kind = "ratio"
	}
	if nf := a.n - a.finite - a.missing; nf > 0 {
		fam.Flags = append(fam.Flags, fmt.Sprintf("%d non-finite value(s)", nf))
	}
	if fam.Min != nil && fam.Kind != "signed" && *fam.Min < 0 {
		fam.Flags = append(fam.Flags, fmt.Sprintf("negative %s: min %g", fam.Kind, *fam.Min))
	}
	if fam.Max != nil && fam.Kind == "ratio" && *fam.Max > 1 {
		fam.Flags = append(fam.Flags, fmt.Sprintf("ratio above 1: max %g", *fam.Max))
	}
	for _, pat := range slices.Sorted(maps.Keys(opts.Constants)) {
		if !globMatch(pat, name) {
			continue
		}
		declared = true
		want := opts.Constants[pat]
		fam.Expected = &want
		if fam.Min == nil || !nearlyEqual(*fam.Min, want) || !nearlyEqual(*fam.Max, want) || a.missing > 0 {
			fam.Flags = append(fam.Flags, fmt.Sprintf("declared constant %g does not hold (min %v, max %v, missing %d)", want, ptrStr(fam.Min), ptrStr(fam.Max), a.missing))
		}
	}
	return fam, declared
}

// nearlyEqual compares a value with a declared constant to a relative
// 1e-9: 0.6/3 is a constant 0.2 for the block.
func nearlyEqual(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func ptrStr(p *float64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}

func (s *sanityReader) readFile(path, prefix string) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	if !strings.HasSuffix(path, ".jsonl") {
		b, err := io.ReadAll(fh)
		if err != nil {
			return err
		}
		v, err := decodeNumbers(b)
		if err != nil {
			return err
		}
		s.walk(prefix, "", v, map[string]bool{})
		return nil
	}
	br := bufio.NewReaderSize(fh, 1<<20)
	lines := 0
	seenIn := map[string]int{} // records each top-level family appeared in
	var waste wasteTally
	incomplete, firstIncomplete := 0, ""
	for ln := 1; ; ln++ {
		b, rerr := br.ReadBytes('\n')
		if t := bytes.TrimSpace(b); len(t) > 0 {
			v, err := decodeNumbers(t)
			if err != nil {
				return fmt.Errorf("line %d: %w", ln, err)
			}
			lines++
			if m, ok := v.(map[string]any); ok {
				if ws, step, isStep, missing := sanityWaste(m); isStep && len(missing) > 0 {
					if incomplete++; incomplete == 1 {
						firstIncomplete = fmt.Sprintf("line %d lacks %s", ln, strings.Join(missing, ", "))
					}
				} else if isStep {
					if bits, why := wasteViolations(ws); bits != 0 {
						waste.add(ln, step, bits, why)
					}
				}
			}
			seen := map[string]bool{}
			s.walk(prefix, "", v, seen)
			for k := range seen {
				seenIn[k]++
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	for _, fl := range sanityWasteFlags(&waste, incomplete, firstIncomplete) {
		s.flags = append(s.flags, prefix+" "+fl)
	}
	// a top-level key absent from some records is missing there
	for k, n := range seenIn {
		if strings.Contains(k[len(prefix):], "[]") {
			continue
		}
		if a := s.fams[k]; a != nil && n < lines {
			a.missing += lines - n
			a.n += lines - n
		}
	}
	return nil
}

// decodeNumbers decodes JSON with numbers kept as json.Number, reading
// Python's bare NaN, Infinity and -Infinity as non-finite markers.
func decodeNumbers(b []byte) (any, error) {
	if bytes.Contains(b, []byte("NaN")) || bytes.Contains(b, []byte("Infinity")) {
		b = markNonFinite(b)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// markNonFinite replaces bare NaN, Infinity and -Infinity outside strings
// by marker strings.
func markNonFinite(b []byte) []byte {
	var out []byte
	inStr, esc := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			out = append(out, c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		if c == '"' {
			inStr = true
			out = append(out, c)
			continue
		}
		matched := false
		for _, tok := range []string{"-Infinity", "Infinity", "NaN"} {
			if bytes.HasPrefix(b[i:], []byte(tok)) {
				out = append(out, strconv.Quote(nonFinitePrefix+tok)...)
				i += len(tok) - 1
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, c)
		}
	}
	return out
}

func matchAny(pats []string, name string) bool {
	for _, p := range pats {
		if globMatch(p, name) {
			return true
		}
	}
	return false
}

// globMatch matches name against pat, in which * matches any run of
// characters (path separators included) and everything else is literal.
func globMatch(pat, name string) bool {
	parts := strings.Split(pat, "*")
	if len(parts) == 1 {
		return pat == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(name, p)
		}
		j := strings.Index(name, p)
		if j < 0 {
			return false
		}
		name = name[j+len(p):]
	}
	return true
}
