package attempt

import (
	"fmt"

	"warden/pkg/gates"
	"warden/pkg/gpu/sample"
	"warden/pkg/state"
)

// ownFound is the channel of the sampler's foreign sighting; nil (never
// ready) when nothing samples.
func (a *Attempt) ownFound() <-chan gates.Verdict {
	if a.own == nil || a.foreign != nil {
		return nil
	}
	return a.own.Found()
}

// foreignProcess records the sighting as the gpu-processes gate and fails
// the attempt foreign-gpu-process: the campaign stops (stop condition 2).
func (a *Attempt) foreignProcess(v gates.Verdict) (state.Reason, string) {
	a.foreign = &v
	a.rec.Gate(v)
	return state.ReasonForeignGPUProcess, v.Detail
}

// gpuProcsGate ends the judging once the sampler has stopped: a sighting
// not yet taken is taken now (validate fails the attempt with it); with
// none, the gate passes with the number of samples judged.
func (a *Attempt) gpuProcsGate(sum sample.Summary) {
	if a.own == nil || a.foreign != nil {
		return
	}
	select {
	case v := <-a.own.Found():
		a.foreign = &v
		a.rec.Gate(v)
		return
	default:
	}
	judged := sum.Samples - sum.Failed
	v := gates.Verdict{Gate: "gpu-processes", Verdict: gates.Pass, At: a.env.Now(),
		Figures: map[string]float64{"samples": float64(judged), "samples_failed": float64(sum.Failed), "foreign_processes": 0}}
	if judged == 0 {
		// nothing was read: the check cannot tell
		v.Verdict = gates.Error
		v.Detail = fmt.Sprintf("no sample of the GPUs' processes could be read (%d failed; see gpu-samples.jsonl)", sum.Failed)
		a.foreign = &v
	}
	a.rec.Gate(v)
}
