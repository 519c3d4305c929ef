package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"warden/pkg/launch"
	"warden/pkg/state"
)

// reclaimUnrecorded ends the processes of a live attempt that the records
// do not name: a controller that died between starting a process and
// recording it, or a descendant that left its process group where no
// cgroup holds it. They are found by the attempt's leaf cgroups and by the
// attempt directory every process of the attempt inherits in its
// environment (WARDEN_ATTEMPT_DIR); each is identity-checked and killed
// through a pidfd (an interrupted attempt needs no graceful stop), and
// waited for. sameBoot must say that the host is still in the boot the
// dead controller ran in: after a reboot nothing of it can be alive, and
// nothing is signalled.
func (c *controller) reclaimUnrecorded(ctx context.Context, a state.Attempt, sameBoot bool) ([]state.Signal, error) {
	if !sameBoot || a.Dir == "" {
		return nil, nil
	}
	var sigs []state.Signal
	var errs []error
	if c.cgroups.Available() {
		for _, role := range []string{"server", "client"} {
			path := filepath.Join(c.cgroups.Root(), fmt.Sprintf("%s.a%d.%s", a.RunID, a.N, role))
			if recordedCgroup(a, path) || !isDir(path) {
				continue
			}
			recs, err := launch.Reclaim(ctx, c.boot, launch.Leftover{Role: role + " (unrecorded)", Cgroup: path}, launch.StopOptions{})
			sigs = append(sigs, toSignals(recs)...)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	ids, err := marked(c.boot, "WARDEN_ATTEMPT_DIR="+a.Dir)
	if err != nil {
		return sigs, errors.Join(append(errs, err)...)
	}
	var killed []launch.Identity
	for _, id := range ids {
		rec, err := launch.Signal(c.boot, id, "unrecorded", syscall.SIGKILL)
		if err != nil {
			continue // gone meanwhile, or no longer the process found
		}
		sigs = append(sigs, toSignals([]launch.SignalRecord{rec})...)
		killed = append(killed, id)
		c.log.Warn().Str("run", a.RunID).Int("attempt", a.N).Int("pid", id.PID).Msg("killed a process of the attempt that was never recorded")
	}
	if err := waitGone(ctx, c.boot, killed); err != nil {
		errs = append(errs, err)
	}
	return sigs, errors.Join(errs...)
}

// leftoversFigure marks, in an attempt's figures, that a resume found
// processes of the attempt alive. It is recorded before any of them is
// signalled: a resume that dies while ending them leaves the mark, and the
// next resume charges the attempt's GPUs up to its own time, as they may
// have been held until just before.
const leftoversFigure = "leftovers_alive_at_resume"

// noteLeftovers records leftoversFigure on a live attempt when any of its
// processes, recorded or (in the same boot) not, is alive now; it returns
// the attempt as recorded.
func (c *controller) noteLeftovers(a state.Attempt, sameBoot bool) state.Attempt {
	if a.Figures[leftoversFigure] > 0 {
		return a
	}
	alive := false
	for _, p := range a.Procs {
		id := launch.Identity{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID}
		if ok, _ := id.Alive(c.boot); ok {
			alive = true
		}
	}
	if !alive && sameBoot && a.Dir != "" {
		ids, _ := marked(c.boot, "WARDEN_ATTEMPT_DIR="+a.Dir)
		alive = len(ids) > 0
	}
	if !alive {
		return a
	}
	got, err := c.store.UpdateAttempt(a.RunID, a.N, func(at *state.Attempt) error {
		if at.Figures == nil {
			at.Figures = map[string]float64{}
		}
		at.Figures[leftoversFigure] = 1
		return nil
	})
	if err != nil && !errors.Is(err, state.ErrStateFile) {
		c.log.Warn().Err(err).Str("run", a.RunID).Int("attempt", a.N).Msg("note left-over processes")
		if a.Figures == nil {
			a.Figures = map[string]float64{}
		}
		a.Figures[leftoversFigure] = 1 // charge as held all the same
		return a
	}
	return got
}

func recordedCgroup(a state.Attempt, path string) bool {
	for _, p := range a.Procs {
		if p.Cgroup == path {
			return true
		}
	}
	return false
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// marked lists the live processes (not this one) whose environment holds
// marker, a "KEY=value" string, with their identities.
func marked(boot launch.BootIDSource, marker string) ([]launch.Identity, error) {
	want := []byte("\x00" + marker + "\x00")
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc for %s: %w", marker, err)
	}
	self := os.Getpid()
	var out []launch.Identity
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), want) {
			continue // gone, not readable (another user's), or not ours
		}
		id, err := launch.Lookup(pid, boot)
		if err != nil {
			continue
		}
		if alive, _ := id.Alive(boot); alive {
			out = append(out, id)
		}
	}
	return out, nil
}

// waitGone waits until every process named is gone (a zombie counts as
// gone), polling /proc, for at most 30 s.
func waitGone(ctx context.Context, boot launch.BootIDSource, ids []launch.Identity) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var left []int
		for _, id := range ids {
			if alive, _ := id.Alive(boot); alive {
				left = append(left, id.PID)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes %v still alive after SIGKILL: %w", left, ctx.Err())
		case <-tick.C:
		}
	}
}
