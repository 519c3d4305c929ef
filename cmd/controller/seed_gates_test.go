package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/campaigndir"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/gpu/sample"
	"warden/pkg/state"
)

// privatePrompt is a prompt of the private manifest; leakMid is 48 bytes
// from its middle, leakShort 47 of them.
const privatePrompt = "Summarize the discharge letter of the patient in bed twelve and list every medication with its dose and the name of the ward doctor"

var (
	leakMid   = privatePrompt[40:88]
	leakShort = leakMid[:47]
)

// The commands that copy those pieces out of the manifest (its line
// starts with 21 bytes before the prompt): the command log may name the
// private file, never hold its text.
const (
	cutMid   = `cut -c 62-109 MANIFEST`
	cutShort = `cut -c 62-108 MANIFEST`
)

// privateProtocol writes a protocol whose provenance holds a private
// manifest with privatePrompt, and whose saturation client first runs
// shell (with $WARDEN_ATTEMPT_DIR set, and MANIFEST replaced by the
// manifest's path), then the stand-in client.
func privateProtocol(t *testing.T, patterns int, shell string) string {
	t.Helper()
	pdir := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(pdir, 0o700); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(pdir, "p10.jsonl")
	if err := os.WriteFile(manifest, []byte(`{"id": 1, "prompt": "`+privatePrompt+`", "max_tokens": 4}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client := `["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client"]`
	if shell != "" {
		client = `{shell: 'mkdir -p "$WARDEN_ATTEMPT_DIR/client" && ` + strings.ReplaceAll(shell, "MANIFEST", manifest) + ` && exec ${STANDIN} client --warmup-s 0.2 --measure-s 0.5 --drain-s 2 --concurrency 2 --result-dir "$WARDEN_ATTEMPT_DIR/client"'}`
	}
	proto := writeProtocol(t, scenario{patterns: patterns, client: client})
	return appendProtocol(t, proto, "provenance:\n  - {path: "+manifest+", role: manifest, private: true}\n")
}

// A piece of 48 bytes from the middle of a private prompt, in a file of
// the attempt, fails the run privacy-violation and stops the campaign
// (seed 002 stop condition 8: "source prompt substring"); the verdict
// names the value by its hash, never by its text.
func TestSeedPrivacyMidPromptSubstring(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := privateProtocol(t, 2, cutMid+` > "$WARDEN_ATTEMPT_DIR/client/debug.log"`)
	c.runForeground(proto)
	s := c.store()
	c.stoppedFor(s, state.ReasonPrivacyViolation)
	v := c.gateVerdict(s, "p1.saturation", "privacy")
	if v.Verdict != "fail" || v.Figures["findings"] != 1 || !strings.Contains(v.Detail, "client/debug.log: private text (48+ bytes of private value sha256:") || strings.Contains(v.Detail, leakMid[:20]) {
		t.Fatalf("privacy verdict %+v", v)
	}
	if as := c.attempts(s, "p1.saturation"); len(as) != 1 || as[0].Reason != state.ReasonPrivacyViolation {
		t.Fatalf("attempts %+v", as)
	}
}

// 47 bytes of it are no leak: the campaign completes, and the scan of
// the campaign's own files after the second attempt reads again only
// what changed since the first.
func TestSeedPrivacyShortPieceAndCampaignFiles(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := privateProtocol(t, 2, cutShort+` > "$WARDEN_ATTEMPT_DIR/client/debug.log"`)
	testcampaign.Edit(t, proto, "{name: two, concurrency: 2}", "{name: two, concurrency: 1}")
	c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		v := c.gateVerdict(s, run, "privacy-campaign")
		if v.Verdict != "pass" || v.Figures["private_values"] != 1 || v.Figures["min_leak_bytes"] != 48 || v.Figures["files_scanned"] < 1 {
			t.Fatalf("%s: campaign privacy verdict %+v", run, v)
		}
	}
	// one run after the other: the second scan leaves out what the first
	// found clean and nobody changed since (plan.json, controller.json,
	// provenance/SHA256SUMS)
	first, second := "p1.saturation", "p2.saturation"
	if c.attempts(s, first)[0].CreatedAt.After(c.attempts(s, second)[0].CreatedAt) {
		first, second = second, first
	}
	va, vb := c.gateVerdict(s, first, "privacy-campaign"), c.gateVerdict(s, second, "privacy-campaign")
	if va.Figures["files_unchanged"] != 0 || vb.Figures["files_unchanged"] < 3 || vb.Figures["files_scanned"] < 1 {
		t.Fatalf("files left out as unchanged: first %v, second %v", va.Figures, vb.Figures)
	}
}

// The same piece written into controller.log, outside every attempt
// directory, is found by the scan of the campaign's own files.
func TestSeedPrivacyControllerLog(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := privateProtocol(t, 1, cutMid+` >> "$WARDEN_ATTEMPT_DIR/../../../controller.log"`)
	c.runForeground(proto)
	s := c.store()
	c.stoppedFor(s, state.ReasonPrivacyViolation)
	if v := c.gateVerdict(s, "p1.saturation", "privacy"); v.Verdict != "pass" {
		t.Fatalf("attempt privacy verdict %+v", v)
	}
	v := c.gateVerdict(s, "p1.saturation", "privacy-campaign")
	if v.Verdict != "fail" || !strings.Contains(v.Detail, "controller.log: private text (48+ bytes") {
		t.Fatalf("campaign privacy verdict %+v", v)
	}
}

// Without NVML, start with auto (the default) or nvml refuses, exit 5,
// saying how to ask for fake GPUs, and leaves no campaign directory:
// auto never means fake.
func TestSeedAutoNeverFake(t *testing.T) {
	t.Parallel()
	if campaigndir.CheckNVML("nvml") == nil {
		t.Skip("NVML initializes on this host: auto is NVML here")
	}
	proto := writeProtocol(t, scenario{})
	for _, args := range [][]string{{}, {"--gpu-backend", "auto"}, {"--gpu-backend", "nvml"}} {
		c := newCampaign(t)
		out, code := c.controller(append([]string{"start", "-f", proto, "-d", c.dir, "--foreground"}, args...)...)
		if code != exitNoGPUs || exitNoGPUs == exitInvalid || exitNoGPUs == exitOverBudget || exitNoGPUs == exitDied ||
			!strings.Contains(out, "needs NVML, which did not initialize") || !strings.Contains(out, "pass --gpu-backend fake") {
			t.Fatalf("start %v: exit %d, want %d:\n%s", args, code, exitNoGPUs, out)
		}
		if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
			t.Fatalf("start %v left %s (%v)", args, c.dir, err)
		}
	}
}

// Resume refuses, exit 5, a campaign on NVML where NVML does not
// initialize, and a fake campaign whose fake GPUs auto chose (before auto
// stopped doing so) unless --gpu-backend fake is given; a campaign asked
// to run on fake GPUs resumes.
func TestSeedResumeBackend(t *testing.T) {
	t.Parallel()
	if campaigndir.CheckNVML("nvml") == nil {
		t.Skip("NVML initializes on this host")
	}
	c := newCampaign(t)
	// a server that exits at once: the campaign stops for review, unfinished
	c.runForeground(writeProtocol(t, scenario{server: `["/bin/false"]`}))
	if cp, _ := c.store().Campaign(); cp.State != state.CampaignStopped || cp.GPUBackend != "fake" {
		t.Fatalf("campaign %s %s, backend %q", cp.State, cp.StopReason, cp.GPUBackend)
	}
	setPath := filepath.Join(c.dir, campaigndir.SettingsFile)
	orig, err := os.ReadFile(setPath)
	if err != nil {
		t.Fatal(err)
	}
	var set map[string]any
	if err := json.Unmarshal(orig, &set); err != nil || set["fake_gpus_explicit"] != true {
		t.Fatalf("settings %s (%v)", orig, err)
	}
	rewrite := func(mutate func(map[string]any)) {
		m := map[string]any{}
		json.Unmarshal(orig, &m)
		mutate(m)
		b, _ := json.Marshal(m)
		if err := os.WriteFile(setPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(func(m map[string]any) { m["gpu_backend"] = "nvml"; delete(m, "fake_gpus_explicit") })
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != exitNoGPUs || !strings.Contains(out, "--gpu-backend nvml needs NVML") {
		t.Fatalf("resume of an NVML campaign without NVML: exit %d:\n%s", code, out)
	}
	rewrite(func(m map[string]any) { delete(m, "fake_gpus_explicit") })
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != exitNoGPUs || !strings.Contains(out, "chosen by auto") {
		t.Fatalf("resume of a fake campaign auto chose: exit %d:\n%s", code, out)
	}
	if out, code := c.controller("--resume", "-d", c.dir, "--foreground"); code != exitNoGPUs {
		t.Fatalf("--resume of a fake campaign auto chose: exit %d:\n%s", code, out)
	}
	if out, code := c.controller("--resume", "-d", c.dir, "--foreground", "--gpu-backend", "fake"); code == exitNoGPUs || strings.Contains(out, "needs NVML") {
		t.Fatalf("--resume with --gpu-backend fake: exit %d:\n%s", code, out)
	}
}

// Another user's process that appears on the run's fake GPU mid-run (a
// claim file for a process the test started, recorded under another uid)
// fails the run foreign-gpu-process within a sample, and the campaign
// stops for review (seed 002 stop condition 2: "another user's GPU
// process appears"). The samples file records it with its pid and uid.
func TestSeedForeignGPUProcessMidRun(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 1, measureS: "30", watchdogS: "60"})
	appendProtocol(t, proto, "sample_interval_s: 0.1\n")
	c.start(proto)
	cur := c.waitMeasuring()
	gpuIdx := map[string]int{"s0": 0, "s1": 1}[cur.Slot]

	foreign := exec.Command("sleep", "300")
	if err := foreign.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	reap := func() {
		if !reaped {
			foreign.Process.Kill()
			foreign.Wait()
			reaped = true
		}
	}
	t.Cleanup(reap)
	start, err := fakegpu.StartTime(foreign.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := fakegpu.ClaimFor(filepath.Join(c.dir, "fake-gpus"), gpuIdx, foreign.Process.Pid, start, os.Getuid()+1, 2048); err != nil {
		t.Fatal(err)
	}
	// once the attempt ends its processes, the stranger leaves, so that
	// cleanup has nothing of it left to wait for
	waitFor(t, "the attempt to stop measuring", 60*time.Second, func() bool {
		for _, cu := range c.liveStatus().Current {
			if cu.Run == cur.Run && cu.State == string(state.Measuring) {
				return false
			}
		}
		return true
	})
	reap()
	c.waitExit()

	s := c.store()
	c.stoppedFor(s, state.ReasonForeignGPUProcess)
	as := c.attempts(s, cur.Run)
	if len(as) != 1 || as[0].State != state.Failed || as[0].Reason != state.ReasonForeignGPUProcess {
		t.Fatalf("attempts of %s: %+v", cur.Run, as)
	}
	v := c.gateVerdict(s, cur.Run, "gpu-processes")
	want := fmt.Sprintf("GPU %d: another user's process (pid %d, uid %d) holds 2048 MiB", gpuIdx, foreign.Process.Pid, os.Getuid()+1)
	if v.Verdict != "fail" || !strings.Contains(v.Detail, want) || v.Figures["foreign_processes_other_users"] != 1 {
		t.Fatalf("gpu-processes verdict %+v; want %q", v, want)
	}
	recs, err := sample.ReadFile(filepath.Join(c.dir, "runs", cur.Run, "a1", "gpu-samples.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var withStranger, withServer int
	for _, r := range recs {
		for _, g := range r.GPUs {
			for _, p := range g.Procs {
				if p.PID == foreign.Process.Pid && p.UID == os.Getuid()+1 && p.UsedMiB == 2048 {
					withStranger++
				} else if p.UID == os.Getuid() {
					withServer++
				}
			}
		}
	}
	if withStranger == 0 || withServer == 0 {
		t.Fatalf("samples: %d with the stranger, %d with the server's own claim", withStranger, withServer)
	}
	c.assertNoProcesses()
}

// A clean run passes the gpu-processes gate, having judged its samples:
// its own server's claim is never a stranger.
func TestSeedGPUProcessesPass(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 1, measureS: "1"})
	appendProtocol(t, proto, "sample_interval_s: 0.05\n")
	c.runForeground(proto)
	s := c.store()
	if cp, _ := s.Campaign(); cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	v := c.gateVerdict(s, "p1.saturation", "gpu-processes")
	if v.Verdict != "pass" || v.Figures["samples"] < 2 || v.Figures["foreign_processes"] != 0 {
		t.Fatalf("gpu-processes verdict %+v", v)
	}
}
