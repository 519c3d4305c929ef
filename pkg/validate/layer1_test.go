package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// l1 builds a Layer-1 stream and its sidecar in memory.
type l1 struct {
	steps    []int64
	footer   bool
	partial  bool
	badLine  bool
	sidecar  map[string]any // nil: default from the steps
	noSide   bool
	wall     time.Time
	interval float64
}

func (c l1) build() (stream, sidecar []byte) {
	var b bytes.Buffer
	for _, s := range c.steps {
		fmt.Fprintf(&b, `{"step":%d,"submit_mono_ns":%d,"model_executed":true,"scheduled_tokens":128,"kv_usage":0.25}`+"\n", s, 1000+s)
	}
	if c.badLine {
		b.WriteString("{\"step\": 99, \"x\": }\n")
	}
	n := int64(len(c.steps))
	last := int64(-1)
	if n > 0 {
		last = c.steps[n-1]
	}
	if c.footer {
		fmt.Fprintf(&b, `{"footer":true,"encoded_records":%d,"written_records":%d,"dropped_records":0,"last_step_index":%d,"step_count":%d}`+"\n", n, n, last, n)
	}
	if c.partial {
		b.WriteString(`{"step":12345,"sub`)
	}
	if c.noSide {
		return b.Bytes(), nil
	}
	if c.interval == 0 {
		c.interval = 1
	}
	side := map[string]any{"encoded_records": n, "written_records": n, "dropped_records": 0, "last_step_index": last,
		"wall_time_unix_ns": c.wall.UnixNano(), "flush_interval_s": c.interval, "final": c.footer}
	for k, v := range c.sidecar {
		side[k] = v
	}
	sb, _ := json.Marshal(side)
	return b.Bytes(), sb
}

func steps(lo, hi int64) []int64 {
	var s []int64
	for i := lo; i <= hi; i++ {
		s = append(s, i)
	}
	return s
}

func TestLayer1(t *testing.T) {
	sig := time.Date(2026, 7, 13, 10, 0, 0, 0, time.UTC)
	sigs := []Signal{
		{At: sig.Add(-time.Hour), Role: "client", Target: "pid", Signal: "SIGTERM"},
		{At: sig, Role: "server", Target: "pid", Signal: "SIGTERM"},
		{At: sig.Add(3 * time.Second), Role: "server", Target: "group", Signal: "SIGKILL"},
	}
	fresh := sig.Add(-500 * time.Millisecond)
	cases := []struct {
		name    string
		c       l1
		sigs    []Signal
		noSigs  bool
		verdict string
		detail  string
	}{
		{name: "clean close", c: l1{steps: steps(0, 99), footer: true, wall: sig.Add(2 * time.Second)}, verdict: "pass"},
		{name: "clean close needs no signals", c: l1{steps: steps(0, 99), footer: true, wall: sig}, noSigs: true, verdict: "pass"},
		{name: "hard kill, fresh checkpoint", c: l1{steps: steps(0, 99), wall: fresh}, verdict: "pass"},
		{name: "hard kill, within tolerance", c: l1{steps: steps(0, 99), wall: sig.Add(-1050 * time.Millisecond)}, verdict: "pass", detail: "tolerance"},
		{name: "hard kill, stale checkpoint", c: l1{steps: steps(0, 99), wall: sig.Add(-1200 * time.Millisecond)}, verdict: "fail", detail: "older than the server's signal"},
		{name: "hard kill without signals file", c: l1{steps: steps(0, 99), wall: fresh}, noSigs: true, verdict: "error", detail: "no recorded signal times"},
		{name: "hard kill without a server signal", c: l1{steps: steps(0, 99), wall: fresh}, sigs: sigs[:1], verdict: "error", detail: "API parent"},
		{name: "drops", c: l1{steps: steps(0, 99), footer: true, wall: sig, sidecar: map[string]any{"encoded_records": 102, "dropped_records": 2}}, verdict: "fail", detail: "dropped_records 2"},
		{name: "unbalanced", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"encoded_records": 101}}, verdict: "fail", detail: "unbalanced"},
		{name: "gap", c: l1{steps: append(steps(0, 49), steps(51, 100)...), footer: true, wall: sig}, verdict: "fail", detail: "missing between"},
		{name: "duplicate", c: l1{steps: append(steps(0, 49), steps(49, 98)...), footer: true, wall: sig}, verdict: "fail", detail: "duplicate"},
		{name: "partial line", c: l1{steps: steps(0, 99), wall: fresh}, verdict: "fail"},
		{name: "undecodable line", c: l1{steps: steps(0, 99), badLine: true, wall: fresh}, verdict: "fail", detail: "do not decode"},
		{name: "count differs from sidecar", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"written_records": 90, "encoded_records": 90, "last_step_index": 89}}, verdict: "fail", detail: "written_records 90"},
		{name: "last step differs", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"last_step_index": 98}}, verdict: "fail", detail: "last_step_index 98"},
		{name: "no sidecar", c: l1{steps: steps(0, 99), footer: true, noSide: true}, verdict: "fail", detail: "sidecar missing"},
		{name: "sidecar lacks a field", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"final": nil}}, verdict: "fail", detail: "lacks [final]"},
		{name: "footer but sidecar not final", c: l1{steps: steps(0, 99), footer: true, wall: sig, sidecar: map[string]any{"final": false}}, verdict: "fail", detail: "not final"},
		{name: "final sidecar without footer", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"final": true}}, verdict: "fail", detail: "no in-stream footer"},
		{name: "empty stream", c: l1{wall: fresh}, verdict: "fail", detail: "no data lines"},
	}
	cases[11].c.partial = true
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stream, side := tc.c.build()
			ss := sigs
			if tc.sigs != nil {
				ss = tc.sigs
			}
			r := Layer1(bytes.NewReader(stream), side, ss, !tc.noSigs, DefaultLayer1)
			if r.Verdict != tc.verdict || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s %q, want %s containing %q; figures %v", r.Verdict, r.Detail, tc.verdict, tc.detail, r.Figures)
			}
		})
	}
}

func TestLayer1Figures(t *testing.T) {
	sig := time.Date(2026, 7, 13, 10, 0, 0, 0, time.UTC)
	stream, side := l1{steps: steps(5, 104), wall: sig.Add(-1050 * time.Millisecond)}.build()
	r := Layer1(bytes.NewReader(stream), side, []Signal{{At: sig, Role: "server", Target: "pid"}}, true, DefaultLayer1)
	if r.Verdict != "pass" {
		t.Fatal(r)
	}
	want := map[string]float64{"records": 100, "first_step": 5, "last_step": 104, "written_records": 100, "footer": 0, "checkpoint_age_s": 1.05}
	for k, v := range want {
		if d := r.Figures[k] - v; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", k, r.Figures[k], v)
		}
	}
	if u := r.Figures["tolerance_used_ms"]; u < 49.99 || u > 50.01 {
		t.Errorf("tolerance_used_ms %v", u)
	}
}

func TestLayer1Files(t *testing.T) {
	dir := t.TempDir()
	stream, side := l1{steps: steps(0, 9), footer: true, wall: time.Now()}.build()
	p := filepath.Join(dir, "s.jsonl")
	os.WriteFile(p, stream, 0o644)
	os.WriteFile(p+".footer.json", side, 0o644)
	r := Layer1Files(p, "", "", DefaultLayer1)
	if r.Verdict != "pass" {
		t.Fatal(r)
	}
	if g := r.Gate("layer1", time.Now()); g.Gate != "validator:layer1" || !g.Passed() || g.Figures["records"] != 10 {
		t.Fatalf("gate %+v", g)
	}
	if r := Layer1Files(filepath.Join(dir, "none.jsonl"), "", "", DefaultLayer1); r.Verdict != "error" {
		t.Fatalf("missing stream: %v", r)
	}
	if r := Layer1Files(p, "", filepath.Join(dir, "signals.json"), DefaultLayer1); r.Verdict != "error" {
		t.Fatalf("missing signals file: %v", r)
	}
}
