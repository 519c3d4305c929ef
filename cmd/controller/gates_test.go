package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/pkg/gpu/fakegpu"
	"warden/pkg/state"
)

// sleeper starts a process the test owns, to hold fake GPU memory as if it
// were someone else's; it is killed and waited for at cleanup.
func sleeper(t *testing.T) (int, uint64) {
	t.Helper()
	cmd := unrelated(t)
	st, err := fakegpu.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, st
}

// fakeHost makes a fake host with two GPUs that the test and the
// campaign share.
func fakeHost(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gpus")
	if err := fakegpu.Init(dir, 2, 143771); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPreflightGPUNotIdle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		uid    int
		reason state.Reason
	}{
		{"own leftover", os.Getuid(), state.ReasonGPUNotIdle},
		{"another user", 4242, state.ReasonForeignGPUProcess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			host := fakeHost(t)
			pid, st := sleeper(t)
			if err := fakegpu.ClaimFor(host, 0, pid, st, tc.uid, 2048); err != nil {
				t.Fatal(err)
			}
			c := newCampaign(t)
			out, code := c.controller("start", "-f", writeProtocol(t, scenario{patterns: 2}), "-d", c.dir, "--gpu-backend", "fake", "--fake-gpus", host, "--foreground")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, tail(out, 2000))
			}
			s := c.store()
			c.stoppedFor(s, tc.reason)
			as := c.attempts(s, "p1.saturation")
			if len(as) != 1 || as[0].Reason != tc.reason || len(as[0].Procs) != 0 {
				t.Fatalf("attempts %+v", as)
			}
			v := c.gateVerdict(s, "p1.saturation", "preflight")
			if v.Verdict != "fail" || !strings.Contains(v.Detail, "pid") || v.Figures["gpu0_used_mib"] != 2048 {
				t.Fatalf("preflight verdict %+v", v)
			}
			// p2 runs on GPU 1 in the same wave; nothing after the stop
			runs, _ := s.Runs()
			for _, r := range runs {
				if r.Attempts > 1 {
					t.Fatalf("run %s retried after a preflight stop", r.ID)
				}
			}
			c.assertNoProcesses()
		})
	}
}

func TestForeignProcessAppears(t *testing.T) {
	t.Parallel()
	host := fakeHost(t)
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 3, measureS: "2", cleanupS: "2"})
	c.start(proto, "--fake-gpus", host)
	gpu := map[string]int{"s0": 0, "s1": 1}[c.waitMeasuring().Slot]
	// another user's process takes memory on the GPU while the run measures
	pid, st := sleeper(t)
	if err := fakegpu.ClaimFor(host, gpu, pid, st, 4242, 4096); err != nil {
		t.Fatal(err)
	}
	c.waitUnlocked("the controller to stop", 120*time.Second)
	s := c.store()
	cp := c.stoppedFor(s, state.ReasonForeignGPUProcess)
	if !strings.Contains(cp.StopDetail, "pid") {
		t.Fatalf("stop detail does not name the process: %s", cp.StopDetail)
	}
	c.assertNoProcesses()
}

// An engine child that escapes everything the controller can see (a new
// session, a cleared environment, no cgroup) keeps its GPU memory: the
// cleanup gate fails naming it, and the campaign stops.
func TestCleanupGateFails(t *testing.T) {
	t.Parallel()
	host := fakeHost(t)
	c := newCampaign(t)
	server := `{shell: 'env -i PATH="$PATH" WARDEN_FAKE_GPU_DIR="$WARDEN_FAKE_GPU_DIR" CUDA_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES" setsid ${STANDIN} orphan --gpu-mem-mib 512 >/dev/null 2>&1 & exec ${STANDIN} server --port ${PORT} --load-s 0.2 --shutdown-timeout 1 --effective-config "effective config: enable_chunked_prefill=True"'}`
	proto := writeProtocol(t, scenario{server: server, cleanupS: "2"})
	t.Cleanup(func() { killClaimers(t, host) })
	out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--fake-gpus", host, "--cgroups", "off", "--foreground")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(out, 2000))
	}
	s := c.store()
	c.stoppedFor(s, state.ReasonCleanupTimeout)
	v := c.gateVerdict(s, "p1.saturation", "cleanup")
	if v.Verdict != "fail" || v.Figures["gpu0_used_mib"] != 512 || !strings.Contains(v.Detail, "MiB used") || !strings.Contains(v.Detail, "pid ") {
		t.Fatalf("cleanup verdict %+v", v)
	}
}

// killClaimers ends the processes that hold claims on the fake host: the
// test's own descendants that escaped the campaign.
func killClaimers(t *testing.T, host string) {
	b, err := fakegpu.Open(host)
	if err != nil {
		return
	}
	for i := range b.Count() {
		procs, _ := b.Processes(i)
		for _, p := range procs {
			if st, err := fakegpu.StartTime(p.PID); err == nil && st == p.StartTime {
				syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
	}
}

func TestBudgetRefusedBeforeWave(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	// the first wave reserves 2 runs x 10 s x 1 GPU = 20 GPU-s; the cap is 18 GPU-s
	// start refuses the protocol (its estimate passes the cap) unless told otherwise
	proto := writeProtocol(t, scenario{patterns: 2, capGPUHours: "0.005"})
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground"); code != exitOverBudget || !strings.Contains(out, "over budget") {
		t.Fatalf("start over budget: exit %d, want %d:\n%s", code, exitOverBudget, out)
	}
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground", "--allow-over-budget"); code != 0 {
		t.Fatalf("start --allow-over-budget: exit %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "budget" || cp.StopFigures["wave_gpu_hours"] <= 0 || cp.StopFigures["cap_gpu_hours"] != 0.005 {
		t.Fatalf("campaign %s %s %v", cp.State, cp.StopReason, cp.StopFigures)
	}
	runs, _ := s.Runs()
	for _, r := range runs {
		if r.Attempts != 0 {
			t.Fatalf("run %s launched after the budget refusal", r.ID)
		}
	}
	if cp.ReservedGPUSeconds != 0 {
		t.Fatalf("reserved %v after a refused wave", cp.ReservedGPUSeconds)
	}
}

func TestConfigMismatchStops(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{patterns: 2, expect: `max_num_batched_tokens=2048\b`})
	cp := c.stoppedFor(s, state.ReasonConfigMismatch)
	as := c.attempts(s, "p1.saturation")
	if len(as) != 1 || as[0].Reason != state.ReasonConfigMismatch || !strings.Contains(cp.StopDetail, "max_num_batched_tokens") {
		t.Fatalf("attempts %+v; detail %s", as, cp.StopDetail)
	}
	c.assertNoProcesses()
}

func TestPrivacyViolation(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	// a client that leaves a record with a prompt field in its output
	proto := editProtocol(t, writeProtocol(t, scenario{patterns: 2, clientArgs: `, --max-tokens, "4"`}),
		`client: ["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client", --drain-extra-s, "${DRAIN_EXTRA}" , --max-tokens, "4"]`,
		`client: {shell: 'mkdir -p "$WARDEN_ATTEMPT_DIR/client" && echo "{\"request\": 1, \"prompt\": \"tell me a secret\"}" > "$WARDEN_ATTEMPT_DIR/client/requests.jsonl" && exec ${STANDIN} client --warmup-s 0.2 --measure-s 0.5 --drain-s 2'}`)
	c.runForeground(proto)
	s := c.store()
	c.stoppedFor(s, state.ReasonPrivacyViolation)
	v := c.gateVerdict(s, "p1.saturation", "privacy")
	if v.Verdict != "fail" || !strings.Contains(v.Detail, "client/requests.jsonl") || !strings.Contains(v.Detail, "prompt") || strings.Contains(v.Detail, "tell me a secret") {
		t.Fatalf("privacy verdict %+v", v)
	}
}

func TestDiskLimitStops(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	// no file system here has a petabyte free
	proto := editProtocol(t, writeProtocol(t, scenario{patterns: 2}), "stop: {", "stop: {min_free_gb: 1000000, ")
	c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "disk" || cp.StopFigures["min_free_gb"] != 1e6 || !strings.Contains(cp.StopDetail, "GB free") {
		t.Fatalf("campaign %s %s %v %s", cp.State, cp.StopReason, cp.StopFigures, cp.StopDetail)
	}
	runs, _ := s.Runs()
	for _, r := range runs {
		if r.Attempts != 0 {
			t.Fatalf("run %s launched despite the disk limit", r.ID)
		}
	}
}
