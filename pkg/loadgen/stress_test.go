package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCancelSelectedShare: any first n rows hold floor or ceil of n ×
// share of the set; the set depends on the seed and is the same on every
// call.
func TestCancelSelectedShare(t *testing.T) {
	for _, share := range []float64{0.1, 0.5, 0.37, 1} {
		differ := false
		for seed := uint64(0); seed < 4; seed++ {
			n := 0
			for row := 0; row < 1000; row++ {
				if CancelSelected(seed, row, share) {
					n++
				}
				if CancelSelected(seed, row, share) != CancelSelected(seed, row, share) {
					t.Fatal("not deterministic")
				}
				differ = differ || CancelSelected(seed, row, share) != CancelSelected(seed+1, row, share)
				if want := float64(row+1) * share; float64(n) < want-1 || float64(n) > want+1 {
					t.Fatalf("share %v seed %d: %d of the first %d rows", share, seed, n, row+1)
				}
			}
		}
		if !differ && share < 1 {
			t.Fatalf("share %v: every seed gives one set", share)
		}
	}
	if CancelSelected(1, 3, 0) {
		t.Fatal("share 0 selects a row")
	}
}

// releaseRun is a run whose server answers /metrics with h.
func releaseRun(t *testing.T, h http.HandlerFunc) *run {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr := newTransport(2)
	t.Cleanup(tr.CloseIdleConnections)
	return &run{cfg: Config{BaseURL: srv.URL, Stress: Stress{CancelAfterFirstChunk: 0.5, ReleaseBound: 100 * time.Millisecond}},
		sender: &sender{client: newClient(tr)}}
}

// TestReleaseCheck: released only on a gauge read at 0; a gauge above 0
// past the bound is unreleased; no gauge, a bad one, an error status or
// requests left outstanding are unknown, never released.
func TestReleaseCheck(t *testing.T) {
	for _, c := range []struct {
		name, body string
		status     int
		unfinished int
		verdict    string
		running    float64
	}{
		{"zero", "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 0\n", 200, 0, ReleaseReleased, 0},
		{"summed", "vllm:num_requests_running{engine=\"0\"} 2\nvllm:num_requests_running{engine=\"1\"} 1.0\nvllm:num_requests_running_x 9\n", 200, 0, ReleaseUnreleased, 3},
		{"sglang", "sglang:num_running_reqs{model_name=\"m\"} 0\nsglang:num_queue_reqs{model_name=\"m\"} 0\n", 200, 0, ReleaseReleased, 0},
		{"waiting", "vllm:num_requests_running 0\nvllm:num_requests_waiting 2\n", 200, 0, ReleaseUnreleased, 0},
		{"bad waiting", "vllm:num_requests_running 0\nvllm:num_requests_waiting x\n", 200, 0, ReleaseUnknown, -1},
		{"absent", "vllm:num_requests_waiting 0\n", 200, 0, ReleaseUnknown, -1},
		{"not a number", "vllm:num_requests_running zero\n", 200, 0, ReleaseUnknown, -1},
		{"status", "", 404, 0, ReleaseUnknown, -1},
		{"outstanding", "vllm:num_requests_running 0\n", 200, 1, ReleaseUnknown, -1},
	} {
		r := releaseRun(t, func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path != "/metrics" {
				http.NotFound(w, req)
				return
			}
			w.WriteHeader(c.status)
			fmt.Fprint(w, c.body)
		})
		got := r.checkRelease(context.Background(), DrainInfo{Unfinished: c.unfinished})
		ok := got.Verdict == c.verdict && got.Released == (c.verdict == ReleaseReleased)
		if c.running < 0 {
			ok = ok && got.Running == nil && got.Reason != ""
		} else {
			ok = ok && got.Running != nil && *got.Running == c.running
		}
		if c.verdict == ReleaseUnreleased {
			ok = ok && got.WaitedS >= got.BoundS
		}
		if !ok {
			t.Fatalf("%s: %+v", c.name, got)
		}
	}
}

// TestReleaseUnreachable: a server gone after the run is unknown.
func TestReleaseUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	tr := newTransport(1)
	defer tr.CloseIdleConnections()
	r := &run{cfg: Config{BaseURL: url, Stress: Stress{CancelAfterFirstChunk: 1, ReleaseBound: 50 * time.Millisecond}}, sender: &sender{client: newClient(tr)}}
	if got := r.checkRelease(context.Background(), DrainInfo{}); got.Verdict != ReleaseUnknown || got.Released || got.Running != nil {
		t.Fatalf("%+v", got)
	}
}

// TestStressCheck refuses options out of range.
func TestStressCheck(t *testing.T) {
	for _, s := range []Stress{{CancelAfterFirstChunk: 1.01}, {ConsumeRTF: -1}, {PauseAfter: time.Second}, {Pause: -1}} {
		if s.Check() == nil {
			t.Fatalf("%+v accepted", s)
		}
	}
	if (Stress{}).active() || (Stress{}).Check() != nil {
		t.Fatal("the zero value is not none")
	}
}

// TestReleaseProbeMakesAStep: vLLM refreshes its running gauge only at an
// engine step (#29928), so a gauge that last counted the cancelled
// requests keeps counting them while nothing runs. The check sends one
// one-token probe, whose step publishes the real count: released. A
// server whose step still counts them is unreleased, the probe recorded;
// a gauge that needs no step (SGLang's) gets no probe, and its bound is
// DefaultReleaseBound plus its lag.
func TestReleaseProbeMakesAStep(t *testing.T) {
	for _, tc := range []struct {
		name, gauge string
		stuck       float64 // what a step publishes
		verdict     string
		probed      bool
		boundS      float64
	}{
		{"vllm, released at the step", "vllm:num_requests_running", 0, ReleaseReleased, true, 5},
		{"vllm, still running at the step", "vllm:num_requests_running", 3, ReleaseUnreleased, true, 0.2},
		{"sglang, no step", "sglang:num_running_reqs", 0, ReleaseReleased, false, 38},
	} {
		t.Run(tc.name, func(t *testing.T) {
			published := 4.0 // the last step before the cancellations
			var mu sync.Mutex
			var steps int
			mux := http.NewServeMux()
			mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				v := published
				if tc.gauge != "vllm:num_requests_running" {
					v = tc.stuck
				}
				fmt.Fprintf(w, "# TYPE %s gauge\n%s{model_name=\"m\",engine=\"0\"} %g\n", tc.gauge, tc.gauge, v)
			})
			mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if !strings.Contains(string(body), `"max_tokens":1,`) {
					t.Errorf("probe body %s", body)
				}
				mu.Lock()
				steps++
				published = tc.stuck
				mu.Unlock()
				sse(w, 1, 1, true)
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			tr := newTransport(2)
			defer tr.CloseIdleConnections()
			m := smallManifest(t, 2)
			b, err := newBodyBuilder(Completions, "m", 0, false)
			if err != nil {
				t.Fatal(err)
			}
			clock, _ := NewClock()
			bound := time.Duration(0)
			if tc.verdict == ReleaseUnreleased {
				bound = 200 * time.Millisecond
			}
			r := &run{cfg: Config{BaseURL: srv.URL, Stress: Stress{CancelAfterFirstChunk: 0.5, ReleaseBound: bound}}, m: m, builder: b,
				sender: &sender{client: newClient(tr), url: srv.URL + Completions.path(), clock: clock, stress: &Stress{CancelAfterFirstChunk: 1}}}
			got := r.checkRelease(context.Background(), DrainInfo{})
			if got.Verdict != tc.verdict || (got.Probe != nil) != tc.probed || got.BoundS != tc.boundS {
				t.Fatalf("%+v (probe %+v), want %s, probed %v, bound %v s", got, got.Probe, tc.verdict, tc.probed, tc.boundS)
			}
			if tc.probed && (got.Probe.Class != Success || got.Probe.HTTPStatus != 200 || steps != 1) {
				t.Fatalf("probe %+v, %d steps", got.Probe, steps)
			}
			if !tc.probed && steps != 0 {
				t.Fatalf("%d probes for a gauge that needs no step", steps)
			}
		})
	}
}
