package main

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/spf13/pflag"
)

// GET /metrics serves one gauge in Prometheus text: the generation
// requests being handled, under the kind's name (vLLM's
// vllm:num_requests_running, SGLang's sglang:num_running_reqs). A
// request counts from its handler's start to its end.
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

// runningGauge counts the generation requests being handled.
type runningGauge struct{ n atomic.Int64 }

// track counts h's requests.
func (g *runningGauge) track(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.n.Add(1)
		ww := &streamWatch{ResponseWriter: w}
		// Deferred: a dropped stream ends the handler by a panic.
		defer func() {
			if !keepCancelledRunning || !ww.stream || ww.done {
				g.n.Add(-1)
			}
		}()
		h(ww, r)
	}
}

// metrics serves the gauge.
func (a *api) metrics(w http.ResponseWriter, _ *http.Request) {
	name := "vllm:num_requests_running"
	if strings.HasPrefix(a.kind.kind, kindSGLang) {
		name = "sglang:num_running_reqs"
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP %s Number of requests running.\n# TYPE %s gauge\n%s{model_name=%q} %d\n", name, name, name, a.model, a.running.n.Load())
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
