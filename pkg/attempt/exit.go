package attempt

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/state"
)

// fail ends an attempt with a failure, by the legal path from where it
// is: directly before any process started, through stopping and cleanup
// after.
func (a *Attempt) fail(reason state.Reason, detail string) Outcome {
	if a.server != nil || a.client != nil || a.rec.State() == state.Starting {
		return a.stopThenFail(reason, detail)
	}
	return a.terminal(state.Failed, reason, detail)
}

func (a *Attempt) harness(err error) Outcome {
	a.env.Log.Error().Err(err).Str("run", a.run.ID).Msg("record transition")
	a.joinHostRecords()
	if a.server != nil || a.client != nil {
		a.shutdown()
		if a.stopErr == nil {
			// its processes are proven gone now: resume charges it to here
			if err := a.env.Ends.Record(a.run.ID, a.n, a.env.Now()); err != nil {
				a.env.Log.Warn().Err(err).Str("run", a.run.ID).Msg("record the attempt's end in the end log")
			}
		}
	}
	a.stopSampler()
	// the attempt stays live in the records: resume charges it
	a.env.released(a.rec.Key())
	return Outcome{State: state.Failed, Reason: state.ReasonHarnessError, Detail: err.Error()}
}

func (a *Attempt) terminal(to state.AttemptState, reason state.Reason, detail string) Outcome {
	return a.terminalFig(to, reason, detail, nil)
}

func (a *Attempt) terminalFig(to state.AttemptState, reason state.Reason, detail string, figures map[string]float64) Outcome {
	a.joinHostRecords()
	reason, detail, err := a.rec.End(to, reason, detail, figures)
	if err != nil {
		return a.harness(err)
	}
	return Outcome{State: to, Reason: reason, Detail: detail, EarlyBackground: a.rec.EarlyBackground()}
}

// recordExit notes a process's exit, once; the next transition records it.
func (a *Attempt) recordExit(p *launch.Proc) {
	select {
	case <-p.Done():
	default:
		return
	}
	if a.exited == nil {
		a.exited = map[int]bool{}
	}
	if a.exited[p.PID] {
		return
	}
	a.exited[p.PID] = true
	ex := p.Exit()
	a.rec.NoteExit(state.Exit{Role: p.Role, PID: p.PID, Code: ex.Code, Signal: ex.Signal, At: ex.At})
}

// serverExitReason is why an attempt whose server exited failed: oom when
// its output says it ran out of GPU memory (seed 002 stop condition 2,
// "GPU OOM"), server-exit otherwise.
func (a *Attempt) serverExitReason() state.Reason {
	if gates.ServerOOM(a.dir) != "" {
		return state.ReasonOOM
	}
	return state.ReasonServerExit
}

func (a *Attempt) oomNote() string {
	if m := gates.ServerOOM(a.dir); m != "" {
		return "; its output says " + strconv.Quote(m)
	}
	return ""
}

// terminalClasses is the methodology's request-level taxonomy (seed 000):
// the terminal class of every request, as Warden's load client counts
// them in its result's totals.by_class.
var terminalClasses = []string{
	"success", "quality-failed", "client-cancelled", "deadline-exceeded", "admission-rejected",
	"oom", "worker-lost", "transport-error", "invalid-output", "harness-error",
}

// recordTerminalClasses records, when the client's result reports them,
// its requests' counts by terminal class as figures (requests_<class>);
// a class the taxonomy does not know is counted as requests_other.
func (a *Attempt) recordTerminalClasses() {
	b, err := readChildFile(filepath.Join(a.dir, a.run.ResultFile))
	if err != nil {
		return // no result: nothing reported
	}
	var r struct {
		Totals *struct {
			ByClass map[string]float64 `json:"by_class"`
		} `json:"totals"`
	}
	if json.Unmarshal(b, &r) != nil || r.Totals == nil {
		return
	}
	for class, n := range r.Totals.ByClass {
		name := "requests_other"
		if slices.Contains(terminalClasses, class) {
			name = "requests_" + strings.ReplaceAll(class, "-", "_")
		}
		a.rec.SetFigure(name, a.rec.Figure(name)+n)
	}
}
