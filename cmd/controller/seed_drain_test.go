package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/phasefile"
	"warden/pkg/state"
)

// stallClient is the stand-in client with its own drain bound given by
// the run's class (${DRAIN_WATCHDOG_S}), as the protocols pass it to
// loadgen: it waits for every request it admitted until the watchdog.
const stallClient = `["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "${DRAIN_WATCHDOG_S}", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client"]`

// A server that stalls its last requests past the class allowance, but
// not past the watchdog: the client waits for them (its bound is the
// watchdog), the drain is over the allowance, and the run is
// drain-quarantined, never complete (A-P3-5, drain quarantine).
func TestServerStallPastAllowanceQuarantines(t *testing.T) {
	t.Parallel()
	// requests arriving 0.3 s after the first (inside the 0.5 s clean
	// interval that follows the 0.2 s warm-up) wait 3 s: the drain lasts
	// at least 3 s - 0.4 s > the 1 s allowance
	c, s := ranScenario(t, scenario{serverArgs: `, --stall-after-s, "0.3", --stall-s, "3"`,
		client: stallClient, drainS: "1", watchdogS: "60"})
	as := c.soleAttempt(s, "p1.saturation", state.Quarantined, state.ReasonDrainQuarantine)
	if d := as[0].Figures["drain_s"]; d <= 1 || d >= 60 {
		t.Fatalf("drain_s %v, want over the 1 s allowance and under the 60 s watchdog", d)
	}
	v := c.gateVerdict(s, "p1.saturation", "drain")
	if v.Figures["quarantine"] != 1 || v.Figures["allowance_s"] != 1 {
		t.Fatalf("drain gate %+v", v)
	}
	// the client waited for every request it admitted: none abandoned
	b, err := os.ReadFile(filepath.Join(as[0].Dir, "client", "result.json"))
	var res struct{ Requests, Completed, Failed int }
	if err != nil || json.Unmarshal(b, &res) != nil || res.Failed != 0 || res.Completed != res.Requests || res.Requests == 0 {
		t.Fatalf("client result (%v): %s", err, b)
	}
	c.assertNoProcesses()
}

// Past the watchdog, the run fails (drain-watchdog) and the campaign stops
// for review.
func TestServerStallPastWatchdogFails(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{serverArgs: `, --stall-after-s, "0", --stall-s, "120"`,
		client: stallClient, drainS: "1", watchdogS: "2"})
	c.soleAttempt(s, "p1.saturation", state.Failed, state.ReasonDrainWatchdog)
	c.stoppedFor(s, state.ReasonDrainWatchdog)
	c.assertNoProcesses()
}

// slowResultClient drains at once, then takes 6 s before it writes its
// results and its done line: past the 4 s allowance and the 5 s watchdog
// the tests below give its class. EXTRA is its extra flags.
const slowResultClient = `["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "${DRAIN_WATCHDOG_S}", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client", --result-delay-s, "6" EXTRA]`

// The drain ends when every admitted request has ended (the client's
// drained line), not when the client has written its results (done):
// seed 002 times the drain from the end of admission until the
// outstanding requests are in (A-P3-3). A client that spends longer than
// the watchdog writing its results after a short drain completes, and
// drain_s is the time between its drain and drained lines.
func TestDrainEndsAtTheDrainedLine(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{client: strings.Replace(slowResultClient, " EXTRA", "", 1), drainS: "4", watchdogS: "5"})
	as := c.soleAttempt(s, "p1.saturation", state.Complete)
	lines, err := phasefile.ReadFile(filepath.Join(as[0].Dir, "phases.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	at := map[string]time.Time{}
	for _, l := range lines {
		if _, seen := at[l.Phase]; !seen {
			at[l.Phase], err = time.Parse(time.RFC3339Nano, l.T)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	drain, drained, done := at[phasefile.Drain], at[phasefile.Drained], at[phasefile.Done]
	if drained.IsZero() || done.Sub(drained) < 6*time.Second {
		t.Fatalf("phases %+v: want a drained line at least 6 s before done", lines)
	}
	if got, want := as[0].Figures["drain_s"], drained.Sub(drain).Seconds(); got != want {
		t.Fatalf("drain_s %v, want the %v s from the drain line to the drained line", got, want)
	}
}

// A client that writes no drained line has its drain timed to its done
// line: its result write counts, and here runs past the watchdog.
func TestDrainWithoutDrainedLineEndsAtDone(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{client: strings.Replace(slowResultClient, " EXTRA", `, --no-drained-line`, 1), drainS: "4", watchdogS: "5"})
	c.soleAttempt(s, "p1.saturation", state.Failed, state.ReasonDrainWatchdog)
	c.stoppedFor(s, state.ReasonDrainWatchdog)
	c.assertNoProcesses()
}

// A drained line earlier than the drain line is a drain nobody can time:
// the gate says so (error) and the run fails harness-error, never passes.
func TestDrainedBeforeDrainFailsClosed(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{client: `{shell: 'd() { date -u -d "$1" +%Y-%m-%dT%H:%M:%S.%NZ; }; printf "{\"phase\":\"drain\",\"t\":\"%s\"}\n{\"phase\":\"drained\",\"t\":\"%s\"}\n" "$(d now)" "$(d "2 seconds ago")" >> "$WARDEN_PHASE_FILE"'}`})
	as := c.attempts(s, "p1.saturation")
	if len(as) == 0 || as[0].State != state.Failed || as[0].Reason != state.ReasonHarnessError {
		t.Fatalf("attempts %+v; want the first failed harness-error", as)
	}
	if v := c.gateVerdict(s, "p1.saturation", "drain"); v.Verdict != state.VerdictError || !strings.Contains(v.Detail, "invalid drain time") {
		t.Fatalf("drain gate %+v; want an error naming the invalid drain time", v)
	}
}

// A client that exits 4 (Warden's load client: it abandoned requests at
// its drain bound) fails its run with reason drain-abandoned: a cut drain
// is never complete.
func TestClientAbandonedDrainFails(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{client: `{shell: '"${STANDIN}" client --warmup-s 0.2 --measure-s 0.3 --drain-s 1 --concurrency 1 --result-dir "${ATTEMPT_DIR}/client" && exit 4'}`})
	c.soleAttempt(s, "p1.saturation", state.Failed, state.ReasonDrainAbandoned)
	c.stoppedFor(s, state.ReasonDrainAbandoned)
}

// The plan refuses a client whose own drain bound is shorter than its
// class's allowance, naming the file, line and argument.
func TestPlanRefusesShortClientDrain(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{drainS: "5", watchdogS: "10",
		client: `["${STANDIN}", client, --drain-timeout-seconds, "3", --result-dir, "${ATTEMPT_DIR}/client"]`})
	out, code := c.controller("plan", "-f", proto)
	if code != exitInvalid || !strings.Contains(out, "e2e.yaml:") || !strings.Contains(out, "loads.saturation.client[3]") ||
		!strings.Contains(out, "--drain-timeout-seconds 3 is shorter than the 5 s drain allowance of class c") {
		t.Fatalf("plan exit %d:\n%s", code, out)
	}
}
