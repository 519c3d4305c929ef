package protocols

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// planPhase3 plans the seed's protocol with its co-location check run
// again (testdata/opprof-phase3-check-again.yaml): every phase of the seed.
func planPhase3(t testing.TB) *Plan {
	t.Helper()
	return planFile(t, "testdata/opprof-phase3-check-again.yaml")
}

// planShippedPhase3 plans protocols/opprof-phase3.yaml as shipped: E-a's
// verdict taken as an input.
func planShippedPhase3(t testing.TB) *Plan {
	t.Helper()
	return planFile(t, "opprof-phase3.yaml")
}

func planFile(t testing.TB, path string) *Plan {
	t.Helper()
	p, err := PlanFile(path, Options{})
	if err != nil {
		t.Fatalf("plan %s: %v", path, err)
	}
	return p
}

// TestPhase3Order checks the plan against the seed protocol's rules,
// computed here independently of the planner: the 24 cells of the sparse
// design sorted by SHA256("20260713:" + pattern + ":" + config), each
// saturation directly followed by its moderate.
func TestPhase3Order(t *testing.T) {
	p := planPhase3(t)

	var cells [][2]string
	for _, pat := range []string{"P01", "P02", "P03", "P04", "P05", "P06", "P07", "P08", "P09", "P10", "P11"} {
		cells = append(cells, [2]string{pat, "C00"})
	}
	for _, pat := range []string{"P01", "P03", "P06", "P10"} {
		for _, cfg := range []string{"C10", "C01", "C11"} {
			cells = append(cells, [2]string{pat, cfg})
		}
	}
	cells = append(cells, [2]string{"P10", "C00-TP2"})
	key := func(c [2]string) string {
		s := sha256.Sum256([]byte("20260713:" + c[0] + ":" + c[1]))
		return hex.EncodeToString(s[:])
	}
	sort.Slice(cells, func(i, j int) bool { return key(cells[i]) < key(cells[j]) })
	var want []string
	for _, c := range cells {
		want = append(want, c[0]+"/"+c[1]+" saturation", c[0]+"/"+c[1]+" moderate")
	}

	var got []string
	for _, r := range p.Runs {
		if r.Phase == "matrix" {
			got = append(got, r.Cell+" "+r.Kind)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("matrix order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(cells) != 24 || p.Totals.PrimaryCells != 24 {
		t.Fatalf("cells = %d, plan primary cells = %d; want 24", len(cells), p.Totals.PrimaryCells)
	}
	if p.Totals.ByKind["saturation"] != 24 || p.Totals.ByKind["moderate"] != 24 {
		t.Fatalf("primary runs by kind = %v, want 24 saturation and 24 moderate", p.Totals.ByKind)
	}
	if p.Totals.ByKind["burn-in"] != 5 || p.Totals.ByKind["confirmation"] != 4 {
		t.Fatalf("by kind = %v, want 5 burn-ins and 4 confirmations", p.Totals.ByKind)
	}
	if p.Totals.Measured != 52 {
		t.Fatalf("measured runs = %d, want 52 (48 primary + 4 confirmations)", p.Totals.Measured)
	}

	// every moderate needs its own cell's saturation, which directly precedes it
	for i, r := range p.Runs {
		if r.Kind == "moderate" && r.Phase == "matrix" {
			prev := p.Runs[i-1]
			if prev.Kind != "saturation" || prev.Cell != r.Cell || len(r.Needs) != 1 || r.Needs[0] != prev.ID || r.NeedVars["NEED_SATURATION_DIR"] != prev.ID {
				t.Fatalf("%s needs %v; previous run %s", r.ID, r.Needs, prev.ID)
			}
		}
	}

	// phases in order: co-location, burn-ins (one per config), matrix, confirmations
	var phases []string
	for _, r := range p.Runs {
		if len(phases) == 0 || phases[len(phases)-1] != r.Phase {
			phases = append(phases, r.Phase)
		}
	}
	if strings.Join(phases, ",") != "colocation,burn-in,matrix,confirmation" {
		t.Fatalf("phase order %v", phases)
	}
	var burn, conf []string
	for _, r := range p.Runs {
		switch r.Kind {
		case "burn-in":
			burn = append(burn, r.Axes["config"])
			if r.Axes["pattern"] != "P06" {
				t.Fatalf("burn-in %s is not P06", r.ID)
			}
		case "confirmation":
			conf = append(conf, r.Cell)
			if len(r.Needs) != 1 || r.Needs[0] != r.Axes["pattern"]+".C00.saturation" {
				t.Fatalf("confirmation %s needs %v", r.ID, r.Needs)
			}
		}
	}
	if strings.Join(burn, ",") != "C00,C10,C01,C11,C00-TP2" {
		t.Fatalf("burn-ins %v", burn)
	}
	if strings.Join(conf, ",") != "P10/C00,P06/C00,P03/C00,P01/C00" {
		t.Fatalf("confirmations %v", conf)
	}

	// budget: A-P3-4 counts E-a's 3.964 in the cap whether or not the
	// check runs again; run again, it costs 2.6 more and the conservative
	// reservations no longer fit (the shipped protocol takes E-a's verdict
	// instead: TestPhase3PriorVerdict)
	tot := p.Totals
	if tot.BudgetCapGPUHours != 16.0 || tot.BudgetConsumedGPUHours != 3.964 {
		t.Fatalf("budget cap %v consumed %v", tot.BudgetCapGPUHours, tot.BudgetConsumedGPUHours)
	}
	// A-P3-4: conservative reservations; A-P3-1: the co-location check's
	// cost apart
	if tot.Reserve != "bounds" || tot.ReservationFits || tot.FirstRefused == nil || tot.FirstRefused.Run != "P10.C00-TP2.saturation" ||
		tot.FirstRefused.TotalGPUH <= 16 || tot.FirstRefused.Budget != budgetLine(t, "testdata/opprof-phase3-check-again.yaml") ||
		tot.Colocation.Runs != 11 || tot.Colocation.NominalGPUHours <= 0 || tot.Colocation.ConservativeGPUHours <= tot.Colocation.NominalGPUHours ||
		math.Abs(tot.Colocation.NominalGPUHours+tot.Matrix.NominalGPUHours-tot.GPUHoursEstimate) > 1e-9 || tot.ConservativeGPUHours <= tot.GPUHoursEstimate {
		t.Fatalf("totals %+v, first refused %+v", tot, tot.FirstRefused)
	}
}

// The shipped protocol takes the co-location check's verdict from E-a
// (A-P3-4): no co-location run; the gates read from the verdict file at
// start (a plan without its inputs says so); E-a's 3.964 consumed; every
// wave's conservative reservation fits the 16.0.
func TestPhase3PriorVerdict(t *testing.T) {
	p := planShippedPhase3(t)
	tot := p.Totals
	if tot.ByPhase["colocation"] != 0 || tot.Colocation.Runs != 0 || tot.BudgetConsumedGPUHours != 3.964 || !tot.ReservationFits ||
		tot.FirstRefused != nil || tot.PeakReservationGPUHours > 16 {
		t.Fatalf("totals %+v", tot)
	}
	if ph := p.Phases[0]; ph.Name != "colocation" || ph.Runs != 0 || ph.Prior == nil || ph.Prior.File != "phase3/E-a/colocation-verdict.json" || ph.Prior.Read {
		t.Fatalf("phase %+v", p.Phases[0])
	}
	for _, g := range p.Gates {
		if g.Prior != "phase3/E-a/colocation-verdict.json" || g.Solo != "" || g.Target != "" {
			t.Fatalf("gate %+v", g)
		}
	}
	if !slices.ContainsFunc(p.Provenance, func(pi ProvenanceInfo) bool {
		return pi.Path == "phase3/E-a/colocation-verdict.json" && pi.Role == "verdict"
	}) {
		t.Fatalf("provenance %+v", p.Provenance)
	}
	if len(p.InputsUnchecked) != 1 || !strings.Contains(p.InputsUnchecked[0], "prior verdict phase3/E-a/colocation-verdict.json: read and checked at start") {
		t.Fatalf("inputs unchecked %v", p.InputsUnchecked)
	}
}

// Every phase-3 client drains as long as its class's watchdog (A-P3-3 and
// A-P3-5: the client never cancels; the watchdog ends a hang).
func TestPhase3DrainBounds(t *testing.T) {
	p := planPhase3(t)
	want := map[string]float64{"standard": 240, "burst-512": 480, "p10": 1200}
	for _, r := range p.Runs {
		if r.ClientDrainS == nil || *r.ClientDrainS != r.WatchdogS || r.WatchdogS != want[r.Class] || *r.ClientDrainS < r.DrainS {
			t.Errorf("run %s class %s: client drain bound %v, allowance %v, watchdog %v", r.ID, r.Class, r.ClientDrainS, r.DrainS, r.WatchdogS)
		}
	}
}

func TestPhase3Colocation(t *testing.T) {
	p := planPhase3(t)
	bg := map[string][]string{}
	for _, r := range p.Runs {
		if r.Kind == "background" {
			bg[r.Regime] = append(bg[r.Regime], r.Axes["pattern"]+"@"+r.Slot)
		}
	}
	if got := strings.Join(bg["eight-way"], ","); got != "P01@gpu1,P02@gpu2,P03@gpu3,P04@gpu4,P06@gpu5,P07@gpu6,P08@gpu7" {
		t.Fatalf("eight-way backgrounds %s", got)
	}
	if got := strings.Join(bg["four-way"], ","); got != "P01@gpu1,P03@gpu2,P06@gpu3" {
		t.Fatalf("four-way backgrounds %s", got)
	}
	target, ok := p.RunByID("coloc.eight-way.P05.C00.moderate")
	if !ok || target.Slot != "gpu0" || len(target.Backgrounds) != 7 || target.Needs[0] != "coloc.eight-way.P05.C00.saturation" {
		t.Fatalf("eight-way target %+v", target)
	}
	four, _ := p.RunByID("coloc.four-way.P05.C00.saturation")
	if four.Condition != "gate colocation/eight-way failed" {
		t.Fatalf("four-way check condition %q", four.Condition)
	}
	if len(p.Gates) != 2 || p.Gates[0].Solo != "coloc.solo.P05.C00.moderate" || p.Gates[0].ThroughputTolerance != 0.03 {
		t.Fatalf("gates %+v", p.Gates)
	}
	// drain classes (A-P3-3, A-P3-5)
	for _, r := range p.Runs {
		want := 120.0
		switch r.Axes["pattern"] {
		case "P10":
			want = 600
		case "P04", "P06", "P07", "P08", "P11":
			want = 240
		}
		if r.DrainS != want {
			t.Fatalf("%s drain allowance %v, want %v", r.ID, r.DrainS, want)
		}
	}
	// TP2 runs take two GPUs
	tp2, _ := p.RunByID("P10.C00-TP2.saturation")
	if tp2.GPUs != 2 || len(tp2.PlannedGPUs) != 2 {
		t.Fatalf("TP2 run gpus %d planned %v", tp2.GPUs, tp2.PlannedGPUs)
	}
	// C01's server gets --max-num-batched-tokens 2048 and expects it in the
	// configuration it reports and in its INFO log line
	c01, _ := p.RunByID("P01.C01.saturation")
	args := strings.Join(c01.Server.Command.Argv, " ")
	if !strings.HasSuffix(args, "--max-num-batched-tokens 2048") || !strings.Contains(args, "--port ${PORT}") {
		t.Fatalf("C01 server command %s", args)
	}
	found, logged := false, false
	for _, e := range c01.Server.Expect {
		found = found || (e.Name == "max_num_batched_tokens" && e.Path == "vllm_config.scheduler_config.max_num_batched_tokens" && string(e.Equals) == "2048")
		logged = logged || (e.Pattern != "" && strings.Contains(e.Pattern, "max_num_batched_tokens=2048"))
	}
	if c01.Server.ConfigEndpoint != "/server_info?config_format=json" || c01.Server.Env["VLLM_SERVER_DEV_MODE"] != "1" {
		t.Errorf("C01 server: config endpoint %q, VLLM_SERVER_DEV_MODE %q", c01.Server.ConfigEndpoint, c01.Server.Env["VLLM_SERVER_DEV_MODE"])
	}
	if !found || !logged {
		t.Fatalf("C01 expectations %+v", c01.Server.Expect)
	}
}

func TestPlanJSONFields(t *testing.T) {
	p := planShippedPhase3(t)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Schema   int `json:"schema"`
		Protocol struct {
			Name   string `json:"name"`
			SHA256 string `json:"sha256"`
		} `json:"protocol"`
		Runs []struct {
			ID        string   `json:"id"`
			Phase     string   `json:"phase"`
			Kind      string   `json:"kind"`
			Needs     []string `json:"needs"`
			GPUs      *int     `json:"gpus"`
			ExpectedS *float64 `json:"expected_s"`
		} `json:"runs"`
		Totals struct {
			ByKind   map[string]int `json:"by_kind"`
			Estimate *float64       `json:"gpu_hours_estimate"`
			Cap      *float64       `json:"budget_cap_gpu_hours"`
			Consumed *float64       `json:"budget_consumed_gpu_hours"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Schema != PlanSchema || m.Protocol.Name != "opprof-phase3" || len(m.Protocol.SHA256) != 64 {
		t.Fatalf("header %+v", m)
	}
	for _, r := range m.Runs {
		if r.ID == "" || r.Phase == "" || r.Kind == "" || r.Needs == nil && r.Kind == "moderate" || r.GPUs == nil || r.ExpectedS == nil {
			t.Fatalf("run missing fields: %+v", r)
		}
	}
	if m.Totals.Estimate == nil || *m.Totals.Cap != 16 || *m.Totals.Consumed != 3.964 || m.Totals.ByKind["saturation"] != 24 {
		t.Fatalf("totals %+v", m.Totals)
	}
}

// The plan is reproducible byte for byte.
func TestPlanDeterministic(t *testing.T) {
	a, _ := json.Marshal(planPhase3(t))
	b, _ := json.Marshal(planPhase3(t))
	if string(a) != string(b) {
		t.Fatal("two plans of the same protocol differ")
	}
}

func TestCanonicalHash(t *testing.T) {
	base := "warden: 1\nname: x\nbudget: {cap_gpu_hours: 16.0, consumed_gpu_hours: 3.964}\nlist: [a, b]\n"
	same := []string{
		"# a comment\nname: x   # trailing\nwarden: 1\nbudget:\n  consumed_gpu_hours: 3.964\n  cap_gpu_hours: 16\nlist:\n  - a\n  - b\n",
		"warden: 1\nname: \"x\"\nbudget: {consumed_gpu_hours: 3.9640, cap_gpu_hours: 1.6e1}\nlist: [a, b]\n",
	}
	different := []string{
		"warden: 1\nname: x\nbudget: {cap_gpu_hours: 16.0, consumed_gpu_hours: 3.965}\nlist: [a, b]\n",
		"warden: 1\nname: x\nbudget: {cap_gpu_hours: 16.0, consumed_gpu_hours: 3.964}\nlist: [b, a]\n",
		"warden: 1\nname: \"1\"\nbudget: {cap_gpu_hours: 16.0, consumed_gpu_hours: 3.964}\nlist: [a, b]\n",
	}
	h0, err := SHA256([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range same {
		if h, _ := SHA256([]byte(s)); h != h0 {
			t.Errorf("hash changed with comments, layout or key order:\n%s", s)
		}
	}
	for _, s := range different {
		if h, _ := SHA256([]byte(s)); h == h0 {
			t.Errorf("hash did not change with content:\n%s", s)
		}
	}
	// a string "1" and a number 1 are different
	a, _ := SHA256([]byte("v: 1\n"))
	b, _ := SHA256([]byte("v: \"1\"\n"))
	if a == b {
		t.Error("string and number hash alike")
	}
}

func TestExpandLaunchVars(t *testing.T) {
	p := planPhase3(t)
	r, _ := p.RunByID("P05.C00.moderate")
	vars := map[string]string{"PORT": "8004", "ATTEMPT_DIR": "/c/runs/P05.C00.moderate/a1", "NEED_SATURATION_DIR": "/c/runs/P05.C00.saturation/a2"}
	var out []string
	for _, a := range r.Client.Argv {
		s, err := Expand(a, vars)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	got := strings.Join(out, " ")
	if !strings.HasPrefix(got, "bin/loadgen run --manifest ") {
		t.Fatalf("client command %q: want Warden's bin/loadgen run", got)
	}
	for _, want := range []string{"--load-point moderate", "--rate-fraction 0.60", "--base-url http://127.0.0.1:8004", "--saturation-result /c/runs/P05.C00.saturation/a2/client/result.json", "--manifest /home/admin/cpfs/wjh/opprof-phase3-private/manifests/P05.jsonl", "--result-dir /c/runs/P05.C00.moderate/a1/client"} {
		if !strings.Contains(got, want) {
			t.Fatalf("client command %q lacks %q", got, want)
		}
	}
	if _, err := Expand("${PORT}", map[string]string{}); err == nil {
		t.Fatal("expanding an absent variable succeeded")
	}
	// $$ survives planning as a literal $
	if s, err := Expand("a$$b", nil); err != nil || s != "a$b" {
		t.Fatalf("Expand(a$$b) = %q, %v", s, err)
	}
}

func TestShippedProtocolsPlan(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") {
			n++
			if _, err := PlanFile(e.Name(), Options{}); err != nil {
				t.Errorf("%s: %v", e.Name(), err)
			}
		}
	}
	if n < 1 {
		t.Fatal("no protocols found")
	}
}

func BenchmarkPlanPhase3(b *testing.B) {
	data, err := os.ReadFile("opprof-phase3.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PlanBytes("opprof-phase3.yaml", data, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzPlan(f *testing.F) {
	for _, name := range []string{"opprof-phase3.yaml", "testdata/mini.yaml"} {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("warden: 1\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := PlanBytes("fuzz.yaml", data, Options{})
		if err == nil {
			if _, err := json.Marshal(p); err != nil {
				t.Fatalf("valid plan does not marshal: %v", err)
			}
			return
		}
		if err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}

// The phase-3 protocol names the shipped validators on its measured runs,
// and its co-location check samples one profile window per target
// (A-P3-1 item 4) while the matrix keeps two.
func TestPhase3Validators(t *testing.T) {
	p := planPhase3(t)
	names := func(r *Run) []string {
		var out []string
		for _, v := range r.Validators {
			out = append(out, v.Name)
		}
		return out
	}
	for id, want := range map[string]string{
		"P05.C00.saturation": "layer1 layer2 profile-windows client sanity warmup recovery prefix clock-load records",
		"P05.C00.moderate":   "layer1 layer2 profile-windows client-moderate sanity warmup recovery prefix clock-load records",
		// the prefix rule is the "prefix none" cells': not P08 (high
		// sharing) nor P10 (natural prefix)
		"P08.C00.saturation": "layer1 layer2 profile-windows client sanity warmup recovery clock-load records",
		"P10.C01.moderate":   "layer1 layer2 profile-windows client-moderate sanity warmup recovery clock-load records",
		"P11.C00.saturation": "layer1 layer2 profile-windows client sanity warmup recovery prefix clock-load records",
		"P03.C00.confirm":    "layer1 client-moderate sanity warmup prefix clock-load records",
		"P10.C00.confirm":    "layer1 client-moderate sanity warmup clock-load records",
		// every run has a clock/load verdict (A-P3-2) and its records, the burn-ins too
		"burnin.C00": "burnin-window clock-load records power",
		// the co-location check runs before the burn-ins: recorded, with no
		// burn-in key to share
		"coloc.solo.P05.C00.moderate": "layer1 layer2 profile-windows client-moderate sanity warmup recovery prefix clock-load records-colocation",
	} {
		r, ok := p.RunByID(id)
		if !ok {
			t.Errorf("no run %s", id)
			continue
		}
		if got := strings.Join(names(r), " "); got != want {
			t.Errorf("%s validators %q, want %q", id, got, want)
		}
	}
	for _, r := range p.Runs {
		if i := slices.IndexFunc(r.Validators, func(v ValidatorSpec) bool { return v.Name == "prefix" }); i >= 0 {
			if argv := strings.Join(r.Validators[i].Command.Argv, " "); !strings.Contains(argv, "--manifest /home/admin/cpfs/wjh/opprof-phase3-private/manifests/"+r.Axes["pattern"]+".jsonl") ||
				!strings.Contains(argv, "--max-common-prefix 16") || !strings.Contains(argv, "--max-hit-ratio 0.01") {
				t.Errorf("%s: prefix validator %q", r.ID, argv)
			}
		}
	}
	windows := func(id string) string {
		r, ok := p.RunByID(id)
		if !ok {
			t.Fatalf("no run %s", id)
		}
		for i, a := range r.Client.Argv {
			if a == "--num-profile-windows" {
				return r.Client.Argv[i+1]
			}
		}
		return ""
	}
	if windows("coloc.solo.P05.C00.moderate") != "1" || windows("P05.C00.moderate") != "2" || p.Gates[0].ProfileWindows != 1 {
		t.Errorf("profile windows: co-location %s, matrix %s, gate %d", windows("coloc.solo.P05.C00.moderate"), windows("P05.C00.moderate"), p.Gates[0].ProfileWindows)
	}
}

// The executor's defaults: local without a section; a Slurm section gets
// the queue bound and one node unless it says otherwise.
func TestExecutorDefaults(t *testing.T) {
	mini := readMini(t)
	p, err := PlanBytes("mini.yaml", []byte(mini), Options{})
	if err != nil || p.Executor.Kind != "local" || p.Executor.Slurm != nil {
		t.Fatalf("no executor section: %+v, %v", p.Executor, err)
	}
	y := strings.Replace(mini, "budget: {cap_gpu_hours: 1.0}", "budget: {cap_gpu_hours: 1.0}\nexecutor: {kind: slurm, slurm: {partition: gpu, exclusive: true, nodes: 2}}", 1)
	p, err = PlanBytes("mini.yaml", []byte(y), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := p.Executor.Slurm; p.Executor.Kind != "slurm" || s == nil || s.Partition != "gpu" || !s.Exclusive || s.Nodes != 2 || s.QueueTimeoutS != DefaultQueueTimeoutS {
		t.Errorf("slurm executor %+v %+v", p.Executor, p.Executor.Slurm)
	}
}

// budgetLine is where file's budget cap is written, file:line:col, as a
// refused wave cites it.
func budgetLine(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		if c := strings.Index(line, "cap_gpu_hours:"); c >= 0 && strings.HasPrefix(line, "  cap_gpu_hours:") {
			return fmt.Sprintf("%s:%d:%d", file, i+1, c+len("cap_gpu_hours:")+2)
		}
	}
	t.Fatalf("%s has no budget cap", file)
	return ""
}

// Every run of a shipped protocol for real GPUs has a clock and load
// verdict: seed 002's A-P3-2 ("clock/load" before complete) for phase 3
// and its amendments, seed 000 §6 (clocks and background load checked for
// each run) for the Omni comparison, and the scaled-down phase 3 on the
// H200.
func TestClockLoadOnEveryRun(t *testing.T) {
	for _, file := range []string{"opprof-phase3.yaml", "opprof-phase3.A-P3-8.yaml", "opprof-phase3.A-P3-9.yaml",
		"omni-ab.yaml", "omni-ab-slurm.yaml", "gpu-phase3.yaml"} {
		p := planFile(t, file)
		for i := range p.Runs {
			r := &p.Runs[i]
			if !slices.ContainsFunc(r.Validators, func(v ValidatorSpec) bool {
				return v.Name == "clock-load" && slices.Contains(v.Command.Argv, "clock-load")
			}) {
				t.Errorf("%s: run %s has no clock-load validator", file, r.ID)
			}
		}
	}
}

// Seed 000 §9's energy per request needs the idle baseline read where it
// means idle, and a negative one is seed 002's sanity red flag: every
// shipped protocol for real GPUs settles before its idle read, and every
// measured run's sanity validator reads the run's energy.json.
func TestEnergyJudgedOnEveryMeasuredRun(t *testing.T) {
	for _, file := range []string{"opprof-phase3.yaml", "opprof-phase3.A-P3-8.yaml", "opprof-phase3.A-P3-9.yaml",
		"omni-ab.yaml", "omni-ab-slurm.yaml", "gpu-phase3.yaml"} {
		p := planFile(t, file)
		if p.IdleSettleS <= 0 {
			t.Errorf("%s: idle_settle_s %v: the idle power would be read straight after the previous run", file, p.IdleSettleS)
		}
		for i := range p.Runs {
			r := &p.Runs[i]
			if !r.Measured || r.Kind == "background" {
				continue
			}
			if !slices.ContainsFunc(r.Validators, func(v ValidatorSpec) bool {
				return v.Name == "sanity" && slices.Contains(v.Command.Argv, "${ATTEMPT_DIR}/energy.json")
			}) {
				t.Errorf("%s: measured run %s (%s) has no sanity validator reading its energy.json", file, r.ID, r.Kind)
			}
		}
	}
}
