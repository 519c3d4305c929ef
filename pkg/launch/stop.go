package launch

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// StopOptions says how long Stop and Reclaim wait at each step.
type StopOptions struct {
	// Grace is how long the leader (the API parent) has to exit after its
	// own SIGTERM before the whole group and cgroup are signalled. Zero:
	// the group is signalled at once.
	Grace time.Duration
	// GroupGrace is how long the group and cgroup have after their SIGTERM
	// before SIGKILL. Zero: SIGKILL at once.
	GroupGrace time.Duration
	// Cgroup is the leaf to signal, kill and wait for. Zero: Stop uses the
	// Proc's own leaf (none if it was started without one).
	Cgroup Leaf
}

// Stop shuts p down and waits until p, its process group and its leaf
// cgroup are all gone:
//
//  1. SIGTERM to p alone (the API parent drains and stops its workers), then
//     up to Grace for p to exit, as the Reaper reports it (no polling).
//  2. If p is still running, or its group or cgroup still hold live
//     processes: SIGTERM to the group and to each process of the cgroup,
//     then up to GroupGrace, polling /proc and cgroup.events.
//  3. If anything is still alive: SIGKILL to the group and cgroup.kill on the
//     leaf, then wait until everything is gone.
//
// A step whose target has nothing left is skipped, so a process that exits
// on its first SIGTERM with nothing left behind gets exactly one signal.
// Every signal sent is returned, in order, with its time. When ctx ends
// during a grace period Stop goes straight to step 3; the final wait is
// bounded by ctx only, and Stop then returns the records with an error
// wrapping ctx.Err(). Zombies count as gone: they hold nothing but a pid.
//
// p must have been started by a Launcher whose Reaper is running.
func Stop(ctx context.Context, p *Proc, opts StopOptions) ([]SignalRecord, error) {
	leaf := opts.Cgroup
	if leaf.IsZero() {
		leaf = p.leaf
	}
	s := &shutdown{boot: p.boot, leader: p.Identity, role: p.Role, leaf: leaf, leaderExit: p.done}
	if err := s.run(ctx, opts); err != nil {
		return s.recs, fmt.Errorf("stop %s: %w", p, err)
	}
	return s.recs, nil
}

// Shutdown stops p with the grace periods of its Spec (p.Stop): it is
// Stop(ctx, p, p.Stop). See Stop for the steps, the records and the errors.
func (p *Proc) Shutdown(ctx context.Context) ([]SignalRecord, error) {
	return Stop(ctx, p, p.Stop)
}

// Leftover is what a controller recorded about a process tree it started,
// enough to end it after the controller itself died.
type Leftover struct {
	Leader Identity // the group leader; its pid is the process group id
	Role   string
	Cgroup string // leaf cgroup directory; "" when none
}

// Reclaim ends what is left of a process tree started by a previous
// controller (at resume, when the processes are no longer our children). It
// follows Stop's steps, but learns of the leader's exit by polling /proc.
// Every step is identity-checked: if the host rebooted, nothing is left and
// nothing is signalled; if the leader's pid or group id now belongs to
// another process, the group is left alone (ErrNotOurs is not returned, the
// cgroup is still ended). The leaf cgroup, when recorded, is checked with
// OpenLeaf, killed whole and waited for, but not removed.
func Reclaim(ctx context.Context, boot BootIDSource, lo Leftover, opts StopOptions) ([]SignalRecord, error) {
	boot = boot.orDefault()
	leaf := opts.Cgroup
	if leaf.IsZero() && lo.Cgroup != "" {
		var err error
		leaf, err = OpenLeaf(lo.Cgroup)
		if err != nil && dirExists(lo.Cgroup) {
			return nil, fmt.Errorf("reclaim %s %s: %w", lo.Role, lo.Leader, err)
		}
		// A leaf that no longer exists holds nothing.
	}
	s := &shutdown{boot: boot, leader: lo.Leader, role: lo.Role, leaf: leaf}
	if err := s.run(ctx, opts); err != nil {
		return s.recs, fmt.Errorf("reclaim %s %s: %w", lo.Role, lo.Leader, err)
	}
	return s.recs, nil
}

// shutdown carries one Stop or Reclaim.
type shutdown struct {
	boot       BootIDSource
	leader     Identity
	role       string
	leaf       Leaf
	leaderExit <-chan struct{} // closed when the reaper collected the leader; nil: poll /proc
	recs       []SignalRecord
}

func (s *shutdown) run(ctx context.Context, opts StopOptions) error {
	// Step 1: the leader alone.
	if !s.leaderGone() {
		rec, err := Signal(s.boot, s.leader, s.role, syscall.SIGTERM)
		switch {
		case err == nil:
			s.recs = append(s.recs, rec)
			s.waitLeader(ctx, opts.Grace)
		case errors.Is(err, ErrGone):
			// Exited on its own; the reaper will report it.
		case errors.Is(err, ErrNotOurs) && s.leaderExit == nil:
			// Reclaim: the pid is someone else's now; the cgroup may still
			// hold ours.
		default:
			return err
		}
	}

	// Step 2: SIGTERM to the group and the cgroup.
	empty, err := s.empty()
	if err != nil {
		return err
	}
	if !empty && ctx.Err() == nil {
		if err := s.signalAll(syscall.SIGTERM); err != nil {
			return err
		}
		if err := s.waitEmpty(ctx, opts.GroupGrace); err != nil {
			return err
		}
		if empty, err = s.empty(); err != nil {
			return err
		}
	}

	// Step 3: SIGKILL, then wait for everything to be gone.
	if !empty {
		if err := s.signalAll(syscall.SIGKILL); err != nil {
			return err
		}
	}
	// empty includes the leader's exit (for Stop: the reaper's report).
	if err := pollUntil(ctx, s.empty); err != nil {
		return fmt.Errorf("wait for %s, group %d and cgroup %q to end: %w", s.leader, s.leader.PID, s.leaf.Path, err)
	}
	return nil
}

// signalAll sends sig to the group and the cgroup, recording what was sent.
// A target with nothing left in it is skipped.
func (s *shutdown) signalAll(sig syscall.Signal) error {
	// List the cgroup first: the group signal may empty it before the list
	// is taken, and the record should say what was there.
	pids, err := s.leaf.Procs()
	if err != nil {
		return err
	}
	rec, err := SignalGroup(s.boot, s.leader, s.role, sig)
	switch {
	case err == nil:
		s.recs = append(s.recs, rec)
	case errors.Is(err, ErrGone), errors.Is(err, ErrNotOurs) && s.leaderExit == nil:
	default:
		return err
	}
	if len(pids) == 0 {
		return nil
	}
	rec = SignalRecord{Role: s.role, Target: TargetCgroup, Signal: signalName(sig), Cgroup: s.leaf.Path}
	if sig == syscall.SIGKILL {
		if err := s.leaf.Kill(); err != nil {
			return err
		}
		rec.Members = pids
	} else {
		rec.Members, err = s.leaf.Signal(sig)
		if err != nil {
			return err
		}
		if len(rec.Members) == 0 {
			return nil
		}
	}
	rec.At = time.Now()
	s.recs = append(s.recs, rec)
	return nil
}

// leaderGone reports whether the leader has exited: reaped (Stop), or not
// alive any more (Reclaim).
func (s *shutdown) leaderGone() bool {
	if s.leaderExit != nil {
		select {
		case <-s.leaderExit:
			return true
		default:
			return false
		}
	}
	alive, err := s.leader.Alive(s.boot)
	return err == nil && !alive
}

// waitLeader waits up to d for the leader to exit, or until ctx ends.
func (s *shutdown) waitLeader(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if s.leaderExit != nil {
		select {
		case <-s.leaderExit:
		case <-ctx.Done():
		}
		return
	}
	_ = pollUntil(ctx, func() (bool, error) { return s.leaderGone(), nil })
}

// waitEmpty waits up to d for the group and the cgroup to empty, or until
// ctx ends. Only an error reading /proc or the cgroup is returned.
func (s *shutdown) waitEmpty(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := pollUntil(ctx, s.empty)
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}

// empty reports whether the leader, its group and the cgroup hold no live
// process.
func (s *shutdown) empty() (bool, error) {
	if !s.leaderGone() {
		return false, nil
	}
	if !s.leaf.IsZero() {
		// Every member of the group was born in the leaf (children inherit
		// their cgroup), so an empty leaf means an empty group, without a
		// scan of /proc.
		pop, err := s.leaf.Populated()
		return !pop, err
	}
	members, err := s.groupMembers()
	if err != nil || len(members) > 0 {
		return false, err
	}
	pop, err := s.leaf.Populated()
	return !pop, err
}

// groupMembers lists the live members of the leader's group, or none when
// the group id is no longer the leader's (the host rebooted, or the pid was
// reused by a process that is not ours).
func (s *shutdown) groupMembers() ([]procStat, error) {
	bootID, err := s.boot()
	if err != nil {
		return nil, err
	}
	if bootID != s.leader.BootID {
		return nil, nil
	}
	st, err := readStat(s.leader.PID)
	if err == nil && st.StartTime != s.leader.StartTime {
		return nil, nil
	}
	if err != nil && !errors.Is(err, errNoProcess) {
		return nil, err
	}
	return groupMembers(s.leader)
}
