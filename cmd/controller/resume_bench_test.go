package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/campaigndir"
	"warden/pkg/dirlayout"

	"warden/pkg/gpu/fakegpu"
	"warden/pkg/launch"
	"warden/pkg/state"
)

// benchRuns is the size of the campaign BenchmarkResume10000Runs resumes.
const benchRuns = 10000

// writeBigProtocol writes a protocol of n one-load runs on two slots.
func writeBigProtocol(b *testing.B, dir string, n int) string {
	b.Helper()
	ports := freePorts(b, 2)
	var vals, ids strings.Builder
	for i := range n {
		fmt.Fprintf(&vals, "{id: p%d}, ", i+1)
		fmt.Fprintf(&ids, "p%d, ", i+1)
	}
	y := testcampaign.Head("big", "1000", fmt.Sprintf("STANDIN: %q", standinBin), ports) + `regimes:
  - {name: two, concurrency: 2}
` + classAndCleanup + fmt.Sprintf(`servers:
  - {name: standin, kind: standin, command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.2", --gpu-mem-mib, "1024"], ready_timeout_s: 10}
loads:
  - {name: saturation, kind: saturation, expected_s: 10, client: ["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "2"]}
axes:
  - name: pattern
    values: [%s]
phases:
  - {name: matrix, kind: primary, matrix: {pattern: [%s]}, loads: [saturation]}
`, strings.TrimSuffix(vals.String(), ", "), strings.TrimSuffix(ids.String(), ", "))
	path := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// bigCampaign creates a campaign of benchRuns runs in dir whose runs are
// all complete but the last, as a controller would have left them: each
// with a complete attempt, its events and its ledger entries. The last
// hundred attempts have directories and state.json files.
func bigCampaign(b *testing.B, dir string) {
	b.Helper()
	proto := writeBigProtocol(b, b.TempDir(), benchRuns)
	fake := filepath.Join(b.TempDir(), "gpus")
	if err := fakegpu.Init(fake, 2, 143771); err != nil {
		b.Fatal(err)
	}
	plan, err := campaigndir.Create(proto, dir, campaigndir.StartOptions{Backend: "fake", FakeGPUDir: fake, Cgroups: "auto"}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	// not strict: a check inside each of 10,000 writes would make the
	// fixture quadratic; it is checked once, when written
	s, err := state.Open(dirlayout.State(dir), state.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	path := []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready,
		state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete}
	for i, r := range plan.Runs[:len(plan.Runs)-1] {
		adir := ""
		if i >= len(plan.Runs)-101 {
			adir = filepath.Join(dir, "runs", r.ID, "a1")
		}
		if _, err := s.NewAttempt(r.ID, adir, func(a *state.Attempt) { a.GPUIDs = []int{i % 2} }); err != nil {
			b.Fatal(err)
		}
		for _, e := range []state.LedgerEntry{
			{Kind: state.LedgerReserve, Run: r.ID, GPUSeconds: 10},
			{Kind: state.LedgerRelease, Run: r.ID, GPUSeconds: 10},
			{Kind: state.LedgerCharge, Run: r.ID, Attempt: 1, GPUSeconds: 3},
		} {
			if _, err := s.AddLedger(e); err != nil {
				b.Fatal(err)
			}
		}
		for _, to := range path {
			if _, err := s.Transition(r.ID, 1, to, "", "", nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Check(); err != nil {
		b.Fatal(err)
	}
}

// killCampaign ends what a resumed controller in dir started: the
// controller itself and every process carrying the directory.
func killCampaign(dir string, controller *exec.Cmd) {
	controller.Process.Kill()
	controller.Wait()
	for _, pid := range campaignPIDsIn(dir) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// removeCampaignCgroup removes the campaign's cgroup root and its empty
// leaves, which the killed controllers left.
func removeCampaignCgroup(b *testing.B, dir string) {
	s, err := state.OpenReadOnly(dirlayout.State(dir), 5*time.Second)
	if err != nil {
		b.Error(err)
		return
	}
	cp, err := s.Campaign()
	s.Close()
	if err != nil {
		b.Error(err)
		return
	}
	m, err := launch.NewManager(cp.ID)
	if err != nil {
		b.Error(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Cleanup(ctx); err != nil {
		b.Error(err)
	}
}

// BenchmarkResume10000Runs times a resume of a 10,000-run campaign whose
// runs are all complete but the last, from the exec of
// "controller resume --foreground" to its "launching wave" log line (the
// reservation of the next run, just before its attempt starts). Target:
// under 1 s.
func BenchmarkResume10000Runs(b *testing.B) {
	fixture := filepath.Join(b.TempDir(), "fixture")
	bigCampaign(b, fixture)
	b.Cleanup(func() { removeCampaignCgroup(b, fixture) })
	work := filepath.Join(b.TempDir(), "camp")
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		os.RemoveAll(work)
		if out, err := exec.Command("cp", "-a", fixture, work).CombinedOutput(); err != nil {
			b.Fatalf("copy the fixture: %v %s", err, out)
		}
		cmd := exec.Command(controllerBin, "resume", "-d", work, "--foreground")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(stderr)
		launched := false
		for sc.Scan() {
			if strings.Contains(sc.Text(), "launching wave") {
				launched = true
				break
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		killCampaign(work, cmd)
		if !launched {
			b.Fatal("the resumed controller exited without launching the last run")
		}
		total += elapsed
		b.StartTimer()
	}
	b.StopTimer()
	mean := total / time.Duration(b.N)
	b.ReportMetric(mean.Seconds(), "s/resume-to-launch")
	b.Logf("resume of a %d-run campaign reached the launch of the next run in %v (mean of %d)", benchRuns, mean.Round(time.Millisecond), b.N)
}
