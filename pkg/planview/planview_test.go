package planview

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"warden/protocols"
)

func plan(t *testing.T, name string) *protocols.Plan {
	t.Helper()
	p, err := protocols.PlanFile(filepath.Join("..", "..", "protocols", name), protocols.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// write renders the plan's table, wide or cut to Width.
func write(t *testing.T, p *protocols.Plan, wide bool) string {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, p, wide); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// checkWidth fails the test for each line of out wider than Width.
func checkWidth(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > Width {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
}

// TestWriteFits: the phase-3 table keeps to Width with every run id whole;
// wide shows every column, however wide. The seed's protocol with its
// co-location check run again: every phase, conditional runs too.
func TestWriteFits(t *testing.T) {
	p := plan(t, filepath.Join("testdata", "opprof-phase3-check-again.yaml"))
	out := write(t, p, false)
	checkWidth(t, out)
	for _, r := range p.Runs {
		if !regexp.MustCompile(`(?m)^\d+ +` + regexp.QuoteMeta(r.ID) + ` `).MatchString(out) {
			t.Errorf("run id %s is not whole in the table", r.ID)
		}
	}
	if strings.Contains(out, "NEEDS") || !strings.Contains(out, "ON: the GPUs the estimate places it on") {
		t.Errorf("narrow table:\n%s", out)
	}
	wide := write(t, p, true)
	if !strings.Contains(wide, "NEEDS") || !strings.Contains(wide, "if gate colocation/eight-way failed") {
		t.Errorf("wide table:\n%s", wide)
	}
	long := false
	for _, line := range strings.Split(wide, "\n") {
		long = long || utf8.RuneCountInString(line) > Width
	}
	if !long {
		t.Error("the wide table was cut to Width")
	}
}

// TestWriteTotals: the lines under the table add up the plan as the
// protocol declares it.
func TestWriteTotals(t *testing.T) {
	p := plan(t, filepath.Join("testdata", "mini.yaml"))
	out := write(t, p, false)
	for _, want := range []string{
		"protocol mini  sha256 " + p.Protocol.SHA256 + "\n",
		"estimate assumes regime two\n",
		"0  A.sat  saturation  1     0   s0    10          always\n",
		"\n4 runs: moderate 2, saturation 2,\n  of which 4 measured, 0 conditional\n",
		"primary cells: 2\n",
		"GPU-hour estimate: 0.011 GPU-hours (+0.000 if conditional runs execute)\n",
		"a wave reserves each run's bounds (budget.reserve: bounds, the default)\n",
		"co-location check (apart from the matrix)  0     0.000    0.000\n",
		"peak wave reservation (charged + reserved + launch): ",
		"sat   std    2     900      30          10       20          -         phase-file  1120     -\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "provenance files hashed") {
		t.Errorf("a plan without provenance files lists them:\n%s", out)
	}
}

func TestWrapLastColumn(t *testing.T) {
	short := "a  b, c"
	if got := wrapLastColumn(short, 20); got != short {
		t.Errorf("a line within the width changed: %q", got)
	}
	noCols := strings.Repeat("x", 30)
	if got := wrapLastColumn(noCols, 20); got != noCols {
		t.Errorf("a line without columns changed: %q", got)
	}
	got := wrapLastColumn("load  layer1, layer2, client, sanity", 21)
	want := "load  layer1, layer2,\n      client, sanity"
	if got != want {
		t.Errorf("wrapped:\n%s\nwant:\n%s", got, want)
	}
	got = wrapLastColumn("load  layer1, layer2, client", 21)
	want = "load  layer1, layer2,\n      client"
	if got != want {
		t.Errorf("wrapped:\n%s\nwant:\n%s", got, want)
	}
}

func TestReserveText(t *testing.T) {
	if got := reserveText("bounds"); !strings.Contains(got, "bounds (budget.reserve: bounds, the default)") {
		t.Errorf("bounds: %q", got)
	}
	if got := reserveText(""); !strings.Contains(got, "expected seconds (budget.reserve: nominal)") {
		t.Errorf("default: %q", got)
	}
}

func TestCounts(t *testing.T) {
	if got := joinInts([]int{0, 3, 7}); got != "0,3,7" {
		t.Errorf("joinInts: %q", got)
	}
	ps := []protocols.ProvenanceInfo{{Private: true}, {}, {Private: true}}
	if got := countPrivate(ps); got != 2 {
		t.Errorf("countPrivate: %d, want 2", got)
	}
}

// TestWriteSlurm: a plan with the Slurm executor says what it asks Slurm
// for and its wall time on the protocol's nodes, within Width; a local
// plan says nothing of Slurm.
func TestWriteSlurm(t *testing.T) {
	p := plan(t, "omni-ab-slurm.yaml")
	out := write(t, p, false)
	for _, want := range []string{"120 run(s), each a step:", "--gres=gpu:2", "--cpus-per-task=32", "--exclusive", "--partition=gpu",
		"expected wall time on 2 node(s):", "up to 2 step(s) at once, each on a node of its own"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	checkWidth(t, out)
	if local := write(t, plan(t, "omni-ab.yaml"), false); strings.Contains(local, "Slurm") {
		t.Errorf("a local plan speaks of Slurm:\n%s", local)
	}
}

// TestWriteCapacity: a capacity phase is shown as its bounded worst case,
// with its cost and its SLO.
func TestWriteCapacity(t *testing.T) {
	p := plan(t, filepath.Join("testdata", "capacity.yaml"))
	out := write(t, p, false)
	for _, want := range []string{
		"capacity search cap: rate 1..17 requests/s to a resolution of 1\n",
		"  at most 9 points per cell: 5 of the bisection, follow-ups at 0.5, 0.8, 0.95 of the found rate, overload at 1.2x\n",
		"  worst case: 18 runs over 2 cells, 0.050 GPU-hours nominal, ",
		`  SLO: {"success_min":0.999}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// TestWriteFrozenHashes: the phase-3 plan names the P10 source's frozen
// SHA-256 with where the protocol freezes it, and the model's shards; its
// runs list the prefix rule (the prefix-none cells), the clock/load check
// and the records among their validators, beside the manifest hash.
func TestWriteFrozenHashes(t *testing.T) {
	p := plan(t, "opprof-phase3.yaml")
	out := write(t, p, true)
	for _, want := range []string{
		"  frozen hash (plan with its inputs, start and amend refuse another file):\n    sha256 f539f38eb0ee0f750e3c23ff47df6eed3faf723a25f1444d55665a85871750b9\n" +
			"    /home/admin/cpfs/wjh/opprof-phase3-private/trace_windows/chat_w20260311_1000.jsonl\n    frozen at ../../protocols/opprof-phase3.yaml:",
		"  model shards (hashed once at start, re-checked by size and modification time, never copied):\n    /home/admin/cpfs/wjh/models/Qwen/Qwen3-30B-A3B/*.safetensors\n",
		"manifest-hash, layer1, layer2, profile-windows, client, sanity, warmup, recovery, prefix, clock-load, records\n",
		"manifest-hash, layer1, layer2, profile-windows, client, sanity, warmup, recovery, clock-load, records\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
