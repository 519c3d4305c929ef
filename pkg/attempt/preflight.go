package attempt

import (
	"strings"

	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/launch"
	"warden/pkg/state"
	"warden/protocols"
)

// preflight checks the attempt's GPUs are idle and no other user's
// process holds them, the slot's CPUs are local to its GPUs and the port
// is free, and returns the GPUs' readings taken before the server starts
// (the baseline of the sampler and the energy figures).
func (a *Attempt) preflight() ([]gpu.Reading, Outcome, bool) {
	env := a.env
	a.rec.Pass(state.Preflight, "checking GPUs and port", nil)
	snap, err := env.GPUs.Snapshot(a.gpuIDs)
	if err != nil {
		return nil, a.fail(state.ReasonHarnessError, "read GPUs: "+err.Error()), false
	}
	pv := gates.Preflight(snap, 0, env.UID, env.Now())
	a.rec.Gate(pv)
	if !pv.Passed() {
		reason := state.ReasonGPUNotIdle
		if pv.Foreign() {
			reason = state.ReasonForeignGPUProcess
		}
		return nil, a.fail(reason, pv.Detail), false
	}
	readings := a.recordPreflight()
	cl := a.checkCPULocal(readings)
	if a.rec.Gate(cl); cl.Verdict == gates.Fail {
		return nil, a.fail(state.ReasonHarnessError, "slot "+strings.Join(protocols.SlotNames(a.slots), "+")+": "+cl.Detail), false
	}
	pp := gates.PortFree(a.port, env.Now(), launch.PortHolders)
	a.rec.Gate(pp)
	if !pp.Passed() {
		out := a.fail(state.ReasonHarnessError, pp.Detail)
		out.BusyPort = a.port // the rerun waits for it
		return nil, out, false
	}
	return readings, Outcome{}, true
}
