// Package ownprocs tells an attempt's own processes from strangers on its
// GPUs, for the GPU sampler, which runs in a goroutine of its own: a
// process on the attempt's GPUs that is not in one of its processes'
// cgroups or process groups, nor an escapee of theirs (a descendant that
// left them, or one reparented to the controller carrying the attempt's
// marker), is foreign (seed 002 stop condition 2: "another user's GPU
// process appears").
//
// The lock is held while a process starts and is registered (LockStart,
// Register, UnlockStart), and while a sample is judged: a process a sample
// saw on a GPU had started, so it is registered by the time the judgement
// gets the lock. A sample can never take the attempt's own new process
// for a stranger. A pid once found the attempt's stays so: one that exits
// between the read and the judgement is not a stranger either, nor is a
// process of the attempt's user that the sample saw but that is gone by
// the judgement before any scan placed it (it can no longer be told
// apart, and it holds nothing; another user's process is judged by its
// user alone). Judging
// ends when the attempt begins to end its processes (End): from then on
// the cleanup gate judges what holds the GPUs.
package ownprocs

import (
	"sync"
	"syscall"

	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/gpu/sample"
	"warden/pkg/launch"
)

// Set is the processes of one attempt.
type Set struct {
	mu     sync.Mutex // guards procs, known and ended, and orders starts against judgements
	procs  []*launch.Proc
	known  map[int]bool
	ended  bool
	marker string

	// found receives the first foreign sighting (buffered: the sampler
	// never waits on it); the attempt's supervision reads it.
	found chan gates.Verdict
	once  sync.Once
}

// New is an empty Set whose escapees carry marker in their environment
// (launch.IsAdopted); "" recognises descendants only.
func New(marker string) *Set {
	return &Set{found: make(chan gates.Verdict, 1), known: map[int]bool{}, marker: marker}
}

// End stops the judging: the attempt is ending its processes.
func (o *Set) End() {
	o.mu.Lock()
	o.ended = true
	o.mu.Unlock()
}

// LockStart is held across a start; Register and UnlockStart end it.
func (o *Set) LockStart() { o.mu.Lock() }

// Register adds p, started while LockStart is held; nil adds nothing.
func (o *Set) Register(p *launch.Proc) {
	if p != nil {
		o.procs = append(o.procs, p)
	}
}

// UnlockStart ends LockStart.
func (o *Set) UnlockStart() { o.mu.Unlock() }

// Found is the channel of the first foreign sighting.
func (o *Set) Found() <-chan gates.Verdict { return o.found }

// adopted says whether a pid outside the cgroups and groups is one of the
// attempt's escapees: a descendant of its processes that left them (a
// root process its cgroup too) before its parent exited, or one already
// reparented to the controller carrying the attempt's marker. It runs
// with mu held.
func (o *Set) adopted(pid int) bool {
	if o.marker != "" && launch.IsAdopted(pid, o.marker) {
		return true
	}
	for _, p := range o.procs {
		if launch.DescendsFrom(pid, p.PID) {
			return true
		}
	}
	return false
}

// pids lists the live processes of the registered processes' cgroup
// leaves and process groups. It runs with mu held.
func (o *Set) pids() []int {
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

// Watch is the sampler's Watch: it judges each sample's processes, the
// attempt's being ownUID's.
func (o *Set) Watch(ownUID int) func(sample.Record) {
	return func(rec sample.Record) {
		o.mu.Lock()
		if o.ended {
			o.mu.Unlock()
			return
		}
		for _, pid := range o.pids() {
			o.known[pid] = true
		}
		judged := make([]gpu.Reading, 0, len(rec.GPUs))
		for _, r := range rec.GPUs {
			procs := r.Procs[:0:0]
			for _, p := range r.Procs {
				if !o.known[p.PID] && o.adopted(p.PID) {
					o.known[p.PID] = true
				}
				if !o.known[p.PID] && p.UID == ownUID && gone(p.PID) {
					// ours by its user, and gone before the scan above
					// could place it: a process of the attempt that
					// exited between the GPU read and this judgement
					// (a server killed as it became ready), which the
					// next sample cannot show either way
					continue
				}
				procs = append(procs, p)
			}
			r.Procs = procs
			judged = append(judged, r)
		}
		v := gates.GPUProcesses(judged, o.known, ownUID)
		o.mu.Unlock()
		if v.Verdict != gates.Pass {
			v.At = rec.Time
			o.once.Do(func() { o.found <- v })
		}
	}
}

// gone says whether no process pid exists any more.
func gone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
