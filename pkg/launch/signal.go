package launch

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotOurs is returned by Signal, SignalGroup and the functions built on
// them when the recorded identity does not name the process found now: the
// pid (or the group leader's pid) belongs to a process with another start
// time, or the host has rebooted since the identity was taken. Nothing is
// signalled.
var ErrNotOurs = errors.New("process is not the one recorded")

// ErrGone is returned by Signal and SignalGroup when the recorded process
// (or every member of the recorded group) has already exited: there is no
// such pid any more, or only a zombie is left. Nothing is signalled.
var ErrGone = errors.New("process has exited")

// Signal targets, as written in SignalRecord.Target.
const (
	TargetPID    = "pid"    // one process, through a pidfd
	TargetGroup  = "group"  // a process group: kill(-pgid), or its members one by one
	TargetCgroup = "cgroup" // every process of a leaf cgroup
)

// SignalRecord is the account of one signal sent. Validators need the exact
// sequence and times, so every signal this package sends returns one.
type SignalRecord struct {
	At     time.Time // when the signal was sent
	Role   string    // the caller's name for the target, e.g. "server"
	Target string    // TargetPID, TargetGroup or TargetCgroup
	// PID is the process for TargetPID and the process group id for
	// TargetGroup; 0 for TargetCgroup.
	PID    int
	Signal string // e.g. "SIGTERM"
	// Members lists the pids signalled one by one: for a group whose leader
	// has exited, and for a cgroup. Empty when kill(-pgid) or cgroup.kill
	// did the job in one call (for cgroup.kill it lists the pids seen just
	// before).
	Members []int `json:",omitempty"`
	// Cgroup is the leaf directory for TargetCgroup.
	Cgroup string `json:",omitempty"`
}

func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// Signal sends sig to the process named by id after checking that the pid,
// its start time and the boot id all match. It returns ErrNotOurs or ErrGone
// (wrapped) when they do not, and then sends nothing.
//
// The check cannot race with pid reuse: a pidfd is opened first and the
// identity is checked afterwards, so if the check passes the pidfd refers to
// the recorded process, and the signal goes through that pidfd. On kernels
// without pidfd_open (before 5.3) it falls back to check-then-kill, which
// leaves a window of a few microseconds in which the pid could be reused.
func Signal(boot BootIDSource, id Identity, role string, sig syscall.Signal) (SignalRecord, error) {
	if err := signalIdentity(boot, id, sig); err != nil {
		return SignalRecord{}, fmt.Errorf("signal %s %s (%s): %w", signalName(sig), role, id, err)
	}
	return SignalRecord{At: time.Now(), Role: role, Target: TargetPID, PID: id.PID, Signal: signalName(sig)}, nil
}

func signalIdentity(boot BootIDSource, id Identity, sig syscall.Signal) error {
	if id.PID <= 1 {
		return fmt.Errorf("pid %d out of range: %w", id.PID, ErrNotOurs)
	}
	fd, err := unix.PidfdOpen(id.PID, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("pidfd_open %d: %w", id.PID, ErrGone)
	case errors.Is(err, unix.ENOSYS):
		if err := id.verify(boot); err != nil {
			return err
		}
		if err := unix.Kill(id.PID, sig); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("kill %d: %w", id.PID, ErrGone)
			}
			return fmt.Errorf("kill %d: %w", id.PID, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("pidfd_open %d: %w", id.PID, err)
	}
	defer unix.Close(fd)
	if err := id.verify(boot); err != nil {
		return err
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pidfd_send_signal %d: %w", id.PID, ErrGone)
		}
		return fmt.Errorf("pidfd_send_signal %d: %w", id.PID, err)
	}
	return nil
}

// SignalGroup sends sig to the process group whose leader is named by
// leader (pgid == leader.PID), after checking the leader's identity:
//
//   - The leader exists (alive or a zombie) with the recorded start time: it
//     still pins the pgid, so kill(-pgid) reaches exactly the group.
//   - A process with pid == pgid exists with another start time: the number
//     was reused, so the group is not ours. ErrNotOurs, nothing sent.
//   - No process has pid == pgid (the leader exited and was reaped): the
//     members are found in /proc (process group == pgid, start time no
//     earlier than the leader's) and each is signalled through a pidfd after
//     checking its start time again. While any member remains, the kernel
//     keeps the pgid number allocated, so no new group can take it; the
//     residual risk is that the last member exits and its number is taken by
//     an unrelated process between the scan and pidfd_open, which the start
//     time check then catches. ErrGone when no member is left.
//
// The boot id must match in every case (ErrNotOurs otherwise).
func SignalGroup(boot BootIDSource, leader Identity, role string, sig syscall.Signal) (SignalRecord, error) {
	rec, err := signalGroup(boot, leader, sig)
	if err != nil {
		return SignalRecord{}, fmt.Errorf("signal %s group %d of %s (%s): %w", signalName(sig), leader.PID, role, leader, err)
	}
	rec.At = time.Now()
	rec.Role = role
	return rec, nil
}

func signalGroup(boot BootIDSource, leader Identity, sig syscall.Signal) (SignalRecord, error) {
	rec := SignalRecord{Target: TargetGroup, PID: leader.PID, Signal: signalName(sig)}
	if leader.PID <= 1 {
		return rec, fmt.Errorf("pgid %d out of range: %w", leader.PID, ErrNotOurs)
	}
	bootID, err := boot.orDefault()()
	if err != nil {
		return rec, err
	}
	if bootID != leader.BootID {
		return rec, fmt.Errorf("boot id is now %s: %w", bootID, ErrNotOurs)
	}
	st, err := readStat(leader.PID)
	switch {
	case err == nil && st.StartTime == leader.StartTime:
		if err := unix.Kill(-leader.PID, sig); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return rec, fmt.Errorf("kill -%d: %w", leader.PID, ErrGone)
			}
			return rec, fmt.Errorf("kill -%d: %w", leader.PID, err)
		}
		return rec, nil
	case err == nil:
		return rec, fmt.Errorf("pid %d now has start time %d, the group id was reused: %w", leader.PID, st.StartTime, ErrNotOurs)
	case !errors.Is(err, errNoProcess):
		return rec, err
	}
	members, err := groupMembers(leader)
	if err != nil {
		return rec, err
	}
	for _, m := range members {
		id := Identity{PID: m.PID, StartTime: m.StartTime, BootID: leader.BootID}
		err := signalIdentity(boot, id, sig)
		switch {
		case err == nil:
			rec.Members = append(rec.Members, m.PID)
		case errors.Is(err, ErrGone), errors.Is(err, ErrNotOurs):
			// Exited (or replaced) since the scan: nothing to signal.
		default:
			return rec, err
		}
	}
	if len(rec.Members) == 0 {
		return rec, fmt.Errorf("leader and members exited: %w", ErrGone)
	}
	return rec, nil
}

// BecomeSubreaper marks the calling process as a child subreaper
// (PR_SET_CHILD_SUBREAPER): descendants orphaned by their parent are
// reparented to it instead of to init, so its Reaper sees (and reaps) their
// exits. It affects the whole process; call it once, early in main.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_CHILD_SUBREAPER: %w", err)
	}
	return nil
}
