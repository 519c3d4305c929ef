package protocols

import (
	"strings"
	"testing"
)

// The A/B protocol says what the methodology asks: systems alternate in a
// seeded order, every configuration has three process-level repeats, an
// A/A pair comes first, and cold start is a phase of its own.
func TestOmniAB(t *testing.T) {
	p, err := PlanFile("omni-ab.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	repeats := map[string]int{}
	prev := map[string]string{}
	for _, r := range p.Runs {
		switch r.Phase {
		case "aa":
			if r.Cell != "vllm-omni/c8" {
				t.Fatalf("A/A run %s on %s", r.ID, r.Cell)
			}
		case "cold-start", "closed-loop", "open-loop":
			if last, ok := prev[r.Phase]; ok && last == r.Axes["system"] {
				t.Fatalf("%s: two %s runs in a row at %s", r.Phase, last, r.ID)
			}
			prev[r.Phase] = r.Axes["system"]
			repeats[r.Phase+"/"+r.Cell]++
		}
		if r.GPUs != 2 {
			t.Fatalf("%s uses %d GPUs, want the same 2 for both systems", r.ID, r.GPUs)
		}
	}
	if p.Totals.ByKind["aa"] != 2 || p.Totals.ByKind["cold-start"] != 6 || p.Totals.ByKind["closed-loop"] != 36 || p.Totals.ByKind["open-loop"] != 30 {
		t.Fatalf("by kind %v", p.Totals.ByKind)
	}
	for cfg, n := range repeats {
		if n != 3 {
			t.Fatalf("%s has %d repeats, want 3", cfg, n)
		}
	}
	// the seeded order is not simply the listed one
	listed := true
	for _, r := range p.Runs {
		if r.Phase == "closed-loop" {
			listed = r.Cell == "vllm-omni/c1" && r.Repeat == 1
			break
		}
	}
	if listed {
		t.Fatal("closed-loop order starts with the first listed cell; the shuffle did nothing")
	}
}

// The same comparison on two Slurm nodes: the same runs, each an exclusive
// step, two at a time, so the expected wall time is about half the
// single-host one and the GPU-hours the same.
func TestOmniABOnSlurm(t *testing.T) {
	one, err := PlanFile("omni-ab.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	two, err := PlanFile("omni-ab-slurm.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := two.Executor.Slurm; two.Executor.Kind != "slurm" || s == nil || !s.Exclusive || s.Nodes != 2 {
		t.Fatalf("executor %+v", two.Executor)
	}
	if len(one.Runs) != len(two.Runs) {
		t.Fatalf("%d runs on Slurm, %d on one host", len(two.Runs), len(one.Runs))
	}
	ratio := two.Totals.ExpectedWallS / one.Totals.ExpectedWallS
	if ratio < 0.45 || ratio > 0.7 {
		t.Errorf("wall time on two nodes %.0f s, on one host %.0f s (ratio %.2f): want about half", two.Totals.ExpectedWallS, one.Totals.ExpectedWallS, ratio)
	}
	if d := two.Totals.GPUHoursEstimate - one.Totals.GPUHoursEstimate; d > 1e-9 || d < -1e-9 {
		t.Errorf("GPU-hours %.3f on Slurm, %.3f on one host", two.Totals.GPUHoursEstimate, one.Totals.GPUHoursEstimate)
	}
}

// The plan's Slurm requests: every omni-ab-slurm run asks for one node's
// two GPUs and 32 CPUs; the phase-3 protocol's co-location blocks ask for
// one allocation each.
func TestSlurmRequests(t *testing.T) {
	p, err := PlanFile("omni-ab-slurm.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	reqs := p.SlurmRequests
	if len(reqs) != 1 || reqs[0] != (SlurmRequest{GPUs: 2, CPUs: 32, Runs: len(p.Runs)}) {
		t.Errorf("omni-ab-slurm requests %+v, want one shape for its %d runs", reqs, len(p.Runs))
	}
	p3, err := PlanFile("testdata/opprof-phase3-check-again.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	allocs, runs := 0, 0
	for _, r := range p3.slurmRequests() {
		if r.Allocation {
			allocs += r.Runs
		} else {
			runs += r.Runs
		}
	}
	blocks := map[int]bool{}
	for _, r := range p3.Runs {
		if r.Kind == "background" {
			blocks[r.Unit] = true
		}
	}
	if runs != len(p3.Runs) || allocs != len(blocks) || allocs == 0 {
		t.Errorf("phase 3: %d step requests for %d runs, %d allocations for %d co-location blocks with backgrounds", runs, len(p3.Runs), allocs, len(blocks))
	}
}

// The quality gate before ranking (seed 000 §4, §14 step 4): every run of
// both A/B protocols is judged by the two quality evaluators, every
// loadgen run also by the waveform validator, and the loadgen runs stream
// audio; the evaluator, its locked data and models are hashed in the
// provenance and its seed is passed to it.
func TestOmniABQualityGates(t *testing.T) {
	for _, file := range []string{"omni-ab.yaml", "omni-ab-slurm.yaml"} {
		p, err := PlanFile(file, Options{})
		if err != nil {
			t.Fatal(err)
		}
		roles := map[string]string{}
		for _, e := range p.Provenance {
			roles[e.Path] = e.Role
		}
		for path, role := range map[string]string{"eval/quality_eval.py": "evaluator", "eval/models/SHA256SUMS": "evaluator",
			"data/asr-correctness.jsonl": "data", "data/tts-correctness.jsonl": "data", "eval/quality_gates.yaml": "config", "bin/controller": "helper"} {
			if roles[path] != role {
				t.Errorf("%s: provenance %s has role %q, want %q", file, path, roles[path], role)
			}
		}
		// §6's clock and load check on every run
		want := map[string]string{"cold": "clock-load sanity quality-asr quality-tts"}
		for _, l := range []string{"closed", "open", "capacity", "stress-slow", "stress-pause", "stress-burst", "stress-cancel"} {
			want[l] = "waveform clock-load sanity quality-asr quality-tts"
		}
		for _, r := range p.Runs {
			var names []string
			for _, v := range r.Validators {
				names = append(names, v.Name)
				if strings.HasPrefix(v.Name, "quality-") {
					argv := strings.Join(v.Command.Argv, " ")
					for _, arg := range []string{"--seed 20261130", "--data data/", "--models eval/models/SHA256SUMS", "--gates eval/quality_gates.yaml", "--attempt-dir "} {
						if !strings.Contains(argv, arg) {
							t.Fatalf("%s: %s validator %s lacks %q: %s", file, r.ID, v.Name, arg, argv)
						}
					}
				}
			}
			if got := strings.Join(names, " "); got != want[r.Load] {
				t.Fatalf("%s: %s (load %s) validators %q, want %q", file, r.ID, r.Load, got, want[r.Load])
			}
			audio := strings.Contains(strings.Join(r.Client.Argv, " "), "--modalities text,audio")
			if audio != (r.Load != "cold") {
				t.Fatalf("%s: %s streams audio %v: %v", file, r.ID, audio, r.Client.Argv)
			}
			// §4: the quality set's outputs kept privately, outside the
			// campaign, where the evaluators read them
			out := "/srv/omni-bench-private/quality-outputs/" + r.ID + ".a${ATTEMPT}"
			if audio && !strings.Contains(strings.Join(r.Client.Argv, " "), "--quality-rows 16 --quality-dir "+out) {
				t.Fatalf("%s: %s keeps no quality outputs: %v", file, r.ID, r.Client.Argv)
			}
			for _, v := range r.Validators {
				if strings.HasPrefix(v.Name, "quality-") && !strings.Contains(strings.Join(v.Command.Argv, " "), "--outputs "+out) {
					t.Fatalf("%s: %s: %s does not read the kept outputs: %v", file, r.ID, v.Name, v.Command.Argv)
				}
			}
		}
	}
}

// TestOmniABServedNameAndStrictPort: both systems serve the name loadgen
// sends (SGLang-Omni's --model-name, vLLM's --served-model-name), loadgen
// checks it against /v1/models first, and SGLang-Omni's environment holds
// SGLANG_OMNI_STRICT_PORT=1 from its kind, so a busy port fails it rather
// than moving it; SGLang-Omni has no config endpoint. On one host and on
// Slurm alike.
func TestOmniABServedNameAndStrictPort(t *testing.T) {
	for _, file := range []string{"omni-ab.yaml", "omni-ab-slurm.yaml"} {
		p, err := PlanFile(file, Options{})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, r := range p.Runs {
			s := r.Server
			argv := strings.Join(s.Command.Argv, " ")
			switch s.Kind {
			case "sglang-omni":
				if !strings.Contains(argv, "--model-name qwen2.5-omni-7b") || s.Env["SGLANG_OMNI_STRICT_PORT"] != "1" || s.ConfigEndpoint != "" {
					t.Fatalf("%s %s: server %q, env %v, config endpoint %q", file, r.ID, argv, s.Env, s.ConfigEndpoint)
				}
			case "vllm-omni":
				if !strings.Contains(argv, "--served-model-name qwen2.5-omni-7b") || s.Env["SGLANG_OMNI_STRICT_PORT"] != "" {
					t.Fatalf("%s %s: server %q, env %v", file, r.ID, argv, s.Env)
				}
			}
			seen[s.Kind] = true
			if client := strings.Join(r.Client.Argv, " "); strings.HasPrefix(client, "bin/loadgen") &&
				!strings.Contains(client, "--model qwen2.5-omni-7b --check-served-model") {
				t.Fatalf("%s %s: client %q", file, r.ID, client)
			}
		}
		if !seen["sglang-omni"] || !seen["vllm-omni"] {
			t.Fatalf("%s: kinds %v", file, seen)
		}
	}
}

// The methodology's stress phase (seed 000 §5: "压力实验加入慢消费者、客户端暂停、
// 突发恢复和取消"; §14 step 5: after capacity): each of loadgen's stress
// loads for both systems, three process-level repeats each, the systems
// alternating, every run streaming audio for the waveform validator; on one
// host and on Slurm alike.
func TestOmniABStressPhase(t *testing.T) {
	flags := map[string][]string{
		"stress-slow":   {"--consume-rtf 1", "--consume-tokens-per-s 20"},
		"stress-pause":  {"--pause-after-s 2", "--pause-s 10"},
		"stress-burst":  {"--arrival burst:8", "--workload-seed 20261130"},
		"stress-cancel": {"--cancel-after-first-chunk 0.5", "--workload-seed 20261130"},
	}
	for _, file := range []string{"omni-ab.yaml", "omni-ab-slurm.yaml"} {
		p, err := PlanFile(file, Options{})
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		var phases []string
		for _, r := range p.Runs {
			if len(phases) == 0 || phases[len(phases)-1] != r.Phase {
				phases = append(phases, r.Phase)
			}
			if r.Phase != "stress" {
				continue
			}
			argv := strings.Join(r.Client.Argv, " ")
			for _, f := range flags[r.Load] {
				if !strings.Contains(argv, f) {
					t.Errorf("%s: %s lacks %q: %s", file, r.ID, f, argv)
				}
			}
			if r.Kind != "stress" || !r.Measured || !strings.Contains(argv, "--modalities text,audio") {
				t.Errorf("%s: %s kind %s measured %v", file, r.ID, r.Kind, r.Measured)
			}
			n[r.Axes["system"]+"/"+r.Load]++
		}
		if len(n) != 8 {
			t.Fatalf("%s: stress runs %v, want the four loads for both systems", file, n)
		}
		for k, c := range n {
			if c != 3 {
				t.Errorf("%s: %s has %d repeats, want 3", file, k, c)
			}
		}
		if phases[len(phases)-1] != "stress" || phases[len(phases)-2] != "capacity" {
			t.Errorf("%s: phases %v: the stress phase follows capacity", file, phases)
		}
	}
}
