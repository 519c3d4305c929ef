package attempt_test

import (
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"warden/pkg/record"
	"warden/pkg/state"
)

// diskFull counts refused writes of the campaign directory as the
// controller does (Env.DiskFull), from the moment the test says.
type diskFull struct{ n atomic.Int64 }

func (d *diskFull) count() (int64, string) {
	return d.n.Load(), "ran out of space (ENOSPC): write state.json: no space left on device"
}

// exitCases are the ends of an attempt (exit.go): the terminal record,
// the reason of a server's exit, the class of a failure while the
// campaign's storage refused writes, the requests' terminal classes.
var exitCases = []phaseCase{
	{
		name: "server exits while measuring",
		prep: func(h *harness) {
			h.run.Client = phaseClient(nil, "hang")
			h.at(state.Measuring, func(record.Report) { h.exitServer() })
		},
		path: measureFailed("server-exit"),
		check: func(h *harness) {
			h.wantDetail("server exited while the client ran (killed by SIGKILL)")
			if e, ok := h.rec.exitOf("server"); !ok || e.Signal != "SIGKILL" {
				h.t.Fatalf("server exit %+v (%v)", e, ok)
			}
			h.chargedOnce()
		},
	},
	{
		// seed 002 stop condition 2: "GPU OOM", from the server's output
		name: "OOM while measuring",
		prep: func(h *harness) {
			h.run.Server.Command = shell(`echo "RuntimeError: CUDA error: out of memory" >&2; exec ` + standinBin +
				` server --port ${PORT} --load-s 0 --effective-config enable_chunked_prefill=True`)
			h.run.Client = phaseClient(nil, "hang")
			h.at(state.Measuring, func(record.Report) { h.exitServer() })
		},
		path:  measureFailed("oom"),
		check: func(h *harness) { h.wantDetail(`its output says "CUDA error: out of memory"`) },
	},
	{
		name: "the terminal record refused",
		prep: func(h *harness) {
			h.openEnds()
			h.refuseAt(state.Complete)
		},
		path:  "reserved preflight starting ready measuring stopping cleanup complete!",
		check: func(h *harness) { h.wantEnded() },
	},
	{
		// The campaign directory refused the controller's writes while
		// the attempt ran (no space, EIO, a read-only remount): what the
		// workload did then says nothing about it. The original reason
		// stays in the detail, after the refused write's cause.
		name: "a failure while the campaign's storage refused writes",
		prep: func(h *harness) {
			d := &diskFull{}
			h.env.DiskFull = d.count
			h.run.Client = phaseClient([]string{"-exit", "2"})
			h.at(state.Measuring, func(record.Report) { d.n.Add(1) })
		},
		path: "reserved preflight starting ready measuring stopping:client-failed cleanup failed:harness-error",
		check: func(h *harness) {
			h.wantDetail("the campaign directory ran out of space (ENOSPC)", "its failure client-failed (client exit code 2) is the harness's, not the workload's")
		},
	},
	{
		name: "a run complete while the campaign's storage refused writes",
		prep: func(h *harness) {
			d := &diskFull{}
			h.env.DiskFull = d.count
			h.at(state.Measuring, func(record.Report) { d.n.Add(1) })
		},
		path: happy,
	},
	{
		// the methodology's terminal classes (seed 000), as the client's
		// result counts them; a class the taxonomy does not know counts
		// as other
		name: "the requests' terminal classes",
		prep: func(h *harness) {
			h.run.AdmissionEnd = "result-file"
			h.run.Client = phaseClient([]string{"-result", `{"drain":{"start_mono_ns":1000000000,"end_mono_ns":1100000000},` +
				`"totals":{"admitted":16,"by_class":{"success":9,"deadline-exceeded":2,"transport-error":1,"made-up":4}}}`})
		},
		path: happy,
		check: func(h *harness) {
			for k, want := range map[string]float64{"requests_success": 9, "requests_deadline_exceeded": 2, "requests_transport_error": 1, "requests_other": 4} {
				if got := figureOf(h, k); got != want {
					h.t.Errorf("figure %s = %v, want %v", k, got, want)
				}
			}
		},
	},
	{
		// the evidence is made durable and digested once the processes
		// ended (hostile storage is cmd/controller's, on a real device)
		name: "the evidence digested",
		prep: func(h *harness) {
			h.run.Client = phaseClient([]string{"-result", `{"requests": 1}`}, "drain", "drained", "done")
		},
		path: happy,
		check: func(h *harness) {
			sealed := map[string]bool{}
			for _, e := range h.rec.evidenceList() {
				sealed[e.Path] = e.Size > 0 && len(e.SHA256) == 64
			}
			for _, name := range []string{"server.out", "server.err", "environment.json", "gpu-samples.jsonl", filepath.Join("client", "result.json")} {
				if !sealed[name] {
					h.t.Errorf("no digest of %s recorded: %+v", name, h.rec.evidenceList())
				}
			}
		},
	},
}

// exitServer kills the server's API parent, as a crash ends it (its
// engine follows when its parent's pipe closes), once the sampler has
// judged a sample taken with its engine running. (ownProcs.watch judges a
// process that held GPU memory when a sample was read, and had died
// before any look at the attempt's groups saw it, as another's: the
// attempt fails foreign-gpu-process, not server-exit.)
func (h *harness) exitServer() {
	h.t.Helper()
	h.engine()
	n := h.faults.sampled()
	waitUntil(h.t, "a sample judged with the engine running", func() bool { return h.faults.sampled() >= n+2 })
	if err := syscall.Kill(h.proc("server").PID, syscall.SIGKILL); err != nil {
		h.t.Fatal(err)
	}
}

func TestExit(t *testing.T) {
	t.Parallel()
	runCases(t, exitCases)
}
