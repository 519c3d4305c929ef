// Package testsweep writes a config-sweep campaign for the report's
// tests: one server whose configurations differ by their arguments (the
// config axis), one pattern, saturation and moderate loads, two repeats,
// a burn-in per configuration; each ended attempt's client/result.json
// shaped as loadgen writes it, with figures the tests read back from
// Runs to compute what the report must show, independently of it.
package testsweep

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/provenance"
	"warden/pkg/state"
	"warden/protocols"
)

// Dist is a latency distribution as result.json gives it (milliseconds).
type Dist struct{ N, Mean, P50, P90, P95, P99, Max float64 }

// Run is one run of the sweep and the figures its client result gives.
// A nil Dists entry is absent from the result; one of N 0 is loadgen's
// summary of no requests.
type Run struct {
	ID, Phase, Config, Load string
	Repeat                  int
	Measured, Failed        bool
	Seconds                 float64
	Completed, Input, Out   int
	Dists                   map[string]*Dist // ttft, tpot, itl, e2e
}

// ThroughputRPS is the run's clean.completed_rps.
func (r Run) ThroughputRPS() float64 { return float64(r.Completed) / r.Seconds }

// OutputTokensPerS is its clean.output_tokens_per_s.
func (r Run) OutputTokensPerS() float64 { return float64(r.Out) / r.Seconds }

// Sweep is the campaign written.
type Sweep struct {
	Dir      string
	Plan     *protocols.Plan
	Runs     []Run
	Manifest string // the manifest's SHA-256 every result names
}

// Configs are the config axis's values and the server arguments each adds.
var Configs = []struct {
	ID   string
	Args []string
}{{"base", nil}, {"small", []string{"--max-running", "8"}}, {"large", []string{"--max-running", "64"}}}

// d is a distribution around p99 (the other statistics below it).
func d(n, p99 float64) *Dist {
	return &Dist{N: n, Mean: p99 * 0.5, P50: p99 * 0.45, P90: p99 * 0.7, P95: p99 * 0.85, P99: p99, Max: p99 * 1.25}
}

// matrix are the sweep's measured runs: per configuration and load two
// repeats, (completed requests in a 2 s clean interval, p99 TTFT); large
// at moderate failed its second repeat, and small's second saturation
// repeat reports TPOT of no requests.
var matrix = []struct {
	config, load string
	repeat       int
	completed    int
	ttftP99      float64
}{
	{"base", "saturation", 1, 80, 50}, {"base", "saturation", 2, 84, 54},
	{"small", "saturation", 1, 50, 20}, {"small", "saturation", 2, 52, 22},
	{"large", "saturation", 1, 90, 80}, {"large", "saturation", 2, 92, 82},
	{"base", "moderate", 1, 48, 10}, {"base", "moderate", 2, 50, 11},
	{"small", "moderate", 1, 30, 8}, {"small", "moderate", 2, 32, 9},
	{"large", "moderate", 1, 54, 12}, {"large", "moderate", 2, 0, 0},
}

// Write writes the sweep into dir: its store, plan.json, an empty
// provenance record, and every attempt's directory and client result.
func Write(t testing.TB, dir string) Sweep {
	t.Helper()
	sw := Sweep{Dir: dir, Manifest: strings.Repeat("5e", 32), Plan: &protocols.Plan{Schema: protocols.PlanSchema,
		Protocol: protocols.ProtocolInfo{Name: "sweep", Title: "A config sweep on the stand-in"}}}
	sw.Plan.Phases = []protocols.PhaseInfo{{Name: "burn-in", Kind: "burn-in"}, {Name: "matrix", Kind: "primary"}}
	server := func(cfg string) protocols.ServerSpec {
		argv := []string{"bin/standin", "server", "--port", "${PORT}"}
		for _, c := range Configs {
			if c.ID == cfg {
				argv = append(argv, c.Args...)
			}
		}
		return protocols.ServerSpec{Name: "standin", Kind: "standin", Command: protocols.CommandSpec{Argv: argv}}
	}
	add := func(r Run) {
		cell := "p1." + r.Config
		sw.Plan.Runs = append(sw.Plan.Runs, protocols.Run{Index: len(sw.Plan.Runs), ID: r.ID, Phase: r.Phase, Kind: r.Load, Cell: cell, Load: r.Load,
			Axes: map[string]string{"pattern": "p1", "config": r.Config}, Repeat: max(r.Repeat, 1), GPUs: 1, Measured: r.Measured, Server: server(r.Config)})
		sw.Runs = append(sw.Runs, r)
	}
	for _, c := range Configs {
		add(Run{ID: "burnin." + c.ID, Phase: "burn-in", Config: c.ID, Load: "burnin", Seconds: 1, Completed: 10, Input: 100, Out: 80,
			Dists: map[string]*Dist{"ttft_ms": d(10, 5), "tpot_ms": d(10, 1), "itl_ms": d(70, 1), "e2e_ms": d(10, 12)}})
	}
	for _, m := range matrix {
		r := Run{ID: fmt.Sprintf("p1.%s.%s.r%d", m.config, m.load, m.repeat), Phase: "matrix", Config: m.config, Load: m.load, Repeat: m.repeat,
			Measured: true, Seconds: 2, Completed: m.completed, Input: m.completed * 300, Out: m.completed * 64}
		switch {
		case m.completed == 0:
			r.Failed = true
		default:
			r.Dists = map[string]*Dist{"ttft_ms": d(float64(m.completed), m.ttftP99), "tpot_ms": d(float64(m.completed), m.ttftP99/10),
				"itl_ms": d(float64(m.completed*63), m.ttftP99/12), "e2e_ms": d(float64(m.completed), m.ttftP99*4)}
			if m.config == "small" && m.load == "saturation" && m.repeat == 2 {
				r.Dists["tpot_ms"] = &Dist{}
			}
		}
		add(r)
	}
	writeStore(t, sw)
	b, err := json.Marshal(sw.Plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dirlayout.Plan(dir), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return sw
}

// T0 is when the sweep's campaign was created.
var T0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func writeStore(t testing.TB, sw Sweep) {
	t.Helper()
	if err := provenance.Write(sw.Dir, nil, provenance.Options{}); err != nil {
		t.Fatal(err)
	}
	clock := T0
	s, err := dirlayout.OpenStore(sw.Dir, state.Options{Strict: true, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var runs []state.Run
	for i, r := range sw.Plan.Runs {
		runs = append(runs, state.Run{ID: r.ID, Order: i, Phase: r.Phase, Kind: r.Kind, Cell: r.Cell, Load: r.Load, GPUs: 1, ExpectedS: 10})
	}
	c := state.Campaign{ID: "sweep-1", ProtocolName: "sweep", ProtocolSHA256: strings.Repeat("ab", 32), Dir: sw.Dir, CreatedAt: T0,
		State: state.CampaignRunning, BudgetCapGPUHours: 1, BudgetUnit: "fake-GPU-hours", RegimeConcurrency: 1, GPUBackend: "fake"}
	if err := s.CreateCampaign(c, runs); err != nil {
		t.Fatal(err)
	}
	ok := []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete}
	bad := []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Failed}
	for i, r := range sw.Runs {
		adir := dirlayout.AttemptDir(sw.Dir, r.ID, 1)
		if err := os.MkdirAll(filepath.Join(adir, dirlayout.ClientDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := s.NewAttempt(r.ID, adir, func(a *state.Attempt) { a.Slot = "fake0"; a.GPUIDs = []int{i % 2} }); err != nil {
			t.Fatal(err)
		}
		path := ok
		if r.Failed {
			path = bad
		}
		for _, to := range path {
			clock = clock.Add(time.Second)
			reason := state.Reason("")
			if to == state.Failed {
				reason = state.ReasonClientFailed
			}
			if _, err := s.Transition(r.ID, 1, to, reason, "", nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		if r.Failed {
			continue
		}
		if err := os.WriteFile(dirlayout.ClientResult(adir), result(r, sw.Manifest), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetCampaignState(state.CampaignComplete, "", "", nil); err != nil {
		t.Fatal(err)
	}
}

// result is the run's client/result.json, as loadgen writes it (the
// fields the report reads).
func result(r Run, manifest string) []byte {
	lat := map[string]any{}
	for k, x := range r.Dists {
		if x != nil {
			lat[k] = map[string]float64{"n": x.N, "mean": x.Mean, "p50": x.P50, "p90": x.P90, "p95": x.P95, "p99": x.P99, "max": x.Max}
		}
	}
	b, _ := json.MarshalIndent(map[string]any{
		"schema":   "warden.loadgen.result/1",
		"complete": true, "load_point": r.Load,
		"load":     map[string]any{"closed_loop": r.Load != "moderate", "lambda_rps": map[bool]float64{true: 20}[r.Load == "moderate"], "max_concurrency": 16},
		"manifest": map[string]any{"sha256": manifest, "rows": 1000},
		"clean": map[string]any{"seconds": r.Seconds, "completed": r.Completed, "failed": 0, "input_tokens": r.Input, "output_tokens": r.Out,
			"completed_rps": r.ThroughputRPS(), "output_tokens_per_s": r.OutputTokensPerS(), "latency": lat},
	}, "", "  ")
	return b
}

// Report is the sweep's report as the query API builds it.
func Report(t testing.TB, sw Sweep) api.Report {
	t.Helper()
	s, err := dirlayout.OpenStoreReadOnly(sw.Dir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, err := api.BuildReport(s, sw.Dir, api.Controller{}, T0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
