package gates

import (
	"fmt"
	"strconv"
	"strings"

	"warden/pkg/gpu"
)

// GPUProcesses is the gpu-processes gate on one sample: it fails when a
// GPU holds a process whose pid is not among own; it names each one with its uid and memory, "another user's" when
// its uid is not ownUID (or cannot be read: -1).
//
// Figures: foreign_processes, foreign_processes_other_users.
func GPUProcesses(rs []gpu.Reading, own map[int]bool, ownUID int) Verdict {
	v := Verdict{Gate: "gpu-processes", Verdict: Pass, Figures: map[string]float64{"foreign_processes": 0, "foreign_processes_other_users": 0}}
	var found []string
	for _, r := range rs {
		for _, p := range r.Procs {
			if own[p.PID] {
				continue
			}
			who := "a process outside the attempt"
			if p.UID != ownUID {
				who = "another user's process"
				v.Figures["foreign_processes_other_users"]++
			}
			v.Figures["foreign_processes"]++
			found = append(found, fmt.Sprintf("GPU %d: %s (pid %d, uid %d) holds %s MiB", r.Index, who, p.PID, p.UID, mib(p.UsedMiB)))
		}
	}
	if len(found) > 0 {
		v.Verdict = Fail
		v.Detail = "a GPU process appeared mid-run: " + strings.Join(found, "; ")
	}
	return v
}

func mib(n int) string {
	if n < 0 {
		return "unknown"
	}
	return strconv.Itoa(n)
}
