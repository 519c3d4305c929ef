package contract

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seedRun writes the files of a synthetic run on the seed's timeline
// (60 s warm-up, three 80 s clean segments, two profile windows each
// followed by a 30 s recovery, a drain): the client's result directory and
// the Layer-1 directory, each shaped by the functions given.
type seedRun struct {
	warmupSucceeded int // segments[0].succeeded
	warmupRecords   int // successes in requests/warmup.jsonl; -1: as warmupSucceeded
	// successGap is the gap between two successes at t seconds after t0
	// (0: none then); nil: 0.2 s everywhere after the warm-up
	successGap func(t float64) float64
	// step gives a Layer-1 record's figures at t seconds after t0
	step      func(t float64, r *Layer1Record)
	stepGapNS int64 // between two steps (default 50 ms)
	recoveryS float64
	noProfile bool
	edit      func(res map[string]any)
	sidecar   string // replaces the final sidecar's JSON
}

const seedT0 = int64(1_000_000_000_000)

func ns(s float64) int64 { return seedT0 + int64(s*1e9+0.5) }

// write returns the result and Layer-1 directories.
func (c seedRun) write(t *testing.T) (resultDir, layer1Dir string) {
	t.Helper()
	if c.recoveryS == 0 {
		c.recoveryS = 30
	}
	if c.stepGapNS == 0 {
		c.stepGapNS = 50_000_000
	}
	if c.warmupRecords < 0 {
		c.warmupRecords = c.warmupSucceeded
	}
	dir := t.TempDir()
	resultDir, layer1Dir = filepath.Join(dir, "client"), filepath.Join(dir, "opprof")
	os.MkdirAll(filepath.Join(resultDir, "requests"), 0o755)
	os.MkdirAll(layer1Dir, 0o755)
	type seg struct {
		name, kind string
		a, b       float64
	}
	segs := []seg{{"warmup", "warmup", 0, 60}, {"clean-1", "clean", 60, 140}, {"clean-2", "clean", 140, 220}, {"clean-3", "clean", 220, 300}}
	at := 300.0
	if !c.noProfile {
		for w := 1; w <= 2; w++ {
			segs = append(segs, seg{fmt.Sprintf("profile-%d", w), "profile", at, at + 24}, seg{fmt.Sprintf("recovery-%d", w), "recovery", at + 24, at + 24 + c.recoveryS})
			at += 24 + c.recoveryS
		}
	}
	segs = append(segs, seg{"drain", "drain", at, at + 5})
	gap := c.successGap
	if gap == nil {
		gap = func(float64) float64 { return 0.2 }
	}
	var segments []map[string]any
	var files []string
	row := 0
	for _, s := range segs {
		var lines []string
		add := func(end float64) {
			lines = append(lines, fmt.Sprintf(`{"schema":"warden.loadgen.request/1","row":%d,"segment":%q,"end_mono_ns":%d,"class":"success"}`, row, s.name, ns(end)))
			row++
		}
		succeeded := 0
		if s.kind == "warmup" {
			for i := range c.warmupRecords {
				add(1 + float64(i)*0.5)
			}
			succeeded = c.warmupSucceeded
		} else {
			// successes at s.a + g/2, then every g: a lattice, so that a
			// window of k gaps holds exactly k of them
			for x := s.a; ; {
				g := gap(x)
				if g <= 0 || x+g/2 >= s.b {
					break
				}
				add(x + g/2)
				x += g
			}
			succeeded = len(lines)
		}
		file := "requests/" + s.name + ".jsonl"
		os.WriteFile(filepath.Join(resultDir, file), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		files = append(files, file)
		segments = append(segments, map[string]any{"name": s.name, "kind": s.kind, "start_mono_ns": ns(s.a), "end_mono_ns": ns(s.b),
			"seconds": s.b - s.a, "succeeded": succeeded, "file": file})
	}
	res := map[string]any{"schema": "warden.loadgen.result/1", "clock": map[string]any{"t0_mono_ns": seedT0},
		"timeline": map[string]any{"warmup_s": 60.0, "recovery_s": c.recoveryS},
		"segments": segments, "files": map[string]any{"requests": files}}
	if c.edit != nil {
		c.edit(res)
	}
	b, _ := json.Marshal(res)
	os.WriteFile(filepath.Join(resultDir, "result.json"), b, 0o644)

	var stream []byte
	n := int64(0)
	for sub := seedT0; sub < ns(at+5); sub += c.stepGapNS {
		r := l1Record(n, sub)
		if c.step != nil {
			c.step(float64(sub-seedT0)/1e9, &r)
		}
		line, _ := json.Marshal(r)
		stream = append(append(stream, line...), '\n')
		n++
	}
	stream = fmt.Appendf(stream, `{"footer":true,"encoded_records":%d,"written_records":%d,"dropped_records":0,"last_step_index":%d,"step_count":%d}`+"\n", n, n, n-1, n)
	side := c.sidecar
	if side == "" {
		side = fmt.Sprintf(`{"encoded_records":%d,"written_records":%d,"dropped_records":0,"last_step_index":%d,"wall_time_unix_ns":1,"flush_interval_s":1,"final":true}`, n, n, n-1)
	}
	os.WriteFile(filepath.Join(layer1Dir, "layer1.jsonl"), stream, 0o644)
	os.WriteFile(filepath.Join(layer1Dir, "layer1.jsonl.footer.json"), []byte(side), 0o644)
	return resultDir, layer1Dir
}

// wantResult checks a verdict and, for a fail or error, a part of its
// detail, and the figures given.
func wantResult(t *testing.T, r Result, verdict, detail string, figs map[string]float64) {
	t.Helper()
	if r.Verdict != verdict || !strings.Contains(r.Detail, detail) {
		t.Fatalf("got %s %q, want %s containing %q; figures %v", r.Verdict, r.Detail, verdict, detail, r.Figures)
	}
	for k, v := range figs {
		got, ok := r.Figures[k]
		if !ok || got-v > 1e-9 || v-got > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
}
