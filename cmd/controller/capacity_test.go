package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// capacityProtocol is a campaign of one capacity search: loadgen's open
// loop at ${CAPACITY_RATE} against a stand-in that generates at most three
// requests at once, each 4 tokens of 31.25 ms: a capacity of 3 / 0.125 s =
// 24 requests/s. The SLO is the queue's: past capacity the requests
// admitted in the clean window outgrow those that end. The clean window
// (3 x 1.5 s) holds 18 requests at the lowest rate, so that one request
// still in flight at its end (a loaded host's slower reply) is growth of
// 0.056, under the bound, while 28 requests/s outgrows the capacity by
// 0.14.
func capacityProtocol(t *testing.T, manifest string) string {
	t.Helper()
	port := freePorts(t, 1)[0]
	head := testcampaign.Head("capacity", "1.0", fmt.Sprintf("STANDIN: %q, LOADGEN: %q, MANIFEST: %q", standinBin, loadgenBin, manifest), []int{port})
	return writeTemp(t, "capacity.yaml", head+oneRegime+classAndCleanup+`servers:
  - name: standin
    kind: standin
    command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.1", --shutdown-timeout, "1",
              --token-ms, "31.25", --max-running, "3"]
    ready_timeout_s: 10
    shutdown_grace_s: 2
    group_grace_s: 1
loads:
  - name: open
    kind: open-loop
    expected_s: 8
    client: ["${LOADGEN}", run, --manifest, "${MANIFEST}", --base-url, "http://127.0.0.1:${PORT}", --model, standin,
             --load-point, open, --request-rate, "${CAPACITY_RATE}", --arrival, steady, --ignore-eos,
             --warmup-seconds, "0.5", --clean-segment-seconds, "1.5", --num-clean-segments, "3",
             --drain-timeout-seconds, "${DRAIN_ALLOWANCE_S}", --result-dir, "${ATTEMPT_DIR}/client"]
axes:
  - name: sys
    values: [{id: s}]
phases:
  - name: search
    kind: capacity
    matrix: {sys: s}
    loads: [open]
    capacity:
      rate_min: 4
      rate_max: 36
      resolution: 8
      slo: {success_min: 0.99, queue_growth_max: 0.09}
`)
}

// TestCapacitySearchFindsTheStandinsCapacity: a campaign of a capacity
// phase finds the stand-in's configured capacity within one bisection
// step, each point a fresh server at the rate the search decided from the
// points before it, then runs the follow-ups at fractions of the found
// rate and the overload point.
func TestCapacitySearchFindsTheStandinsCapacity(t *testing.T) {
	t.Parallel()
	const capacity, resolution = 24.0, 8.0
	c := newCampaign(t)
	proto := capacityProtocol(t, writeTokenManifest(t, 3000))
	if out, code := c.controller("plan", "-f", proto, "-o", "json"); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, out)
	} else if !jsonHas(t, out, "max_points", 7) {
		t.Fatalf("plan: no capacity phase of at most 7 points (3 bisection, 3 follow-ups, overload):\n%s", tail(out, 2000))
	}
	c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s (%s): %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	rate := func(run string) float64 {
		t.Helper()
		as := c.soleAttempt(s, run, state.Complete)
		b, err := os.ReadFile(filepath.Join(dirlayout.AttemptDir(c.dir, run, as[0].N), "client", "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Load struct {
				Lambda float64 `json:"lambda_rps"`
			} `json:"load"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return r.Load.Lambda
	}
	b1, b2, b3 := rate("s.open.b1"), rate("s.open.b2"), rate("s.open.b3")
	if b1 != 4 || b2 != 20 || (b3 != 28 && b3 != 12) {
		t.Fatalf("bisection rates %v %v %v; want 4, the middle 20, then 28 or 12", b1, b2, b3)
	}
	found := rate("s.open.x050") * 2
	t.Logf("bisection at %v, %v, %v requests/s: found %v (capacity %v)", b1, b2, b3, found, capacity)
	if math.Abs(found-capacity) > resolution {
		t.Fatalf("found %v requests/s; the stand-in's capacity is %v, more than one resolution (%v) away", found, capacity, resolution)
	}
	for run, f := range map[string]float64{"s.open.x080": 0.8, "s.open.x095": 0.95, "s.open.x120": 1.2} {
		if got := rate(run); math.Abs(got-f*found) > 1e-9 {
			t.Fatalf("%s at %v requests/s, want %v x %v", run, got, f, found)
		}
	}
	// each point's judgement is recorded with its rate, as ctlq show lists it
	for _, run := range []string{"s.open.b1", "s.open.b2", "s.open.b3", "s.open.x120"} {
		v := c.gateVerdict(s, run, "capacity-slo")
		if v.Figures["rate_rps"] != rate(run) || v.Attempt != 1 || (v.Verdict != state.VerdictPass && v.Verdict != state.VerdictFail) {
			t.Fatalf("%s: capacity verdict %+v; want a pass or fail at the client's rate %v", run, v, rate(run))
		}
	}
	if v := c.gateVerdict(s, "s.open.b2", "capacity-slo"); v.Verdict != state.VerdictPass || v.Figures["queue_growth"] > 0.09 {
		t.Fatalf("b2 at 20 requests/s, below the capacity: %+v", v)
	}
	if out, _ := c.run(ctlqBin, nil, "show", "-d", c.dir, "s.open.b2"); !strings.Contains(out, "capacity-slo") || !strings.Contains(out, "rate_rps=20") {
		t.Fatalf("ctlq show s.open.b2 does not show the point's verdict and rate:\n%s", out)
	}
	// the report draws the search and says the rate it found
	html := c.reportPage()
	if want := fmt.Sprintf(`found <span class="num">%.4g</span> requests/s`, found); !strings.Contains(html, want) || !strings.Contains(html, `aria-label="capacity search`) {
		t.Fatalf("the report does not show the capacity curve with the found rate (%s)", want)
	}
	c.assertNoProcesses()
}

// jsonHas says whether the JSON document doc holds key with the value
// want anywhere.
func jsonHas(t *testing.T, doc, key string, want float64) bool {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	var walk func(any) bool
	walk = func(x any) bool {
		switch x := x.(type) {
		case map[string]any:
			if n, ok := x[key].(float64); ok && n == want {
				return true
			}
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}
