package gates

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"warden/pkg/gpu"
)

// Verdicts.
const (
	Pass  = "pass"
	Fail  = "fail"
	Error = "error"
)

// Verdict is the outcome of one gate, with its figures.
type Verdict struct {
	Gate    string             `json:"gate"`
	Verdict string             `json:"verdict"`
	Detail  string             `json:"detail,omitempty"`
	Figures map[string]float64 `json:"figures,omitempty"`
	At      time.Time          `json:"at"`
	// Class is what kind of failure a validator reports, when it says:
	// ClassProfileArtifact (a profiler trace is missing or broken: an
	// infrastructure/profile-artifact failure that an exact rerun may
	// cure). Empty: a failure of the run itself.
	Class string `json:"class,omitempty"`
}

// ClassProfileArtifact is the Class of a failed profile artifact.
const ClassProfileArtifact = "profile-artifact"

// ClassQuality is the Class of a failed quality gate (seed 000): the
// run's outputs failed a quality check; it is kept and shown, excluded
// from rankings, and does not stop the campaign.
const ClassQuality = "quality"

// ClassInfrastructure is the Class of a failed clock and load check: the
// host (a throttled GPU, a loaded host) was measured, not the server; an
// exact rerun may cure it.
const ClassInfrastructure = "infrastructure"

// Passed reports whether the verdict is a pass.
func (v Verdict) Passed() bool { return v.Verdict == Pass }

// GPUs reads the state of GPUs. Implementations bound the time of every
// call; the controller calls them off its main loop.
type GPUs interface {
	// Name says which backend answers ("nvml", "fake").
	Name() string
	// Snapshot reads the GPUs with the given indices.
	Snapshot(indices []int) ([]gpu.State, error)
}

// Preflight checks that the run's GPUs are idle before launch: no compute
// process and memory at most the baseline. A process of another user is
// named as such (the seed's "another user's GPU process appears").
//
// Figures: gpuN_used_mib per GPU, foreign_processes when another user's
// process was seen (see Foreign).
//
// A fail is the seed's stop condition 2: the caller launches nothing,
// fails the attempt (gpu-not-idle, or foreign-gpu-process when Foreign),
// and stops the campaign for review. It never touches the other process.
func Preflight(gpus []gpu.State, baselineMiB int, ownUID int, now time.Time) Verdict {
	v := Verdict{Gate: "preflight", Verdict: Pass, Figures: map[string]float64{}, At: now}
	var problems []string
	for _, g := range gpus {
		v.Figures["gpu"+strconv.Itoa(g.Index)+"_used_mib"] = float64(g.UsedMiB)
		for _, p := range g.Procs {
			who := "a process"
			if p.UID != ownUID {
				who = "another user's process"
				v.Figures["foreign_processes"]++
			}
			problems = append(problems, fmt.Sprintf("GPU %d: %s (pid %d, uid %d) holds %d MiB", g.Index, who, p.PID, p.UID, p.UsedMiB))
		}
		if g.UsedMiB > baselineMiB && len(g.Procs) == 0 {
			problems = append(problems, fmt.Sprintf("GPU %d: %d MiB used, baseline %d MiB", g.Index, g.UsedMiB, baselineMiB))
		}
	}
	if len(problems) > 0 {
		v.Verdict = Fail
		v.Detail = "GPU not idle: " + strings.Join(problems, "; ")
	}
	return v
}

// Foreign reports whether a failed preflight found another user's process.
func (v Verdict) Foreign() bool { return v.Figures["foreign_processes"] > 0 }

// PortFree checks that nothing listens on the loopback port, by binding it
// for an instant. Figures: port, and holder_pid when holders names the
// process holding it. A fail means the slot's port is taken: the attempt
// fails (harness-error, one exact rerun), since the server would bind
// elsewhere or fail; its detail names the holder, as holders (nil: none)
// describes the processes that listen on the port (launch.PortHolders).
func PortFree(port int, now time.Time, holders func(port int) (string, int)) Verdict {
	v := Verdict{Gate: "port", Verdict: Pass, Figures: map[string]float64{"port": float64(port)}, At: now}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		v.Verdict = Fail
		v.Detail = fmt.Sprintf("port %d is in use: %v", port, err)
		if holders != nil {
			if who, pid := holders(port); who != "" {
				v.Detail += "; " + who
				if pid > 0 {
					v.Figures["holder_pid"] = float64(pid)
				}
			}
		}
		return v
	}
	l.Close()
	return v
}

// Cleanup judges the end of an attempt: every process it started is gone
// and its GPUs' memory is back to the baseline. pids are the attempt's
// processes still alive; waited is how long cleanup took so far.
//
// Figures: cleanup_s, live_processes, gpuN_used_mib per GPU.
//
// The caller polls until a pass or its timeout; a fail at the timeout is
// the seed's stop condition 2 ("final GPU cleanup does not return to
// zero"): the run fails with cleanup-timeout and the campaign stops.
func Cleanup(pids []int, gpus []gpu.State, baselineMiB int, waited time.Duration, now time.Time) Verdict {
	v := Verdict{Gate: "cleanup", Verdict: Pass, Figures: map[string]float64{"cleanup_s": waited.Seconds(), "live_processes": float64(len(pids))}, At: now}
	var problems []string
	if len(pids) > 0 {
		problems = append(problems, fmt.Sprintf("processes still alive: %v", pids))
	}
	for _, g := range gpus {
		v.Figures["gpu"+strconv.Itoa(g.Index)+"_used_mib"] = float64(g.UsedMiB)
		if g.UsedMiB > baselineMiB {
			var holders []string
			for _, p := range g.Procs {
				holders = append(holders, fmt.Sprintf("pid %d %d MiB", p.PID, p.UsedMiB))
			}
			problems = append(problems, fmt.Sprintf("GPU %d: %d MiB used, baseline %d MiB (%s)", g.Index, g.UsedMiB, baselineMiB, strings.Join(holders, ", ")))
		}
	}
	if len(problems) > 0 {
		v.Verdict = Fail
		v.Detail = strings.Join(problems, "; ")
	}
	return v
}
