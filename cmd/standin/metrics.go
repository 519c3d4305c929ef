package main

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
)

// GET /metrics serves one gauge in Prometheus text: the generation
// requests being handled, under the kind's name (vLLM's
// vllm:num_requests_running, SGLang's sglang:num_running_reqs,
// SGLang-Omni's sglang_omni_pipeline_tracked_requests with
// --enable-metrics). A request counts from its handler's start to its
// end; --running-gauge-lag makes the published value lag it as vLLM's
// and SGLang's do.
//
// Misbehaviour (--keep-cancelled-running): a stream its client left
// before the stream's end ([DONE] never written) stays counted for
// good, as a server that never releases a cancelled request.
// Misbehaviour (--drop-stream-after-events N): the server closes every
// event stream's connection after its N-th event, as a server that
// drops a stream (a slow or paused reader's).

// keepCancelledRunning and dropStreamAfter are the switches.
var (
	keepCancelledRunning bool
	dropStreamAfter      int
)

func addStreamFlags(f *pflag.FlagSet) {
	f.BoolVar(&keepCancelledRunning, "keep-cancelled-running", false, "misbehave: a stream whose client left before its end stays counted in /metrics' running gauge forever")
	f.IntVar(&dropStreamAfter, "drop-stream-after-events", 0, "misbehave: close every event stream's connection after this many events (0: never)")
}

// Ways the running gauge lags the requests (--running-gauge-lag).
const (
	gaugeLagNone = "none"
	// gaugeLagStep: vLLM's gauges are set from the scheduler's stats,
	// which only an engine step makes (Scheduler.update_from_output, after
	// the finished requests left the running set): the published value
	// changes when a token is generated or a request finishes, and a
	// stream its client left stays counted until the next step (vLLM
	// #29928, #22545).
	gaugeLagStep = "step"
	// gaugeLagIdleWindow: SGLang before #31517 published the running
	// count at each step, the last one before the finished requests were
	// filtered out, and once idle at most once per idle-log window (30 s,
	// #26495): the last step's value stays that long.
	gaugeLagIdleWindow = "idle-window"
)

// gaugeLagConfig is the gauge's lag (--running-gauge-lag,
// --running-gauge-idle-s).
type gaugeLagConfig struct {
	mode  string
	idleS float64
}

func (c gaugeLagConfig) validate() error {
	if !slices.Contains([]string{gaugeLagNone, gaugeLagStep, gaugeLagIdleWindow}, c.mode) || !(c.idleS >= 0) {
		return fmt.Errorf("--running-gauge-lag %q: want none, step or idle-window; --running-gauge-idle-s not negative", c.mode)
	}
	return nil
}

// runningGauge counts the generation requests being handled, and what
// /metrics publishes of that count under the configured lag.
type runningGauge struct {
	n   atomic.Int64
	lag gaugeLagConfig
	// published is the count at the last step, lastStep its time (unix
	// ns): what a lagging gauge shows.
	published, lastStep atomic.Int64
}

// step publishes the count, as an engine step does.
func (g *runningGauge) step() {
	g.published.Store(g.n.Load())
	g.lastStep.Store(time.Now().UnixNano())
}

// value is what /metrics shows.
func (g *runningGauge) value() int64 {
	switch g.lag.mode {
	case gaugeLagStep:
		return g.published.Load()
	case gaugeLagIdleWindow:
		if time.Since(time.Unix(0, g.lastStep.Load())) < seconds(g.lag.idleS) {
			return g.published.Load()
		}
	}
	return g.n.Load()
}

// track counts h's requests. Under vLLM's lag a request that ends
// normally is a step of its own (its finish is published); one whose
// client left is not. SGLang's last step counted the finished request
// still.
func (g *runningGauge) track(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.n.Add(1)
		ww := &streamWatch{ResponseWriter: w}
		// Deferred: a dropped stream ends the handler by a panic.
		defer func() {
			if !keepCancelledRunning || !ww.stream || ww.done {
				g.n.Add(-1)
			}
			if g.lag.mode == gaugeLagStep && (!ww.stream || ww.done) {
				g.step()
			}
		}()
		h(ww, r)
	}
}

// metrics serves the kind's running gauge: vLLM's
// vllm:num_requests_running, SGLang's sglang:num_running_reqs, or, for
// SGLang-Omni only with --enable-metrics (else 404), its coordinator's
// families, the tracked requests among them.
func (a *api) metrics(w http.ResponseWriter, r *http.Request) {
	n := a.running.value()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	switch a.kind.kind {
	case kindSGLangOmni:
		if !a.kind.enableMetrics {
			http.NotFound(w, r)
			return
		}
		for _, g := range []struct {
			name, help, labels string
			v                  int64
		}{
			{"sglang_omni_pipeline_running", "Whether the Omni coordinator reports the pipeline as running.", "", 1},
			{"sglang_omni_pipeline_tracked_requests", "Number of currently tracked requests according to the Omni coordinator health snapshot.", "", n},
			{"sglang_omni_pipeline_pending_completions", "Number of pending completions reported by the Omni coordinator.", "", n},
			{"sglang_omni_request_states", "Number of Omni requests by coordinator state.", `,state="running"`, n},
		} {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s{model_name=%q%s} %d.0\n", g.name, g.help, g.name, g.name, a.model, g.labels, g.v)
		}
		return
	case kindSGLang:
		const name = "sglang:num_running_reqs"
		fmt.Fprintf(w, "# HELP %s The number of running requests.\n# TYPE %s gauge\n%s{model_name=%q} %d\n", name, name, name, a.model, n)
		return
	}
	const name = "vllm:num_requests_running"
	fmt.Fprintf(w, "# HELP %s Number of requests in model execution batches.\n# TYPE %s gauge\n%s{model_name=%q,engine=\"0\"} %d\n", name, name, name, a.model, n)
}

// streamWatch sees whether a response is an event stream and whether
// it reached its [DONE].
type streamWatch struct {
	http.ResponseWriter
	stream, done bool
	events       int
}

func (w *streamWatch) Write(b []byte) (int, error) {
	w.stream = w.stream || strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream")
	w.done = w.done || bytes.Contains(b, []byte("data: [DONE]"))
	if w.stream && dropStreamAfter > 0 && bytes.HasPrefix(b, []byte("data: ")) {
		if w.events++; w.events > dropStreamAfter {
			// net/http closes the connection, the stream unfinished.
			panic(http.ErrAbortHandler)
		}
	}
	return w.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController's Flush calls: the
// underlying writer's flush, its error kept.
func (w *streamWatch) FlushError() error { return http.NewResponseController(w.ResponseWriter).Flush() }

func (w *streamWatch) Flush() { _ = w.FlushError() }

func (w *streamWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }
