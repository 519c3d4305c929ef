package attempt

import (
	"fmt"
	"sync"

	"warden/pkg/gates"
	"warden/pkg/gpu/sample"
	"warden/pkg/launch"
	"warden/pkg/state"
)

// ownProcs knows the attempt's processes for the GPU sampler, which runs
// in a goroutine of its own: a process on the attempt's GPUs that is not
// in one of their cgroups or process groups, nor an escapee of theirs
// reparented to the controller and carrying the attempt's marker, is
// foreign (seed 002 stop condition 2: "another user's GPU process
// appears").
//
// mu is held while a process starts and is registered (attempt.start),
// and while a sample is judged: a process a sample saw on a GPU had
// started, so it is registered by the time the judgement gets the lock.
// A sample can never take the attempt's own new process for a stranger.
// A pid once found the attempt's stays so (known): one that exits between
// the read and the judgement is not a stranger either. Judging ends when
// the attempt begins to end its processes (end): from then on the
// cleanup gate judges what holds the GPUs.
type ownProcs struct {
	mu    sync.Mutex // guards procs, known and ended, and orders starts against judgements
	procs []*launch.Proc
	known map[int]bool
	ended bool

	// found receives the first foreign sighting (buffered: the sampler
	// never waits on it); the attempt's supervision reads it.
	found chan gates.Verdict
	once  sync.Once

	// adopted says whether a pid outside the cgroups and groups is one of
	// the attempt's escapees: a descendant of its processes that left
	// them (a root process its cgroup too), or one already reparented to
	// the controller carrying the attempt's marker (launch.IsAdopted).
	// Nil: none.
	adopted func(pid int) bool
}

func newOwnProcs() *ownProcs {
	return &ownProcs{found: make(chan gates.Verdict, 1), known: map[int]bool{}}
}

// end stops the judging: the attempt is ending its processes.
func (o *ownProcs) end() {
	o.mu.Lock()
	o.ended = true
	o.mu.Unlock()
}

// lockStart is held across a start; register and unlock end it.
func (o *ownProcs) lockStart() { o.mu.Lock() }

func (o *ownProcs) register(p *launch.Proc) {
	if p != nil {
		o.procs = append(o.procs, p)
	}
}

func (o *ownProcs) unlockStart() { o.mu.Unlock() }

// descends says whether pid is a descendant of a registered process: one
// that left their groups and cgroups (setsid, a root daemon's cgroup move)
// before its parent exited, when it is not yet the controller's child. It
// runs with mu held.
func (o *ownProcs) descends(pid int) bool {
	for _, p := range o.procs {
		if launch.DescendsFrom(pid, p.PID) {
			return true
		}
	}
	return false
}

// pids lists the live processes of the registered processes' cgroup
// leaves and process groups. It runs with mu held.
func (o *ownProcs) pids() []int {
	var out []int
	for _, p := range o.procs {
		if l := p.Leaf(); !l.IsZero() {
			if ps, err := l.Procs(); err == nil {
				out = append(out, ps...)
				continue
			}
		}
		if ps, err := launch.GroupPIDs(p.PGID); err == nil {
			out = append(out, ps...)
		}
	}
	return out
}

// watch is the sampler's Watch: it judges each sample's processes.
func (o *ownProcs) watch(ownUID int) func(sample.Record) {
	return func(rec sample.Record) {
		o.mu.Lock()
		if o.ended {
			o.mu.Unlock()
			return
		}
		for _, pid := range o.pids() {
			o.known[pid] = true
		}
		if o.adopted != nil {
			for _, r := range rec.GPUs {
				for _, p := range r.Procs {
					if !o.known[p.PID] && o.adopted(p.PID) {
						o.known[p.PID] = true
					}
				}
			}
		}
		v := gates.GPUProcesses(rec.GPUs, o.known, ownUID)
		o.mu.Unlock()
		if v.Verdict != gates.Pass {
			v.At = rec.Time
			o.once.Do(func() { o.found <- v })
		}
	}
}

// ownFound is the channel of the sampler's foreign sighting; nil (never
// ready) when nothing samples.
func (a *Attempt) ownFound() <-chan gates.Verdict {
	if a.own == nil || a.foreign != nil {
		return nil
	}
	return a.own.found
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
	case v := <-a.own.found:
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
