package attempt_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/pkg/attempt"
	"warden/pkg/launch"
	"warden/pkg/phasefile"
	"warden/pkg/record"
	"warden/pkg/state"
	"warden/protocols"
)

// measureFailed is the path of an attempt that failed with reason while
// its client measured.
func measureFailed(reason string) string {
	return "reserved preflight starting ready measuring stopping:" + reason + " cleanup failed:" + reason
}

// quarantinedPath is the path of an attempt quarantined with reason.
func quarantinedPath(reason string) string {
	return "reserved preflight starting ready measuring stopping cleanup validating quarantined:" + reason
}

// standinClient is the stand-in's load client, its own drain bound
// drainS seconds.
func standinClient(drainS string) protocols.CommandSpec {
	return protocols.CommandSpec{Argv: []string{standinBin, "client", "--warmup-s", "0.2", "--measure-s", "0.5", "--drain-s", drainS,
		"--concurrency", "2", "--result-dir", "${ATTEMPT_DIR}/client"}}
}

// resultFileDrain is a load whose end of admission is in its result, the
// client writing result and exiting 0.
func resultFileDrain(h *harness, result string) {
	h.run.AdmissionEnd = "result-file"
	h.run.DrainS, h.run.WatchdogS = 1, 20
	h.run.Client = phaseClient([]string{"-result", result})
}

// drainCases are the measured interval's outcomes (drain.go, gpuprocs.go):
// the client's start and exit, the drain judgement from its phase file or
// its result, the measuring deadline, the sampler's foreign sighting, a
// background load's end.
var drainCases = []phaseCase{
	{
		name: "client cannot be started",
		prep: func(h *harness) {
			h.run.Client = protocols.CommandSpec{Argv: []string{filepath.Join(h.t.TempDir(), "no-such-client")}}
		},
		path: readyFailed("harness-error"),
		check: func(h *harness) {
			h.wantDetail("start client: ")
			h.chargedOnce()
		},
	},
	{
		// the processes are stopped, the time they were proven gone goes
		// to the end log, nothing is charged: resume charges the attempt,
		// left live in the records
		name: "the record of measuring refused",
		prep: func(h *harness) {
			h.openEnds()
			h.run.Client = phaseClient(nil, "hang")
			h.refuseAt(state.Measuring)
		},
		path: "reserved preflight starting measuring!",
		check: func(h *harness) {
			h.wantEnded()
			key := record.Key(runID, 1)
			if f := h.flights.String(); !strings.HasSuffix(f, "remove "+strconv.Quote(key)) {
				h.t.Fatalf("in flight: %s, want the attempt's GPU time released", f)
			}
		},
	},
	{
		name: "client fails",
		prep: func(h *harness) { h.run.Client = phaseClient([]string{"-exit", "2"}, "warmup", "clean") },
		path: measureFailed("client-failed"),
		check: func(h *harness) {
			h.wantDetail("client exit code 2")
			if e, ok := h.rec.exitOf("client"); !ok || e.Code != 2 {
				h.t.Fatalf("client exit %+v (%v)", e, ok)
			}
		},
	},
	{
		// ($$ is $ to the protocol's expansion)
		name:  "client killed by a signal",
		prep:  func(h *harness) { h.run.Client = shell(`kill -KILL $$$$`) },
		path:  measureFailed("client-failed"),
		check: func(h *harness) { h.wantDetail("client killed by SIGKILL") },
	},
	{
		// Warden's load client exits 4 when it abandoned requests at its
		// drain bound: a cut drain is never complete
		name:  "client abandons requests at its drain bound",
		prep:  func(h *harness) { h.run.Client = phaseClient([]string{"-exit", "4"}, "drain", "done") },
		path:  measureFailed("drain-abandoned"),
		check: func(h *harness) { h.wantDetail("client exit code 4: it abandoned requests") },
	},
	{
		// fail closed: a client that exits 0 and never said when
		// admission stopped is not complete by default
		name: "no drain line",
		prep: func(h *harness) { h.run.Client = phaseClient(nil, "warmup", "clean") },
		path: measureFailed("drain-unseen"),
		check: func(h *harness) {
			if v := h.gate("drain"); v.Verdict != state.VerdictFail || !strings.Contains(v.Detail, "never said when admission stopped") || v.Figures["allowance_s"] != 5 {
				h.t.Fatalf("drain gate %+v", v)
			}
		},
	},
	{
		name: "drain times in the result, within the allowance",
		prep: func(h *harness) {
			resultFileDrain(h, `{"drain":{"start_mono_ns":1000000000,"end_mono_ns":1500000000}}`)
		},
		path: happy,
		check: func(h *harness) {
			if d, _ := h.rec.figure("drain_s"); d != 0.5 {
				h.t.Fatalf("drain_s %v, want 0.5", d)
			}
		},
	},
	{
		name: "drain times in the result, over the allowance",
		prep: func(h *harness) {
			resultFileDrain(h, `{"drain":{"start_mono_ns":1000000000,"end_mono_ns":4000000000}}`)
		},
		path: quarantinedPath("drain-quarantine"),
		check: func(h *harness) {
			if d, _ := h.rec.figure("drain_s"); d != 3 {
				h.t.Fatalf("drain_s %v, want 3", d)
			}
			h.wantDetail("drain 3.0 s over the 1 s allowance of class c")
		},
	},
	{
		name: "no drain times in the result",
		prep: func(h *harness) { resultFileDrain(h, `{"clean":{}}`) },
		path: measureFailed("drain-unseen"),
		check: func(h *harness) {
			h.wantDetail("no drain times in the client's result client/result.json")
		},
	},
	{
		// a drain nobody can time: the gate says so (error), never passes
		name: "drained line before the drain line",
		prep: func(h *harness) { h.run.Client = phaseClient(nil, "drain", "drained@-2") },
		path: measureFailed("harness-error"),
		check: func(h *harness) {
			if v := h.gate("drain"); v.Verdict != state.VerdictError || !strings.Contains(v.Detail, "invalid drain time") {
				h.t.Fatalf("drain gate %+v, want an error naming the invalid drain time", v)
			}
		},
	},
	{
		// A-P3-5, drain quarantine: over the allowance, within the watchdog
		name: "drain past its allowance",
		prep: func(h *harness) {
			h.run.DrainS, h.run.WatchdogS = 1, 10
			h.run.Client = phaseClient(nil, "drain", "+1.2", "drained", "done")
		},
		path: quarantinedPath("drain-quarantine"),
		check: func(h *harness) {
			if d, _ := h.rec.figure("drain_s"); d <= 1.2 || d >= 10 {
				h.t.Fatalf("drain_s %v, want over 1.2 s and under the 10 s watchdog", d)
			}
			if v := h.gate("drain"); v.Figures["quarantine"] != 1 || v.Figures["allowance_s"] != 1 {
				h.t.Fatalf("drain gate %+v", v)
			}
			h.wantDetail("over the 1 s allowance of class c")
		},
	},
	{
		// A server that stalls its last requests past the class allowance,
		// not past the watchdog: the stand-in client waits for them (its
		// bound is the watchdog) and completes every request it admitted;
		// the run is drain-quarantined, never complete. Requests arriving
		// 0.3 s after the first (inside the 0.5 s clean interval after the
		// 0.2 s warm-up) wait 2 s: the drain lasts at least 1.6 s.
		name: "a stalling server's requests past the allowance",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--stall-after-s", "0.3", "--stall-s", "2")
			h.run.DrainS, h.run.WatchdogS = 1, 60
			h.run.Client = standinClient("60")
		},
		path: quarantinedPath("drain-quarantine"),
		check: func(h *harness) {
			if d, _ := h.rec.figure("drain_s"); d <= 1 || d >= 60 {
				h.t.Fatalf("drain_s %v, want over the 1 s allowance and under the 60 s watchdog", d)
			}
			if v := h.gate("drain"); v.Figures["quarantine"] != 1 || v.Figures["allowance_s"] != 1 {
				h.t.Fatalf("drain gate %+v", v)
			}
			b, err := os.ReadFile(filepath.Join(h.adir, "client", "result.json"))
			var res struct{ Requests, Completed, Failed int }
			if err != nil || json.Unmarshal(b, &res) != nil || res.Failed != 0 || res.Completed != res.Requests || res.Requests == 0 {
				h.t.Fatalf("client result (%v): %s", err, b)
			}
		},
	},
	{
		name: "drain past its watchdog while the client runs",
		prep: func(h *harness) {
			h.run.DrainS, h.run.WatchdogS = 0.5, 1
			h.run.Client = phaseClient(nil, "drain", "hang")
		},
		path: measureFailed("drain-watchdog"),
		check: func(h *harness) {
			h.wantDetail("past the 1 s watchdog of class c")
			if v := h.gate("drain"); v.Verdict != state.VerdictFail {
				h.t.Fatalf("drain gate %+v", v)
			}
			if got := h.rec.signalsTo("client"); !strings.HasPrefix(got, "SIGTERM/pid") {
				h.t.Fatalf("client signals %q: want it ended gracefully", got)
			}
		},
	},
	{
		// past the watchdog the run fails, the campaign stops for review
		// (the outcome policy's)
		name: "a stalling server's requests past the watchdog",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--stall-after-s", "0", "--stall-s", "120")
			h.run.DrainS, h.run.WatchdogS = 0.5, 1
			h.run.Client = standinClient("2")
		},
		path: measureFailed("drain-watchdog"),
	},
	{
		// The drain ends when every admitted request has ended (the
		// drained line), not when the client has written its results
		// (done): seed 002 times the drain from the end of admission
		// until the outstanding requests are in (A-P3-3). A client that
		// spends longer than the watchdog writing its results after a
		// short drain completes.
		name: "drain ends at the drained line",
		prep: func(h *harness) {
			h.run.DrainS, h.run.WatchdogS = 0.8, 1
			h.run.Client = phaseClient(nil, "drain", "drained", "+1.5", "done")
		},
		path: happy,
		check: func(h *harness) {
			lines, err := phasefile.ReadFile(filepath.Join(h.adir, "phases.jsonl"))
			if err != nil {
				h.t.Fatal(err)
			}
			at := map[string]time.Time{}
			for _, l := range lines {
				if at[l.Phase], err = time.Parse(time.RFC3339Nano, l.T); err != nil {
					h.t.Fatal(err)
				}
			}
			drain, drained, done := at[phasefile.Drain], at[phasefile.Drained], at[phasefile.Done]
			if drained.IsZero() || done.Sub(drained) < 1500*time.Millisecond {
				h.t.Fatalf("phases %+v: want a drained line at least 1.5 s before done", lines)
			}
			if got, want := figureOf(h, "drain_s"), drained.Sub(drain).Seconds(); got != want {
				h.t.Fatalf("drain_s %v, want the %v s from the drain line to the drained line", got, want)
			}
		},
	},
	{
		// a client that writes no drained line has its drain timed to its
		// done line: its result write counts, here past the watchdog
		name: "no drained line: the drain ends at done",
		prep: func(h *harness) {
			h.run.DrainS, h.run.WatchdogS = 0.8, 1
			h.run.Client = phaseClient(nil, "drain", "+1.5", "done")
		},
		path: measureFailed("drain-watchdog"),
	},
	{
		// nothing runs unbounded: a client past the load's measuring
		// deadline is ended through the graceful path, and the run fails
		name: "measuring deadline ends a hang",
		prep: func(h *harness) {
			h.run.DeadlineS = 1
			h.run.Client = phaseClient(nil, "hang")
		},
		path: measureFailed("measure-deadline"),
		check: func(h *harness) {
			h.wantDetail("past the 1 s measuring deadline of load saturation; ended")
			if figureOf(h, "measure_deadline_s") != 1 || figureOf(h, "client_ran_s") < 1 {
				h.t.Fatalf("figures: deadline %v, client ran %v", figureOf(h, "measure_deadline_s"), figureOf(h, "client_ran_s"))
			}
			if got := h.rec.signalsTo("client"); !strings.HasPrefix(got, "SIGTERM/pid") {
				h.t.Fatalf("client signals %q: want SIGTERM first", got)
			}
		},
	},
	{
		// A controller held up (stopped, or descheduled) while the client
		// ended within its deadline finds the deadline and the client's
		// exit both pending: the run is judged on the exit, and the
		// exited client is never signalled. The hook holds the attempt at
		// its transition to measuring until both have happened.
		name: "client exits as its deadline comes due",
		prep: func(h *harness) {
			h.run.DeadlineS = 0.3
			h.at(state.Measuring, func(rep record.Report) {
				for _, p := range rep.Procs {
					id := launch.Identity{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID}
					waitUntil(h.t, "the client to exit past its deadline", func() bool {
						alive, _ := id.Alive(nil)
						return !alive && time.Since(p.StartedAt) > 300*time.Millisecond
					})
				}
			})
		},
		path: happy,
		check: func(h *harness) {
			if got := h.rec.signalsTo("client"); got != "" {
				h.t.Fatalf("the exited client was signalled: %s", got)
			}
		},
	},
	{
		name: "stopped while measuring",
		prep: func(h *harness) {
			h.run.Client = phaseClient(nil, "hang")
			h.stopAt(state.Measuring, nil)
		},
		path: "reserved preflight starting ready measuring interrupted:interrupted",
		check: func(h *harness) {
			h.wantDetail("stopped while measuring")
			h.chargedOnce()
			if got := h.rec.signalsTo("client"); !strings.HasPrefix(got, "SIGTERM/pid") {
				h.t.Fatalf("client signals %q", got)
			}
		},
	},
	{
		// a background load of a co-location check: its target done, its
		// client is ended, the run's normal end
		name: "background load ends with its target",
		prep: func(h *harness) {
			measuring, until := make(chan string, 1), make(chan struct{})
			h.opts = optionsOf(measuring, until)
			h.run.Client = phaseClient(nil, "hang")
			h.at(state.Measuring, func(record.Report) { close(until) })
			h.t.Cleanup(func() {
				if got := <-measuring; got != runID {
					h.t.Errorf("measuring announced %q", got)
				}
			})
		},
		path: happy,
		check: func(h *harness) {
			if h.out.EarlyBackground {
				h.t.Fatal("a background load that ran until its target was done is marked early")
			}
		},
	},
	{
		name: "background load ends before its target",
		prep: func(h *harness) {
			h.opts = optionsOf(make(chan string, 1), make(chan struct{}))
			h.run.Client = phaseClient(nil, "drain", "drained", "done")
		},
		path: measureFailed("client-failed"),
		check: func(h *harness) {
			h.wantDetail("background load ended before its target (exit code 0)")
			if !h.out.EarlyBackground {
				h.t.Fatal("not marked early")
			}
		},
	},
	{
		// A client that moves its run directory away and leaves a link
		// out of the campaign in its place, and replaces the attempt's
		// gates.jsonl by a link out too: the controller writes nothing
		// outside the campaign directory, and the phase file it can no
		// longer read beneath it is a drain unseen.
		name: "links the client planted are not followed",
		prep: func(h *harness) {
			out := h.t.TempDir()
			h.run.Client = shell(`ln -sf ` + out + `/gates.jsonl "$$WARDEN_ATTEMPT_DIR/gates.jsonl"; d="$$WARDEN_RUN_DIR"; mv "$$d" "$$d.moved" && ln -s ` + out + ` "$$d"; exit 0`)
			h.t.Cleanup(func() { wantEmpty(h.t, out) })
		},
		path: measureFailed("drain-unseen"),
	},
	{
		// seed 002 stop condition 2: another user's GPU process appears
		// while the run measures; the sampler sees it
		name: "foreign GPU process appears while measuring",
		prep: func(h *harness) {
			h.run.Client = phaseClient(nil, "hang")
			h.at(state.Measuring, func(record.Report) { h.claim(0, 4242, 4096) })
			h.at(state.Stopping, func(record.Report) { h.claim(0, 4242, 0) })
		},
		path:  measureFailed("foreign-gpu-process"),
		gates: "preflight:pass cpu-local:pass port:pass listener:pass effective-config:pass gpu-processes:fail cleanup:pass",
		check: func(h *harness) {
			if v := h.gate("gpu-processes"); !strings.Contains(v.Detail, "pid "+strconv.Itoa(os.Getpid())) {
				h.t.Fatalf("gpu-processes gate %+v", v)
			}
			h.wantDetail("pid " + strconv.Itoa(os.Getpid()))
		},
	},
}

func TestDrain(t *testing.T) {
	t.Parallel()
	runCases(t, drainCases)
}

// figureOf is the attempt's figure k as last recorded (0 when none).
func figureOf(h *harness, k string) float64 {
	v, _ := h.rec.figure(k)
	return v
}

// optionsOf are the options of a background load: measuring hears of its
// client's start, closing until ends it.
func optionsOf(measuring chan<- string, until <-chan struct{}) attempt.Options {
	return attempt.Options{Measuring: measuring, Until: until}
}

// wantEmpty fails the test if anything was written in dir.
func wantEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 0 {
		t.Errorf("the controller wrote outside the campaign directory: %v", names)
	}
}
