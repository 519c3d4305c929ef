package contract

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func i64(v int64) *int64 { return &v }

// periodic: records every 20 ms cycling three shapes; annotations on a
// clock 7 s ahead of theirs, for steps 10..17.
func periodic() ([]annot, []L1Step, []int) {
	shapes := [][2]int64{{1024, 0}, {0, 64}, {256, 6}}
	var recs []L1Step
	var cands []int
	for i := range int64(40) {
		sh := shapes[i%3]
		recs = append(recs, L1Step{Step: i64(i), SubmitMonoNS: i64(1_000_000_000 + i*20_000_000), PrefillTokens: i64(sh[0]), DecodeTokens: i64(sh[1])})
		cands = append(cands, int(i))
	}
	var as []annot
	for i := int64(10); i < 18; i++ {
		sh := shapes[i%3]
		as = append(as, annot{name: "a", tsNS: float64(*recs[i].SubmitMonoNS) + 7e9 + 100_000, ctxTok: sh[0], genTok: sh[1]})
	}
	return as, recs, cands
}

func TestJoinWindow(t *testing.T) {
	as, recs, cands := periodic()
	// by relative times alone a periodic engine fits a placement every
	// three steps
	if j := joinWindow(as, recs, cands, 5e6, nil, 0); j.ok() || j.placements < 2 || !strings.Contains(j.problems[0], "placements") {
		t.Fatalf("no clock: %+v", j)
	}
	// the mapped clock leaves one
	exp := -7e9
	j := joinWindow(as, recs, cands, 5e6, &exp, 10e6)
	if !j.ok() || j.placements != 1 || stepList(j.recs, recs) != "10,11,12,13,14,15,16,17" {
		t.Fatalf("mapped clock: %+v", j)
	}
	// a clock mapped a second off finds nothing at the annotations' time
	off := -8e9
	if j := joinWindow(as, recs, cands, 5e6, &off, 10e6); j.ok() || !strings.Contains(j.problems[0], "matches the tokens of no Layer-1 record") {
		t.Fatalf("clock off: %+v", j)
	}
	// tokens that disagree
	bad := append([]annot(nil), as...)
	bad[3].genTok++
	if j := joinWindow(bad, recs, cands, 5e6, &exp, 10e6); j.ok() || !strings.Contains(strings.Join(j.problems, ";"), "annotation 4 (a) disagrees with Layer-1 step 13") {
		t.Fatalf("disagree: %+v", j)
	}
	// requests are compared where the record has them
	recs[12].PrefillReqs = i64(9)
	if j := joinWindow(as, recs, cands, 5e6, &exp, 10e6); j.ok() || !strings.Contains(strings.Join(j.problems, ";"), "disagrees with Layer-1 step 12") {
		t.Fatalf("requests: %+v", j)
	}
	recs[12].PrefillReqs = nil
	// a record that did not execute the model is not compatible
	f := false
	recs[14].ModelExecuted = &f
	if j := joinWindow(as, recs, cands, 5e6, &exp, 10e6); j.ok() {
		t.Fatalf("model_executed false joined: %+v", j)
	}
	recs[14].ModelExecuted = nil
	// no record near an annotation
	far := append([]annot(nil), as...)
	far[7].tsNS += 10e6
	if j := joinWindow(far, recs, cands, 5e6, &exp, 10e6); j.ok() || !strings.Contains(strings.Join(j.problems, ";"), "annotation 8 (a): no Layer-1 record within 5.0 ms") {
		t.Fatalf("none near: %+v", j)
	}
}

func TestReadL1Steps(t *testing.T) {
	good := `{"step":1,"submit_mono_ns":20,"prefill_tokens":0,"decode_tokens":2}
{"step":0,"submit_mono_ns":10,"prefill_tokens":4,"decode_tokens":0,"runtime_mode":"FULL"}
{"footer":true,"encoded_records":2}
`
	steps, err := ReadL1Steps(strings.NewReader(good))
	if err != nil || len(steps) != 2 || *steps[0].Step != 0 || *steps[0].RuntimeMode != "FULL" {
		t.Fatalf("%v %+v", err, steps)
	}
	for name, doc := range map[string]string{
		"no tokens":  `{"step":1,"submit_mono_ns":20}` + "\n",
		"no submit":  `{"step":1,"prefill_tokens":0,"decode_tokens":2}` + "\n",
		"not JSON":   `{"step":1,` + "\n",
		"tokens str": `{"step":1,"submit_mono_ns":20,"prefill_tokens":"0","decode_tokens":2}` + "\n",
	} {
		if _, err := ReadL1Steps(strings.NewReader(doc)); err == nil {
			t.Errorf("%s: read", name)
		}
	}
	if _, err := ReadL1File(filepath.Join(t.TempDir(), "absent.jsonl")); err == nil {
		t.Error("absent stream read")
	}
}

func TestSMD(t *testing.T) {
	if v := SMD([]float64{1, 2, 3}, []float64{1, 2, 3}); v != 0 {
		t.Errorf("same: %v", v)
	}
	if v := SMD([]float64{5, 5}, []float64{5, 5, 5}); v != 0 {
		t.Errorf("equal constants: %v", v)
	}
	if v := SMD([]float64{6, 6}, []float64{5, 5, 5}); v <= 1e300 {
		t.Errorf("different constants: %v", v)
	}
	// (3-2)/pooled sd 1
	if v := SMD([]float64{2, 3, 4}, []float64{1, 2, 3}); v != 1 {
		t.Errorf("shifted: %v", v)
	}
}

func TestLayer2PhaseWindows(t *testing.T) {
	o := realOpts("eager")
	// a phase file with one profile window for two traces
	b, _ := os.ReadFile(o.Phases)
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.Contains(l, `"index":2`) {
			keep = append(keep, l)
		}
	}
	o.Phases = filepath.Join(t.TempDir(), "phases.jsonl")
	os.WriteFile(o.Phases, []byte(strings.Join(keep, "\n")+"\n"), 0o644)
	r := Layer2Dir(filepath.Join("testdata", "h200", "eager"), o)
	if r.Verdict != "fail" || !strings.Contains(r.Detail, "the phase file has 1 profile window(s)") {
		t.Fatalf("%s %q", r.Verdict, r.Detail)
	}
}

// TestReadPhaseLinesFails: a phase file that cannot be read, or holds a
// line that is not a phase line, is an error that says which.
func TestReadPhaseLinesFails(t *testing.T) {
	dir := t.TempDir()
	if _, err := readPhaseLines(filepath.Join(dir, "none.jsonl")); err == nil || !strings.HasPrefix(err.Error(), "phases: ") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "phases.jsonl")
	if err := os.WriteFile(bad, []byte("{\"phase\":\"warmup\",\"t\":\"x\",\"mono_ns\":1}\n{\"phase\":\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readPhaseLines(bad); err == nil || !strings.HasPrefix(err.Error(), "phases line 2: ") {
		t.Errorf("bad line: %v", err)
	}
}
