package contract

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"warden/pkg/gpu"
	"warden/pkg/loadgen"
)

// The docs say exactly what the checks check. docs/validators.md lists,
// for each validator, the figures its verdicts carry (every rule records
// the figures it decides on); docs/loadgen.md lists the result.json fields
// the client validator reads. These tests hold both against the code.

const validatorsDoc = "../../docs/validators.md"

var backticked = regexp.MustCompile("`([^`]+)`")

// docSections splits a Markdown page at its "## " headings.
func docSections(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, part := range strings.Split("\n"+string(b), "\n## ")[1:] {
		name, body, _ := strings.Cut(part, "\n")
		out[strings.TrimSpace(name)] = body
	}
	return out
}

// documentedFigures is the set of figure names a section's "Figures:"
// paragraph (or "- figures:" item) names. A name with an upper-case K
// ("recoveryK_pass") stands for every index.
func documentedFigures(section string) []string {
	var names []string
	lines := strings.Split(section, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "Figures:") && !strings.HasPrefix(l, "- figures:") {
			continue
		}
		// the paragraph or list item: up to a blank line or the next item
		text := l
		for _, next := range lines[i+1:] {
			if strings.TrimSpace(next) == "" || strings.HasPrefix(next, "- ") {
				break
			}
			text += " " + next
		}
		for _, m := range backticked.FindAllStringSubmatch(text, -1) {
			if regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.]*[a-zA-Z0-9_]$`).MatchString(m[1]) {
				names = append(names, m[1])
			}
		}
	}
	return names
}

// figurePattern matches an emitted figure name against a documented one.
func figurePattern(doc string) *regexp.Regexp {
	q := strings.ReplaceAll(regexp.QuoteMeta(doc), "FEATURE", `[a-zA-Z_]+`)
	return regexp.MustCompile("^" + strings.ReplaceAll(q, "K", `[0-9]+`) + "$")
}

// sourceLiterals is the non-test Go source of this package.
func sourceLiterals(t *testing.T) string {
	t.Helper()
	files, _ := filepath.Glob("*.go")
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(src)
	}
	return b.String()
}

// TestValidatorFiguresDocumented: every figure a validator reports on the
// real loadgen run (and the Layer-1 and profile inputs built from it) is
// named in its section of docs/validators.md, and every figure the docs
// name is one the code can write (a literal "name", or "prefix%d_suffix"
// for a K name).
func TestValidatorFiguresDocumented(t *testing.T) {
	secs := docSections(t, validatorsDoc)
	src := sourceLiterals(t)
	const dir = "testdata/loadgen/saturation"
	l1 := t.TempDir()
	writeLayer1Over(t, dir, l1)
	emitted := map[string][]Result{
		"client":          {ClientDir(dir, DefaultClient()), ClientDir(t.TempDir(), DefaultClient())},
		"warmup":          {WarmupDir(dir, WarmupOptions{MinCompletions: 1}), WarmupDir(dir, WarmupOptions{MinCompletions: 1 << 20, Stabilization: true, Layer1Dir: l1})},
		"recovery":        {recoveryOver(dir, l1)},
		"profile-windows": {ProfileWindowsDir(dir, ProfileWindowOptions{Windows: 2})},
		"layer1":          {Layer1Dir(l1, "", "", DefaultLayer1)},
		"power":           {PowerDir(dir, PowerOptions{Layer1Dir: l1, BlockSteps: 8, Windows: 2, ReferenceTailS: 30, MaxSMD: 0.25, WindowS: 1, StepS: 0.25, Tolerance: 0.1})},
	}
	cl, clPhases := clockLoadDir(t, gpu.ReasonHwSlowdown, [2]float64{1, 2})
	emitted["clock-load"] = []Result{ClockLoad(ClockLoadOptions{AttemptDir: cl, Phases: clPhases, ForbiddenReasons: DefaultForbiddenReasons, MaxLoad1: 1})}
	recRoot := t.TempDir()
	recRun := recordsRun(t, recRoot, "burnin.C00", vllmCacheLine+"\n", serverInfo)
	emitted["records"] = []Result{Records(RecordsOptions{AttemptDir: recRun, Out: filepath.Join(recRun, "records.json"), CompileKeyOf: filepath.Dir(recRun)})}
	emitted["waveform"] = waveformFigures(t)
	_, san := Sanity([]string{dir}, dir, DefaultSanity())
	emitted["sanity"] = []Result{san}
	for name, results := range emitted {
		sec, ok := secs[name]
		if !ok {
			t.Errorf("docs/validators.md has no section %q", name)
			continue
		}
		docs := documentedFigures(sec)
		if len(docs) == 0 {
			t.Errorf("docs/validators.md section %q lists no figures", name)
			continue
		}
		for _, r := range results {
			for fig := range r.Figures {
				if !slices.ContainsFunc(docs, func(d string) bool { return figurePattern(d).MatchString(fig) }) {
					t.Errorf("%s reports figure %q, which docs/validators.md does not name (it names %v)", name, fig, docs)
				}
			}
		}
	}
	for name, sec := range secs {
		for _, d := range documentedFigures(sec) {
			lit := `"` + d + `"`
			if strings.Contains(d, "K") {
				lit = `"` + strings.ReplaceAll(d, "K", "%d") + `"`
			}
			if pre, post, ok := strings.Cut(d, "FEATURE"); ok {
				// written as "pre"+name+"post"
				if !strings.Contains(src, `"`+pre+`"+`) || !strings.Contains(src, `+"`+post+`"`) {
					t.Errorf("docs/validators.md section %q names figure %q, which no code of pkg/contract writes (looked for %q+name+%q)", name, d, pre, post)
				}
				continue
			}
			if !strings.Contains(src, lit) {
				t.Errorf("docs/validators.md section %q names figure %q, which no code of pkg/contract writes (looked for %s)", name, d, lit)
			}
		}
	}
}

// writeLayer1Over writes a schema-v1 stream that covers the run's
// monotonic times, one record a millisecond, waiting queue 2.
func writeLayer1Over(t *testing.T, resultDir, l1 string) {
	t.Helper()
	var res seedResult
	b0, err := os.ReadFile(filepath.Join(resultDir, "result.json"))
	if err != nil || json.Unmarshal(b0, &res) != nil || len(res.Segments) == 0 {
		t.Fatalf("%s: %v", resultDir, err)
	}
	var b strings.Builder
	last := res.Segments[len(res.Segments)-1].EndMonoNS
	step := int64(0)
	for sub := res.Clock.T0MonoNS; sub < last; sub += 1_000_000 {
		r := l1Record(step, sub)
		r.NumWaitingReqs = 2
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&b, string(line))
		step++
	}
	if err := os.WriteFile(filepath.Join(l1, "layer1.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func recoveryOver(dir, l1 string) Result {
	o := DefaultRecovery()
	o.Layer1Dir, o.WindowS, o.StepS, o.RecoveryS = l1, 0.05, 0.01, 0.1
	return RecoveryDir(dir, o)
}

// TestLoadgenDocFieldsRead: every result.json or record field that
// docs/loadgen.md's "What the client validator checks" table says the
// client validator reads is a field this package decodes (a json tag or a
// key it looks up).
func TestLoadgenDocFieldsRead(t *testing.T) {
	sec := docSections(t, "../../docs/loadgen.md")["What the client validator checks"]
	table, _, _ := strings.Cut(sec, "Read by other checks")
	if !strings.Contains(table, "| rule (seed) | fields |") {
		t.Fatal("docs/loadgen.md: the client validator's table is missing")
	}
	src := sourceLiterals(t)
	field := regexp.MustCompile(`^[a-z][a-z0-9_]*(\[\])?(\.[a-z][a-z0-9_]*)*$`)
	n := 0
	for _, line := range strings.Split(table, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 4 || strings.Contains(cols[1], "rule (seed)") || strings.HasPrefix(strings.TrimSpace(cols[1]), "---") {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(cols[2], -1) {
			tok := m[1]
			if !field.MatchString(tok) || !strings.ContainsAny(tok, "._") {
				continue // a file name, a class, a status
			}
			parts := strings.Split(strings.ReplaceAll(tok, "[]", ""), ".")
			key := parts[len(parts)-1]
			n++
			if !strings.Contains(src, `json:"`+key+`"`) && !strings.Contains(src, `json:"`+key+`,`) && !strings.Contains(src, `"`+key+`"`) {
				t.Errorf("docs/loadgen.md says the client validator reads %s; pkg/contract decodes no %q", tok, key)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d fields found in docs/loadgen.md's client validator table: the table's shape changed", n)
	}
}

// waveformFigures are the waveform check's results on a sound run, a
// broken one and one it cannot tell.
func waveformFigures(t *testing.T) []Result {
	audio := []string{"audio"}
	sound := audioRec("ok", loadgen.Success, wchunk(10, 10, 24000, off(0)), wchunk(10, 10, 24000, off(10)))
	broken := audioRec("drop", loadgen.Success, wchunk(10, 10, 24000, off(0)), wchunk(10, 10, 24000, off(13)))
	return []Result{WaveformDir(waveformDir(t, audio, sound)), WaveformDir(waveformDir(t, audio, broken)),
		WaveformDir(waveformDir(t, audio, audioRec("none", loadgen.Success)))}
}

// TestWaveformRulesDocumented: the rules table of docs/validators.md's
// waveform section names exactly WaveformRules, in order, and every rule
// is a word the check's or loadgen's messages carry.
func TestWaveformRulesDocumented(t *testing.T) {
	sec := docSections(t, validatorsDoc)["waveform"]
	var rules []string
	for _, line := range strings.Split(sec, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 5 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		rules = append(rules, strings.Trim(strings.TrimSpace(cols[1]), "`"))
	}
	if !slices.Equal(rules, WaveformRules) {
		t.Fatalf("docs/validators.md waveform rules %v, the code's %v", rules, WaveformRules)
	}
	src := sourceLiterals(t)
	lg, err := os.ReadFile("../loadgen/audio.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if !strings.Contains(src+string(lg), `"`+r+`: `) {
			t.Errorf("rule %s: no message of pkg/contract or pkg/loadgen/audio.go starts with %q", r, r+": ")
		}
	}
}

// TestStopConditionsNameRules: every rule this round added is named in
// docs/stop-conditions.md beside the condition it serves, and in
// docs/validators.md.
func TestStopConditionsNameRules(t *testing.T) {
	stops, err := os.ReadFile("../../docs/stop-conditions.md")
	if err != nil {
		t.Fatal(err)
	}
	vals, err := os.ReadFile(validatorsDoc)
	if err != nil {
		t.Fatal(err)
	}
	rules := append(append(slices.Clone(Layer1WasteRules), ClockLoadRules...), "waste_fields", "stream_matches_full", "compile_cache_key",
		"cleanK_completed", "prefix", "energy.json", "provenance_gb", "sha256:", "shards:")
	// provenance's own fields (the artifact gate's figure, a frozen hash, a
	// model's shards) are no validator's: docs/protocol.md names them
	provenance := map[string]bool{"provenance_gb": true, "sha256:": true, "shards:": true}
	for _, r := range rules {
		if !strings.Contains(string(stops), "`"+r+"`") && !strings.Contains(string(stops), "`"+r+"` ") {
			t.Errorf("docs/stop-conditions.md does not name %s", r)
		}
		if !provenance[r] && !strings.Contains(string(vals), r) {
			t.Errorf("docs/validators.md does not name %s", r)
		}
	}
}
