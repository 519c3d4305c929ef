package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// RunningGauges are the servers' gauges of running requests on /metrics,
// read in this order: vLLM's (and vLLM-Omni's), SGLang's (served with
// --enable-metrics) and SGLang-Omni's (the requests its coordinator
// tracks, from the health snapshot it renders at each scrape, where its
// server serves /metrics at all). The value is the sum over every label
// set.
var RunningGauges = []string{"vllm:num_requests_running", "sglang:num_running_reqs", "sglang_omni_pipeline_tracked_requests"}

// GaugeLag is how long past a request's release a server's running gauge
// may still count it, by gauge (docs/servers.md, "Running and waiting
// gauges"); the release bound is DefaultReleaseBound plus the lag of the
// gauge read, unless the run gives its own.
//
//   - vLLM: the scheduler's stats, which set the gauge, are made only by an
//     engine step (Scheduler.update_from_output), so after every running
//     request was aborted the gauge keeps its last value until a step runs
//     (vLLM #29928, #22545): no wait ends that. The check makes the step
//     itself: one probe request of one token (StepGauges), whose step
//     drops it from the running set before the stats are made.
//   - SGLang: the tokenizer aborts a disconnected request 2 s after the
//     disconnect (create_abort_task; 3 s in older versions), and before
//     #31517 an idle scheduler published its gauge at most once per 30 s
//     idle-log window (#26495): 33 s.
//   - SGLang-Omni: the gauge is rendered from the coordinator's health
//     snapshot at each scrape: no lag.
var GaugeLag = map[string]time.Duration{
	"vllm:num_requests_running":             0,
	"sglang:num_running_reqs":               33 * time.Second,
	"sglang_omni_pipeline_tracked_requests": 0,
}

// StepGauges are the gauges refreshed only by an engine step: while one
// reads above 0, the check sends one probe request to make a step.
var StepGauges = []string{"vllm:num_requests_running"}

// WaitingGauges are the same servers' gauges of waiting requests: where
// the server serves one, it must read 0 too (section 12: "队列引用清除").
var WaitingGauges = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}

// Release verdicts.
const (
	ReleaseReleased   = "released"
	ReleaseUnreleased = "unreleased"
	ReleaseUnknown    = "unknown"
)

// Findings of the stress block.
const (
	FindingCancelUnreleased     = "stress.cancel.unreleased"
	FindingCancelReleaseUnknown = "stress.cancel.release_unknown"
)

// ReleaseCheck is whether the server released the cancelled requests: its
// running gauge read 0 within the bound after the drain. It assumes the
// run is the server's only client. Released is true only when the gauge
// was read at 0 (never by default); a gauge that cannot be read, or a
// drain that left requests outstanding at the client, is unknown.
type ReleaseCheck struct {
	Verdict  string   `json:"verdict"`
	Released bool     `json:"released"`
	Metric   string   `json:"metric,omitempty"`
	Running  *float64 `json:"running"`
	// WaitingMetric and Waiting are the waiting gauge's, when served.
	WaitingMetric string   `json:"waiting_metric,omitempty"`
	Waiting       *float64 `json:"waiting,omitempty"`
	// BoundS is the bound applied: the run's, else DefaultReleaseBound
	// plus GaugeLagS, the lag of the gauge read (GaugeLag).
	BoundS    float64 `json:"bound_s"`
	GaugeLagS float64 `json:"gauge_lag_s"`
	WaitedS   float64 `json:"waited_s"`
	// Probe is the request sent to make an engine step (StepGauges);
	// absent when none was sent.
	Probe  *ReleaseProbe `json:"probe,omitempty"`
	Reason string        `json:"reason,omitempty"`
}

// ReleaseProbe is the one-token request the check sent.
type ReleaseProbe struct {
	Class      Class   `json:"class"`
	HTTPStatus int     `json:"http_status"`
	Seconds    float64 `json:"seconds"`
}

// StressSummary is result.json's stress block (stress.go).
type StressSummary struct {
	ConsumeRTF            float64 `json:"consume_rtf"`
	ConsumeTokensPerS     float64 `json:"consume_tokens_per_s"`
	PauseAfterS           float64 `json:"pause_after_s"`
	PauseS                float64 `json:"pause_s"`
	CancelAfterFirstChunk float64 `json:"cancel_after_first_chunk"`
	// Held is the slow consumer's held time per request, every admitted
	// request with stress.
	Held Dist `json:"held_ms"`
	// Paused counts paused requests, PausedFailed those of them that did
	// not succeed (their class says why).
	Paused       int `json:"paused"`
	PausedFailed int `json:"paused_failed"`
	// CancelSelected counts admitted requests of the cancelled set,
	// Cancelled those the client closed after their first chunk
	// (client-cancelled, outside every latency summary).
	CancelSelected int           `json:"cancel_selected"`
	Cancelled      int           `json:"cancelled"`
	Release        *ReleaseCheck `json:"release,omitempty"`
	Findings       []string      `json:"findings"`
}

// summarizeStress adds the stress block of a run with stress options,
// checking the release of cancelled requests after the drain.
func (r *run) summarizeStress(ctx context.Context, res *Result, slots []*slot) {
	st := r.cfg.Stress
	if !st.active() {
		return
	}
	s := &StressSummary{ConsumeRTF: st.ConsumeRTF, ConsumeTokensPerS: st.ConsumeTokensPerS, PauseAfterS: st.PauseAfter.Seconds(),
		PauseS: st.Pause.Seconds(), CancelAfterFirstChunk: st.CancelAfterFirstChunk, Findings: []string{}}
	var held []int64
	for _, sl := range slots {
		x := sl.rec.Stress
		if x == nil {
			continue
		}
		held = append(held, x.HeldNS)
		if x.Paused {
			s.Paused++
			if sl.rec.Class != Success {
				s.PausedFailed++
			}
		}
		if x.CancelSelected {
			s.CancelSelected++
		}
		if x.CancelledNS != 0 && sl.rec.Class == ClientCancelled {
			s.Cancelled++
		}
	}
	s.Held = distNS(held)
	if st.CancelAfterFirstChunk > 0 {
		s.Release = r.checkRelease(ctx, res.Drain)
		switch s.Release.Verdict {
		case ReleaseUnreleased:
			s.Findings = append(s.Findings, FindingCancelUnreleased)
		case ReleaseUnknown:
			s.Findings = append(s.Findings, FindingCancelReleaseUnknown)
		}
	}
	res.Stress = s
}

// checkRelease polls the server's running gauge until it reads 0 or the
// bound passes. A gauge refreshed only by an engine step (StepGauges) that
// reads above 0 gets one probe request first, so that the reading is the
// server's state after the cancellations and not the last step's before
// them.
func (r *run) checkRelease(ctx context.Context, drain DrainInfo) *ReleaseCheck {
	bound := r.cfg.Stress.ReleaseBound
	c := &ReleaseCheck{Verdict: ReleaseUnknown, BoundS: bound.Seconds()}
	if drain.Unfinished > 0 {
		c.Reason = "requests were still outstanding at the client when the records froze"
		return c
	}
	start := time.Now()
	for {
		g, why := r.readGauges(ctx)
		c.WaitedS = time.Since(start).Seconds()
		if why != "" {
			c.Verdict, c.Running, c.Metric, c.Waiting, c.WaitingMetric, c.Reason = ReleaseUnknown, nil, "", nil, "", why
		} else {
			c.Metric, c.Running, c.WaitingMetric, c.Waiting, c.Reason = g.running, &g.runningV, g.waiting, g.waitingV, ""
			if r.cfg.Stress.ReleaseBound == 0 {
				lag := GaugeLag[g.running]
				bound, c.GaugeLagS = DefaultReleaseBound+lag, lag.Seconds()
			}
			if g.runningV <= 0 && (g.waitingV == nil || *g.waitingV <= 0) {
				c.Verdict, c.Released = ReleaseReleased, true
				c.BoundS = bound.Seconds()
				return c
			}
			c.Verdict, c.Reason = ReleaseUnreleased, "the server's running or waiting gauge stayed above 0 past the bound"
			if c.Probe == nil && slices.Contains(StepGauges, g.running) {
				c.Probe = r.probe(ctx, bound)
				if c.Probe.Class != Success {
					c.Reason += "; the probe request that would make an engine step was " + string(c.Probe.Class)
				}
				continue
			}
		}
		if bound == 0 {
			bound = DefaultReleaseBound // no gauge read: nothing says its lag
		}
		c.BoundS = bound.Seconds()
		if time.Since(start) >= bound || ctx.Err() != nil {
			return c
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// probe sends one request of the manifest's first prompt for one output
// token, within bound, outside the run's records and stress: its step
// refreshes the server's stats.
func (r *run) probe(ctx context.Context, bound time.Duration) *ReleaseProbe {
	if bound == 0 {
		bound = DefaultReleaseBound
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	p := &ReleaseProbe{Class: HarnessError}
	if r.m == nil || r.builder == nil || r.m.Len() == 0 {
		return p
	}
	prompt, err := r.m.prompt(0)
	if err != nil {
		return p
	}
	s := *r.sender
	s.stress, s.itl = nil, nil
	o := s.send(ctx, r.builder.build(prompt, 1), expect{output: 1})
	p.Class, p.HTTPStatus, p.Seconds = o.class, o.status, time.Since(start).Seconds()
	return p
}

// gauges are the values read from /metrics.
type gauges struct {
	running, waiting string
	runningV         float64
	waitingV         *float64 // nil: no waiting gauge served
}

// readGauges reads the server's running gauge from /metrics (the first of
// RunningGauges it serves) and its waiting gauge where it serves one.
// why is "" when the running gauge was read.
func (r *run) readGauges(ctx context.Context) (g gauges, why string) {
	data, why := r.readMetrics(ctx)
	if why != "" {
		return g, why
	}
	for _, name := range WaitingGauges {
		if v, ok, bad := gaugeSum(data, name); bad {
			return g, "/metrics: " + name + " is not a number"
		} else if ok {
			g.waiting, g.waitingV = name, &v
			break
		}
	}
	for _, name := range RunningGauges {
		if v, ok, bad := gaugeSum(data, name); bad {
			return g, "/metrics: " + name + " is not a number"
		} else if ok {
			g.running, g.runningV = name, v
			return g, ""
		}
	}
	return g, "/metrics serves none of the running-requests gauges"
}

// readMetrics reads the server's /metrics text. why is "" when it did.
func (r *run) readMetrics(ctx context.Context) (data []byte, why string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.BaseURL+"/metrics", http.NoBody)
	if err != nil {
		return nil, "build request"
	}
	resp, err := r.sender.client.Do(req)
	if err != nil {
		return nil, "/metrics: " + errKind(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "/metrics: status " + strconv.Itoa(resp.StatusCode)
	}
	data, err = io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, "/metrics: " + errKind(err)
	}
	return data, ""
}

// gaugeSum sums the samples of the metric name in a Prometheus text
// exposition; ok when it has one at least, bad when a value is not a
// number.
func gaugeSum(data []byte, name string) (sum float64, ok, bad bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		rest, found := bytes.CutPrefix(line, []byte(name))
		if !found || len(rest) == 0 || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		if rest[0] == '{' {
			i := bytes.LastIndexByte(rest, '}')
			if i < 0 {
				return 0, false, true
			}
			rest = rest[i+1:]
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0, false, true
		}
		x, err := strconv.ParseFloat(string(f[0]), 64)
		if err != nil {
			return 0, false, true
		}
		sum, ok = sum+x, true
	}
	return sum, ok, false
}
