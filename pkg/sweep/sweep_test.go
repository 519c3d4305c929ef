package sweep

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"warden/pkg/loadgen"
	"warden/protocols"
)

// testEnv makes a working directory with the executables a sweep names
// (the load client and the controller beside it, a stand-in server) and
// returns the sweep's environment, its campaign directory not yet made.
func testEnv(t *testing.T) Env {
	t.Helper()
	wd := t.TempDir()
	for _, name := range []string{"loadgen", "controller", "standin", "vllm"} {
		if err := os.WriteFile(filepath.Join(wd, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return Env{Dir: filepath.Join(t.TempDir(), "camp"), Workdir: wd, HostCPUs: 8, Controller: filepath.Join(wd, "controller"),
		Now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), CommandLine: []string{"controller", "sweep", "-d", "camp"}}
}

// baseArgs is a valid sweep: the stand-in, no grid, the saturation load,
// a synthetic pattern, a cap.
func baseArgs() Args {
	a := DefaultArgs()
	a.ServeCmd = "./standin server --load-s 0.2"
	a.Model = "standin"
	a.InputUniform, a.OutputFixed, a.NumRequests = "16:32", 8, 1000
	a.CapGPUHours = 5
	return a
}

// plan renders the sweep's protocol and plans it (inputs not checked:
// the manifest is not written) with the protocols package, which must
// find it valid; it returns the protocol as parsed and its plan.
func plan(t *testing.T, sw *Sweep) (*protocols.Protocol, *protocols.Plan) {
	t.Helper()
	text := sw.Protocol(ManifestInfo{Rows: 1000, SHA256: "0123"})
	p, err := protocols.Parse("sweep.yaml", text)
	if err != nil {
		t.Fatalf("the protocol does not parse: %v\n%s", err, text)
	}
	pl, err := protocols.PlanBytes("sweep.yaml", text, protocols.Options{})
	if err != nil {
		t.Fatalf("the protocol does not plan: %v\n%s", err, text)
	}
	return p, pl
}

func runIDs(pl *protocols.Plan) []string {
	var ids []string
	for _, r := range pl.Runs {
		ids = append(ids, r.ID)
	}
	return ids
}

func loadNames(p *protocols.Protocol) []string {
	var n []string
	for _, l := range p.Loads {
		n = append(n, l.Name)
	}
	return n
}

func configValues(p *protocols.Protocol) []protocols.AxisValue {
	for _, ax := range p.Axes {
		if ax.Name == "config" {
			return ax.Values
		}
	}
	return nil
}

// TestBuildProtocol: what each flag becomes in the protocol, read back
// through the protocols package, which plans it.
func TestBuildProtocol(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(a *Args, env *Env)
		check func(t *testing.T, p *protocols.Protocol, pl *protocols.Plan, sw *Sweep)
	}{
		{"no grid: one configuration, the saturation load", func(*Args, *Env) {},
			func(t *testing.T, p *protocols.Protocol, pl *protocols.Plan, sw *Sweep) {
				if got := runIDs(pl); !slices.Equal(got, []string{"default.saturation"}) {
					t.Errorf("runs %v", got)
				}
				s := p.Servers[0]
				if s.Kind != "standin" || !slices.Equal(s.Command.Argv, []string{"./standin", "server", "--load-s", "0.2", "--port", "${PORT}"}) || s.ReadyTimeoutS != 900 {
					t.Errorf("server %+v", s)
				}
				l := p.Loads[0]
				if l.Kind != "saturation" || l.ExpectedS != 120+30+2*60+60 || l.Manifest != "${MANIFEST}" {
					t.Errorf("load %+v", l)
				}
				c := strings.Join(l.Client.Argv, " ")
				for _, want := range []string{"--model standin", "--load-point saturation", "--request-rate inf", "--max-concurrency 256", "--warmup-seconds 30",
					"--clean-segment-seconds 60", "--num-clean-segments 2", "--drain-timeout-seconds ${DRAIN_WATCHDOG_S}", "--ignore-eos"} {
					if !strings.Contains(c, want) {
						t.Errorf("client %q lacks %q", c, want)
					}
				}
				if p.Budget.CapGPUHours != 5 || p.Budget.Unit != "GPU-hours" || p.Frozen != "2026-11-30" || p.Name != "sweep" {
					t.Errorf("budget %+v, frozen %q, name %q", p.Budget, p.Frozen, p.Name)
				}
				if len(p.Validators) != 1 || !slices.Equal(p.Validators[0].Loads, []string{"saturation"}) {
					t.Errorf("validators %+v", p.Validators)
				}
				if len(p.Slots) != 1 || p.Slots[0].CPUs != "0-7" || !p.Slots[0].Port.Auto || p.Host.GPUs != 1 || p.Host.CPUs != 8 {
					t.Errorf("slots %+v, host %+v", p.Slots, p.Host)
				}
				if len(p.Provenance) != 2 || p.Provenance[1].Path != filepath.Join(sw.Env.Dir, "inputs", "synthetic.jsonl") || p.Provenance[1].Role != "manifest" {
					t.Errorf("provenance %+v", p.Provenance)
				}
			}},
		{"a grid: the product, first key slowest; TP sets the GPUs", func(a *Args, _ *Env) {
			a.Grid = []string{"max_num_seqs=64,128", "--tp=1,2"}
			a.GPUs = "0,1"
		}, func(t *testing.T, p *protocols.Protocol, pl *protocols.Plan, _ *Sweep) {
			want := []string{"max-num-seqs-64_tp-1.saturation", "max-num-seqs-64_tp-2.saturation", "max-num-seqs-128_tp-1.saturation", "max-num-seqs-128_tp-2.saturation"}
			if got := runIDs(pl); !slices.Equal(got, want) {
				t.Errorf("runs %v", got)
			}
			v := configValues(p)
			if !slices.Equal(v[1].ServerArgs, []string{"--max-num-seqs", "64", "--tp", "2"}) || v[1].GPUs != 2 || v[0].GPUs != 0 {
				t.Errorf("values %+v", v)
			}
			if pl.Runs[1].GPUs != 2 || pl.Runs[0].GPUs != 1 {
				t.Errorf("GPUs %d, %d", pl.Runs[0].GPUs, pl.Runs[1].GPUs)
			}
			// the widest configuration takes both slots: both are the regime's
			if r := p.Regimes[0]; r.Concurrency != 2 || !slices.Equal(r.Slots, []string{"gpu0", "gpu1"}) {
				t.Errorf("regime %+v", r)
			}
			if p.Slots[0].CPUs != "0-3" || p.Slots[1].CPUs != "4-7" {
				t.Errorf("slots %+v", p.Slots)
			}
		}},
		{"tensor- times pipeline-parallel size, also from the server command", func(a *Args, _ *Env) {
			a.ServeCmd = "./vllm serve m --tensor-parallel-size 2"
			a.ServerKind = "vllm"
			a.Grid = []string{"pipeline-parallel-size=1,2"}
			a.GPUs = "0-3"
		}, func(t *testing.T, p *protocols.Protocol, pl *protocols.Plan, _ *Sweep) {
			if pl.Runs[0].GPUs != 2 || pl.Runs[1].GPUs != 4 || p.Regimes[0].Concurrency != 4 {
				t.Errorf("GPUs %d, %d; regime %+v", pl.Runs[0].GPUs, pl.Runs[1].GPUs, p.Regimes[0])
			}
		}},
		{"the default CPUs are this process's", func(a *Args, env *Env) {
			env.CPUs = []int{4, 5, 6, 7, 9}
			a.GPUs = "0,1"
		}, func(t *testing.T, p *protocols.Protocol, _ *protocols.Plan, _ *Sweep) {
			if p.Slots[0].CPUs != "4-5" || p.Slots[1].CPUs != "6-7" || p.Host.CPUs != 10 {
				t.Errorf("slots %+v, host %+v", p.Slots, p.Host)
			}
		}},
		{"--gpus-per-run and --parallel", func(a *Args, _ *Env) {
			a.Grid = []string{"tp=1,2"}
			a.GPUs, a.GPUsPerRun, a.Parallel = "0-3", 2, 4
		}, func(t *testing.T, p *protocols.Protocol, pl *protocols.Plan, _ *Sweep) {
			if pl.Runs[0].GPUs != 2 || p.Regimes[0].Concurrency != 4 {
				t.Errorf("GPUs %d, regime %+v", pl.Runs[0].GPUs, p.Regimes[0])
			}
		}},
		{"booleans: --KEY and --no-KEY, a dotted key --KEY=true", func(a *Args, _ *Env) {
			a.Grid = []string{"enable-prefix-caching=true,false", "compilation_config.use_cudagraph=false"}
		}, func(t *testing.T, p *protocols.Protocol, _ *protocols.Plan, _ *Sweep) {
			v := configValues(p)
			if v[0].ID != "enable-prefix-caching_no-compilation-config.use-cudagraph" || v[1].ID != "no-enable-prefix-caching_no-compilation-config.use-cudagraph" {
				t.Errorf("ids %s, %s", v[0].ID, v[1].ID)
			}
			if !slices.Equal(v[0].ServerArgs, []string{"--enable-prefix-caching", "--compilation-config.use_cudagraph=false"}) ||
				!slices.Equal(v[1].ServerArgs, []string{"--no-enable-prefix-caching", "--compilation-config.use_cudagraph=false"}) {
				t.Errorf("values %+v", v)
			}
		}},
		{"--serve-params: vllm bench sweep's list, names and values kept", func(a *Args, env *Env) {
			path := filepath.Join(env.Workdir, "serve.json")
			os.WriteFile(path, []byte(`[{"_benchmark_name": "small", "max_num_seqs": 32, "enforce_eager": true},
				{"max_num_seqs": 64, "speculative_config": {"method": "ngram", "k": 2}, "kv_cache_dtype": "fp8"}]`), 0o644)
			a.ServeParams = "serve.json"
		}, func(t *testing.T, p *protocols.Protocol, _ *protocols.Plan, _ *Sweep) {
			v := configValues(p)
			if len(v) != 2 || v[0].ID != "small" || !slices.Equal(v[0].ServerArgs, []string{"--max-num-seqs", "32", "--enforce-eager"}) {
				t.Errorf("first %+v", v)
			}
			if !slices.Equal(v[1].ServerArgs, []string{"--max-num-seqs", "64", "--speculative-config", `{"method":"ngram","k":2}`, "--kv-cache-dtype", "fp8"}) {
				t.Errorf("second %+v", v[1])
			}
		}},
		{"--serve-params: an object of named combinations", func(a *Args, env *Env) {
			path := filepath.Join(env.Workdir, "serve.json")
			os.WriteFile(path, []byte(`{"b": {"max_num_seqs": 8}, "a": {"max_num_seqs": 16}}`), 0o644)
			a.ServeParams = path
		}, func(t *testing.T, p *protocols.Protocol, pl *protocols.Plan, _ *Sweep) {
			if got := runIDs(pl); !slices.Equal(got, []string{"b.saturation", "a.saturation"}) {
				t.Errorf("runs %v", got)
			}
		}},
		{"rates and concurrencies: their product, then the moderate loads", func(a *Args, _ *Env) {
			a.RequestRates = []string{"inf", "2", "0.5"}
			a.RateFractions = []float64{0.6, 0.8}
			a.RateTolerance = 0.15
		}, func(t *testing.T, p *protocols.Protocol, pl *protocols.Plan, _ *Sweep) {
			if got := loadNames(p); !slices.Equal(got, []string{"saturation", "rate-2", "rate-0.5", "moderate-0.6", "moderate-0.8"}) {
				t.Errorf("loads %v", got)
			}
			if p.Loads[1].Kind != "open-loop" || !strings.Contains(strings.Join(p.Loads[1].Client.Argv, " "), "--load-point open-loop --request-rate 2 --max-concurrency 256") {
				t.Errorf("rate load %+v", p.Loads[1])
			}
			m := p.Loads[3]
			if m.Kind != "moderate" || len(m.Needs) != 1 || m.Needs[0].Load != "saturation" ||
				!strings.Contains(strings.Join(m.Client.Argv, " "), "--saturation-result ${NEED_SATURATION_DIR}/client/result.json --rate-fraction 0.6") {
				t.Errorf("moderate load %+v", m)
			}
			// the fixed rates have no validator; each moderate load its own
			var judged []string
			for _, v := range p.Validators {
				judged = append(judged, v.Loads...)
				if strings.Contains(v.Name, "moderate") && !strings.Contains(strings.Join(v.Command.Argv, " "), "--rate-fraction 0.8 --rate-tolerance 0.15") && v.Name == "client-moderate-0.8" {
					t.Errorf("validator %+v", v)
				}
			}
			if !slices.Equal(judged, []string{"saturation", "moderate-0.6", "moderate-0.8"}) {
				t.Errorf("validated loads %v", judged)
			}
			if pl.Runs[3].Needs[0] != "default.saturation" {
				t.Errorf("needs %v", pl.Runs[3].Needs)
			}
		}},
		{"several concurrencies: closed loops, and rates at each", func(a *Args, _ *Env) {
			a.RequestRates = []string{"inf", "4"}
			a.MaxConcurrency = []int{16, 64}
		}, func(t *testing.T, p *protocols.Protocol, _ *protocols.Plan, _ *Sweep) {
			if got := loadNames(p); !slices.Equal(got, []string{"closed-c16", "closed-c64", "rate-4-c16", "rate-4-c64"}) {
				t.Errorf("loads %v", got)
			}
			if p.Loads[0].Kind != "closed-loop" || !strings.Contains(strings.Join(p.Loads[0].Client.Argv, " "), "--load-point closed-loop --request-rate inf --max-concurrency 16") {
				t.Errorf("closed loop %+v", p.Loads[0])
			}
		}},
		{"--num-runs: repeats, the repeat in the run ids", func(a *Args, _ *Env) { a.NumRuns = 3 },
			func(t *testing.T, p *protocols.Protocol, pl *protocols.Plan, _ *Sweep) {
				if p.Phases[0].Repeats != 3 || len(pl.Runs) != 3 || pl.Runs[2].ID != "default.saturation.r3" {
					t.Errorf("repeats %d, runs %v", p.Phases[0].Repeats, runIDs(pl))
				}
			}},
		{"--validate none, budget, ports, ledger, name", func(a *Args, _ *Env) {
			a.Validate = "none"
			a.ConsumedGPUHours, a.BudgetUnit = 1.5, "H200-hours"
			a.GPUs, a.Ports, a.CPUs = "2,3", []string{"8001", "8002"}, "0-5"
			a.Ledger = []string{"uname -a", "'./vllm' --version"}
			a.Name = "mysweep"
		}, func(t *testing.T, p *protocols.Protocol, _ *protocols.Plan, _ *Sweep) {
			if len(p.Validators) != 0 || p.Budget.ConsumedGPUHours != 1.5 || p.Budget.Unit != "H200-hours" || p.Name != "mysweep" {
				t.Errorf("validators %v, budget %+v", p.Validators, p.Budget)
			}
			if p.Slots[0].Name != "gpu2" || p.Slots[0].Port.N != 8001 || p.Slots[1].Port.N != 8002 || p.Slots[0].CPUs != "0-2" || p.Host.GPUs != 4 {
				t.Errorf("slots %+v, host %+v", p.Slots, p.Host)
			}
			if len(p.Ledger) != 2 || !slices.Equal(p.Ledger[1].Argv, []string{"./vllm", "--version"}) {
				t.Errorf("ledger %+v", p.Ledger)
			}
		}},
		{"the kind from the program: vllm gets a port", func(a *Args, _ *Env) {
			a.ServeCmd, a.ServerKind = "vllm serve Qwen/Qwen3-8B --max-model-len 4096", "auto"
		}, func(t *testing.T, p *protocols.Protocol, _ *protocols.Plan, _ *Sweep) {
			if s := p.Servers[0]; s.Kind != "vllm" || !slices.Equal(s.Command.Argv[len(s.Command.Argv)-2:], []string{"--port", "${PORT}"}) {
				t.Errorf("server %+v", s)
			}
		}},
		{"the kind from the program: python -m sglang.launch_server; its own port variable kept", func(a *Args, _ *Env) {
			a.ServeCmd, a.ServerKind = `python3 -m sglang.launch_server --model-path m --port '${PORT}'`, "auto"
		}, func(t *testing.T, p *protocols.Protocol, _ *protocols.Plan, _ *Sweep) {
			if s := p.Servers[0]; s.Kind != "sglang" || !slices.Equal(s.Command.Argv, []string{"python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "${PORT}"}) {
				t.Errorf("server %+v", s)
			}
		}},
		{"an existing manifest, private", func(a *Args, env *Env) {
			path := filepath.Join(env.Workdir, "P05 real.jsonl")
			if _, err := loadgen.Materialize(loadgen.Spec{ID: "P05", Kind: "synthetic", Input: loadgen.Mixture{{Min: 4, Max: 8, Weight: 1}},
				OutputTokens: 4, Prefix: "none", Arrival: loadgen.Arrival{Kind: "steady"}, NumRequests: 50, VocabMin: 1000, VocabMax: 2000}, path); err != nil {
				panic(err)
			}
			a.InputUniform, a.OutputFixed, a.NumRequests = "", 0, 0
			a.Manifest, a.ManifestPrivate = path, true
		}, func(t *testing.T, p *protocols.Protocol, _ *protocols.Plan, sw *Sweep) {
			pv := p.Provenance[1]
			if pv.Path != filepath.Join(sw.Env.Workdir, "P05 real.jsonl") || !pv.Private || p.Axes[1].Values[0].ID != "P05-real" {
				t.Errorf("provenance %+v, pattern %+v", pv, p.Axes[1].Values[0])
			}
		}},
		{"a prefix-pool pattern", func(a *Args, _ *Env) {
			a.InputUniform, a.PatternKind = "", "prefix-pool"
			a.NumPrefixes, a.PrefixLen, a.SuffixFixed = 4, 32, 8
			a.Arrival = "burst:8"
		}, func(t *testing.T, _ *protocols.Protocol, _ *protocols.Plan, sw *Sweep) {
			m := sw.Pattern.Materialize
			if m.Kind != "prefix-pool" || m.Prefix != "pool" || m.NumPrefixes != 4 || m.Arrival.Kind != "burst" || !slices.Contains(sw.Pattern.MaterializeArgs, "--prefix-len") {
				t.Errorf("spec %+v, args %v", m, sw.Pattern.MaterializeArgs)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t)
			a := baseArgs()
			tc.edit(&a, &env)
			sw, err := Build(a, env)
			if err != nil {
				t.Fatal(err)
			}
			p, pl := plan(t, sw)
			tc.check(t, p, pl, sw)
		})
	}
}

// TestProtocolComments: the protocol names the flags its lines came from,
// and the command that wrote it.
func TestProtocolComments(t *testing.T) {
	env := testEnv(t)
	a := baseArgs()
	a.Grid = []string{"max-num-seqs=64,128"}
	sw, err := Build(a, env)
	if err != nil {
		t.Fatal(err)
	}
	text := string(sw.Protocol(ManifestInfo{Rows: 1000, SHA256: "0123"}))
	for _, want := range []string{
		"#   controller sweep -d camp\n",
		"frozen: \"2026-11-30\"", "# --cap-gpu-hours", "# --budget-unit", "# --serve-cmd; --port ${PORT} added",
		"# --server-ready-timeout", "# --grid: one configuration per combination", "# max-num-seqs=128",
		"# --request-rate inf --max-concurrency 256: a closed loop of 256 requests",
		"#   loadgen materialize --id synthetic --kind synthetic --input-uniform 16:32 --prefix none \\\n",
		"#     --output-fixed 8 --arrival steady",
		"1000 rows, sha256 0123", "# --drain-allowance-s, --watchdog-s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the protocol lacks %q:\n%s", want, text)
		}
	}
}

// TestBuildErrors: every flag that cannot make a protocol is refused,
// naming the flag.
func TestBuildErrors(t *testing.T) {
	cases := []struct {
		flag, msg string
		edit      func(a *Args, env *Env)
	}{
		{"name", "not a safe path component", func(a *Args, _ *Env) { a.Name = "../x" }},
		{"dir", "cannot be named in a protocol's commands", func(_ *Args, env *Env) { env.Dir = filepath.Join(env.Dir, "$HOME") }},
		{"manifest", "cannot be named in a protocol's variables", func(a *Args, env *Env) {
			a.Manifest, a.InputUniform, a.OutputFixed, a.NumRequests = filepath.Join(env.Workdir, "$x.jsonl"), "", 0, 0
		}},
		{"serve-cmd", "required", func(a *Args, _ *Env) { a.ServeCmd = " " }},
		{"serve-cmd", "single quote is not closed", func(a *Args, _ *Env) { a.ServeCmd = "vllm 'serve" }},
		{"serve-cmd", "gives --port 8000", func(a *Args, _ *Env) { a.ServeCmd = "./standin server --port 8000" }},
		{"serve-cmd", "gives --port 9", func(a *Args, _ *Env) { a.ServeCmd = "./standin server --port=9" }},
		{"serve-cmd", "names no port", func(a *Args, _ *Env) { a.ServeCmd, a.ServerKind = "./omni serve", "sglang-omni" }},
		{"server-kind", "cannot tell the kind of server ./mysrv", func(a *Args, _ *Env) { a.ServeCmd, a.ServerKind = "./mysrv", "auto" }},
		{"server-kind", `"custom": want auto`, func(a *Args, _ *Env) { a.ServerKind = "custom" }},
		{"model", "required", func(a *Args, _ *Env) { a.Model = "" }},
		{"server-ready-timeout", "positive", func(a *Args, _ *Env) { a.ReadyTimeoutS = 0 }},
		{"startup-s", "not negative", func(a *Args, _ *Env) { a.StartupS = -1 }},
		{"grid", "want KEY=V1,V2", func(a *Args, _ *Env) { a.Grid = []string{"max-num-seqs"} }},
		{"grid", "want KEY=V1,V2", func(a *Args, _ *Env) { a.Grid = []string{"=1,2"} }},
		{"grid", "given twice", func(a *Args, _ *Env) { a.Grid = []string{"max-num-seqs=1", "max_num_seqs=2"} }},
		{"grid", "an empty value", func(a *Args, _ *Env) { a.Grid = []string{"max-num-seqs=1,"} }},
		{"grid", "the value 1 is given twice", func(a *Args, _ *Env) { a.Grid = []string{"max-num-seqs=1,1"} }},
		{"grid", "--serve-cmd already gives --load-s", func(a *Args, _ *Env) { a.Grid = []string{"load_s=1,2"} }},
		{"grid", "--serve-cmd already gives --no-enable-x", func(a *Args, _ *Env) { a.ServeCmd += " --no-enable-x"; a.Grid = []string{"enable-x=true"} }},
		{"grid", "both become", func(a *Args, _ *Env) { a.Grid = []string{"x=a/b,a:b"} }},
		{"grid", "--tp 0: want a whole number of GPUs", func(a *Args, _ *Env) { a.Grid = []string{"tp=0"} }},
		{"serve-params", "give --grid or --serve-params, not both", func(a *Args, _ *Env) { a.Grid, a.ServeParams = []string{"x=1"}, "p.json" }},
		{"serve-params", "no such file", func(a *Args, _ *Env) { a.ServeParams = "missing.json" }},
		{"serve-params", "not JSON", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, "{") }},
		{"serve-params", "want a list of parameter combinations", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, "3") }},
		{"serve-params", "no combinations", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, "[]") }},
		{"serve-params", "want an object of parameters", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, "[1]") }},
		{"serve-params", "is null", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, `[{"x": null}]`) }},
		{"serve-params", "is a list", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, `[{"x": [1]}]`) }},
		{"serve-params", "not a server flag name", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, `[{"a b": 1}]`) }},
		{"serve-params", "x is given twice", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, `[{"x": 1, "--x": 2}]`) }},
		{"serve-params", "_benchmark_name must be", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, `[{"_benchmark_name": 3}]`) }},
		{"serve-params", `the name "n" is given twice`, func(a *Args, env *Env) {
			a.ServeParams = writeFile(*env, `[{"_benchmark_name": "n"}, {"_benchmark_name": "n", "x": 1}]`)
		}},
		{"serve-params", `names itself "m"`, func(a *Args, env *Env) { a.ServeParams = writeFile(*env, `{"n": {"_benchmark_name": "m"}}`) }},
		{"serve-params", "more after the combinations", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, `[{"x": 1}] [1]`) }},
		{"serve-params", "not a safe path component", func(a *Args, env *Env) { a.ServeParams = writeFile(*env, `[{"_benchmark_name": "../n"}]`) }},
		{"gpus-per-run", "want a number of GPUs", func(a *Args, _ *Env) { a.GPUsPerRun = -1 }},
		{"gpus", "want GPU indices", func(a *Args, _ *Env) { a.GPUs = "x" }},
		{"gpus", "needs 2 GPUs (tp 2); --gpus 0 gives 1", func(a *Args, _ *Env) { a.Grid = []string{"tp=2"} }},
		{"cpus", "want a CPU list", func(a *Args, _ *Env) { a.CPUs = "a-b" }},
		{"cpus", "2 CPUs among 4 GPU slots", func(a *Args, _ *Env) { a.CPUs, a.GPUs = "0-1", "0-3" }},
		{"ports", "2 ports for 1 GPU slots", func(a *Args, _ *Env) { a.Ports = []string{"1", "2"} }},
		{"ports", "want a TCP port number", func(a *Args, _ *Env) { a.Ports = []string{"70000"} }},
		{"parallel", "want 2 to 2", func(a *Args, _ *Env) { a.Grid, a.GPUs, a.Parallel = []string{"tp=2"}, "0,1", 1 }},
		{"parallel", "want 1 to 1", func(a *Args, _ *Env) { a.Parallel = 2 }},
		{"input-fixed", "goes with a synthetic pattern, not with --manifest", func(a *Args, _ *Env) { a.Manifest, a.InputUniform, a.InputFixed = "m.jsonl", "", 8 }},
		{"manifest", "no such file", func(a *Args, _ *Env) { a.Manifest, a.InputUniform, a.OutputFixed, a.NumRequests = "m.jsonl", "", 0, 0 }},
		{"manifest", "inside the campaign directory", func(a *Args, env *Env) {
			a.Manifest, a.InputUniform, a.OutputFixed, a.NumRequests = filepath.Join(env.Dir, "m.jsonl"), "", 0, 0
		}},
		{"manifest-private", "goes with --manifest", func(a *Args, _ *Env) { a.ManifestPrivate = true }},
		{"pattern-id", "not a safe path component", func(a *Args, _ *Env) { a.PatternID = "a/b" }},
		{"input-uniform", "exactly one of", func(a *Args, _ *Env) { a.InputFixed = 4 }},
		{"input-uniform", "exactly one of", func(a *Args, _ *Env) { a.InputUniform = "" }},
		{"input-uniform", "want A:B", func(a *Args, _ *Env) { a.InputUniform = "5" }},
		{"input-mixture", "", func(a *Args, _ *Env) { a.InputUniform, a.InputMixture = "", "{" }},
		{"input-fixed", "want at least 1 token", func(a *Args, _ *Env) { a.InputUniform, a.InputFixed = "", -2 }},
		{"num-prefixes", "goes with --pattern-kind prefix-pool", func(a *Args, _ *Env) { a.NumPrefixes = 2 }},
		{"input-uniform", "go with --pattern-kind synthetic", func(a *Args, _ *Env) { a.PatternKind = "prefix-pool" }},
		{"prefix-len", "needs --num-prefixes, --prefix-len and --suffix-fixed", func(a *Args, _ *Env) {
			a.PatternKind, a.InputUniform, a.NumPrefixes, a.SuffixFixed = "prefix-pool", "", 2, 4
		}},
		{"pattern-kind", "want synthetic or prefix-pool", func(a *Args, _ *Env) { a.PatternKind = "trace" }},
		{"output-fixed", "required", func(a *Args, _ *Env) { a.OutputFixed = 0 }},
		{"num-requests", "required", func(a *Args, _ *Env) { a.NumRequests = 0 }},
		{"vocab-min", "too small", func(a *Args, _ *Env) { a.VocabMin, a.VocabMax = 10, 11 }},
		{"arrival", "", func(a *Args, _ *Env) { a.Arrival = "sometimes" }},
		{"request-rate", "give at least one", func(a *Args, _ *Env) { a.RequestRates = nil }},
		{"request-rate", `"-1": want inf or a positive number`, func(a *Args, _ *Env) { a.RequestRates = []string{"-1"} }},
		{"request-rate", "2 is given twice", func(a *Args, _ *Env) { a.RequestRates = []string{"2", "2"} }},
		{"max-concurrency", "give at least one", func(a *Args, _ *Env) { a.MaxConcurrency = nil }},
		{"max-concurrency", "want at least 1", func(a *Args, _ *Env) { a.MaxConcurrency = []int{0} }},
		{"max-concurrency", "4 is given twice", func(a *Args, _ *Env) { a.MaxConcurrency = []int{4, 4} }},
		{"warmup-seconds", "not negative", func(a *Args, _ *Env) { a.WarmupS = -1 }},
		{"clean-segment-seconds", "positive", func(a *Args, _ *Env) { a.CleanSegmentS = 0 }},
		{"num-clean-segments", "at least 1", func(a *Args, _ *Env) { a.NumCleanSegments = 0 }},
		{"drain-allowance-s", "positive", func(a *Args, _ *Env) { a.DrainAllowanceS = 0 }},
		{"watchdog-s", "at least --drain-allowance-s", func(a *Args, _ *Env) { a.WatchdogS = 10 }},
		{"validate", "want client or none", func(a *Args, _ *Env) { a.Validate = "all" }},
		{"rate-tolerance", "not negative", func(a *Args, _ *Env) { a.RateTolerance = -0.1 }},
		{"num-runs", "at least 1", func(a *Args, _ *Env) { a.NumRuns = 0 }},
		{"num-requests", "1000 rows, but --request-rate 10 plans", func(a *Args, _ *Env) { a.RequestRates = []string{"10"} }},
		{"rate-fraction", "positive fraction", func(a *Args, _ *Env) { a.RateFractions = []float64{0} }},
		{"rate-fraction", "0.5 is given twice", func(a *Args, _ *Env) { a.RateFractions = []float64{0.5, 0.5} }},
		{"rate-fraction", "needs the saturation load", func(a *Args, _ *Env) { a.RateFractions, a.RequestRates = []float64{0.5}, []string{"1"} }},
		{"rate-fraction", "needs the saturation load", func(a *Args, _ *Env) { a.RateFractions, a.MaxConcurrency = []float64{0.5}, []int{1, 2} }},
		{"cap-gpu-hours", "required", func(a *Args, _ *Env) { a.CapGPUHours = 0 }},
		{"consumed-gpu-hours", "not negative", func(a *Args, _ *Env) { a.ConsumedGPUHours = -1 }},
		{"budget-unit", "empty", func(a *Args, _ *Env) { a.BudgetUnit = " " }},
		{"loadgen", "no such file", func(a *Args, _ *Env) { a.Loadgen = "nowhere/loadgen" }},
		{"loadgen", "not an executable file", func(a *Args, env *Env) { a.Loadgen = writeFile(*env, "") }},
		{"ledger", "want a command line", func(a *Args, _ *Env) { a.Ledger = []string{""} }},
	}
	for _, tc := range cases {
		t.Run(tc.flag+": "+tc.msg, func(t *testing.T) {
			env := testEnv(t)
			a := baseArgs()
			tc.edit(&a, &env)
			_, err := Build(a, env)
			var fe *FlagError
			if !errors.As(err, &fe) || fe.Flag != tc.flag || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "--"+tc.flag+": ") {
				t.Fatalf("got %v, want --%s: ...%s...", err, tc.flag, tc.msg)
			}
		})
	}
	// every flag has a test of an error naming it, but for the few whose
	// every value is valid
	named := map[string]bool{}
	for _, tc := range cases {
		named[tc.flag] = true
	}
	for _, f := range FlagNames {
		if !named[f] && !slices.Contains([]string{"workload-seed", "vocab-max", "suffix-fixed"}, f) {
			t.Errorf("no error case names --%s", f)
		}
	}
}

// writeFile writes content to a new file of the sweep's working directory.
func writeFile(env Env, content string) string {
	f, err := os.CreateTemp(env.Workdir, "f-*")
	if err != nil {
		panic(err)
	}
	f.WriteString(content)
	f.Close()
	return f.Name()
}

func TestSplitWords(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  string
	}{
		{"vllm serve m", []string{"vllm", "serve", "m"}, ""},
		{"  a\t b\n", []string{"a", "b"}, ""},
		{`a 'b c' "d e"`, []string{"a", "b c", "d e"}, ""},
		{`--port '${PORT}' "${PORT}"`, []string{"--port", "${PORT}", "${PORT}"}, ""},
		{`a\ b c\\d`, []string{"a b", `c\d`}, ""},
		{`"a\"b\\c\d"`, []string{`a"b\c\d`}, ""},
		{"a\\\nb", []string{"ab"}, ""},
		{`''`, []string{""}, ""},
		{`x'y'"z"`, []string{"xyz"}, ""},
		{`'a`, nil, "single quote"},
		{`"a`, nil, "double quote"},
		{`a\`, nil, "backslash"},
	}
	for _, tc := range cases {
		got, err := SplitWords(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("SplitWords(%q) = %q, %v; want an error about %s", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("SplitWords(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if got := shellQuote([]string{"a", "b c", "it's", "${PORT}", "x=1,2"}); got != `a 'b c' 'it'\''s' '${PORT}' x=1,2` {
		t.Errorf("shellQuote: %s", got)
	}
}
