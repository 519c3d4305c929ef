package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultBootIDPath is where the kernel publishes the current boot id.
const DefaultBootIDPath = "/proc/sys/kernel/random/boot_id"

// procRoot is the procfs mount this package reads.
const procRoot = "/proc"

// BootIDSource returns the id of the boot the host is in now. It is a
// function so that tests can pretend the host rebooted.
type BootIDSource func() (string, error)

// ReadBootID is the default BootIDSource: it reads DefaultBootIDPath.
func ReadBootID() (string, error) {
	b, err := os.ReadFile(DefaultBootIDPath)
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("read boot id %s: empty", DefaultBootIDPath)
	}
	return id, nil
}

// BootTime is when the host booted (btime in /proc/stat).
func BootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("parse btime %q: %w", v, err)
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, errors.New("no btime in /proc/stat")
}

// BootIDFileEnv names a file whose content replaces the kernel's boot id
// (for tests that simulate a reboot; never set it on a real host: a
// campaign could then mistake a reboot for the same boot).
const BootIDFileEnv = "WARDEN_BOOT_ID_FILE"

// BootIDFromEnv is the BootIDSource the environment asks for: the file
// $WARDEN_BOOT_ID_FILE names, or nil (the kernel's) when it is not set.
func BootIDFromEnv() BootIDSource {
	if f := os.Getenv(BootIDFileEnv); f != "" {
		return BootIDFromFile(f)
	}
	return nil
}

// BootIDFromFile is a BootIDSource that reads the boot id from path.
func BootIDFromFile(path string) BootIDSource {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read boot id from %s (%s): %w", path, BootIDFileEnv, err)
		}
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("read boot id from %s (%s): empty", path, BootIDFileEnv)
		}
		return id, nil
	}
}

// Read returns the boot id b gives, or the kernel's when b is nil.
func (b BootIDSource) Read() (string, error) { return b.orDefault()() }

// orDefault returns b, or ReadBootID when b is nil.
func (b BootIDSource) orDefault() BootIDSource {
	if b == nil {
		return ReadBootID
	}
	return b
}

// Identity names one process across time: a pid alone is reused, a pid with
// its start time is unique within one boot, and the boot id makes it unique
// across reboots. Nothing in this package signals a process unless all three
// match.
type Identity struct {
	// PID is the process id (thread-group id).
	PID int
	// StartTime is field 22 of /proc/PID/stat: clock ticks since boot at
	// which the process was created. It does not change across exec.
	StartTime uint64
	// BootID is the kernel boot id at the time the identity was taken.
	BootID string
}

// String formats the identity for logs and errors.
func (id Identity) String() string {
	return fmt.Sprintf("pid %d start %d boot %s", id.PID, id.StartTime, id.BootID)
}

// Lookup reads the identity of the process pid now. It succeeds for a zombie
// too (its start time is still readable); use Alive to tell the difference.
func Lookup(pid int, boot BootIDSource) (Identity, error) {
	bootID, err := boot.orDefault()()
	if err != nil {
		return Identity{}, fmt.Errorf("lookup pid %d: %w", pid, err)
	}
	st, err := readStat(pid)
	if err != nil {
		return Identity{}, fmt.Errorf("lookup pid %d: %w", pid, err)
	}
	return Identity{PID: pid, StartTime: st.StartTime, BootID: bootID}, nil
}

// Alive reports whether the process named by id is running: a process with
// that pid exists, is not a zombie, has the same start time, and the host is
// still in the boot id recorded. The error is non-nil only when the answer
// could not be found out (the boot id or /proc could not be read).
func (id Identity) Alive(boot BootIDSource) (bool, error) {
	err := id.verify(boot)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotOurs), errors.Is(err, ErrGone):
		return false, nil
	default:
		return false, err
	}
}

// verify returns nil when id names a live process now, ErrGone when it names
// nothing alive (no such pid, or a zombie), ErrNotOurs when the pid belongs
// to another process or the host rebooted, or an I/O error.
func (id Identity) verify(boot BootIDSource) error {
	if id.PID <= 1 {
		return fmt.Errorf("verify %v: pid out of range: %w", id, ErrNotOurs)
	}
	bootID, err := boot.orDefault()()
	if err != nil {
		return fmt.Errorf("verify %v: %w", id, err)
	}
	if bootID != id.BootID {
		return fmt.Errorf("verify %v: boot id is now %s: %w", id, bootID, ErrNotOurs)
	}
	st, err := readStat(id.PID)
	if errors.Is(err, errNoProcess) {
		return fmt.Errorf("verify %v: %w", id, ErrGone)
	}
	if err != nil {
		return fmt.Errorf("verify %v: %w", id, err)
	}
	if st.StartTime != id.StartTime {
		return fmt.Errorf("verify %v: pid now has start time %d: %w", id, st.StartTime, ErrNotOurs)
	}
	if st.dead() {
		return fmt.Errorf("verify %v: state %c: %w", id, st.State, ErrGone)
	}
	return nil
}

// errNoProcess is returned by readStat when the pid does not exist.
var errNoProcess = errors.New("no such process")

// procStat holds the fields of /proc/PID/stat this package uses.
type procStat struct {
	PID       int
	Comm      string
	State     byte // field 3: R, S, D, Z, X, ...
	PPID      int  // field 4
	PGRP      int  // field 5
	Session   int  // field 6
	StartTime uint64
}

// dead reports whether the process has exited (zombie or dead): it holds no
// resources except its pid, and signals have no effect on it.
func (s procStat) dead() bool { return s.State == 'Z' || s.State == 'X' }

// readStat reads /proc/PID/stat. It returns errNoProcess when the process is
// gone, including when it vanishes between open and read.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return procStat{}, fmt.Errorf("read stat of pid %d: %w", pid, errNoProcess)
		}
		return procStat{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	st, err := parseStat(b)
	if err != nil {
		return procStat{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	return st, nil
}

// parseStat parses the contents of /proc/PID/stat. The command name (field 2)
// is in parentheses and may itself contain spaces and parentheses, so the
// remaining fields are split after the last ')'.
func parseStat(b []byte) (procStat, error) {
	b = bytes.TrimSpace(b)
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("parse stat %q: no command name in parentheses", truncate(b))
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat pid: %w", err)
	}
	// rest[0] is field 3 (state); field N is rest[N-3].
	rest := strings.Fields(string(b[end+1:]))
	if len(rest) < 20 || len(rest[0]) != 1 {
		return procStat{}, fmt.Errorf("parse stat %q: %d fields after the command name, want at least 20", truncate(b), len(rest))
	}
	st := procStat{PID: pid, Comm: string(b[open+1 : end]), State: rest[0][0]}
	ints := []struct {
		dst   *int
		field int
	}{{&st.PPID, 4}, {&st.PGRP, 5}, {&st.Session, 6}}
	for _, f := range ints {
		v, err := strconv.Atoi(rest[f.field-3])
		if err != nil {
			return procStat{}, fmt.Errorf("parse stat field %d: %w", f.field, err)
		}
		*f.dst = v
	}
	st.StartTime, err = strconv.ParseUint(rest[22-3], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat field 22: %w", err)
	}
	return st, nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// scanProcs calls keep for every process in /proc whose stat could be read
// and returns those for which keep is true. Processes that exit during the
// scan are skipped.
func scanProcs(keep func(procStat) bool) ([]procStat, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", procRoot, err)
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	out, err := statsOf(pids, keep)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", procRoot, err)
	}
	return out, nil
}

// statsOf reads the stat of each of pids and returns those keep accepts;
// a process that exited meanwhile is skipped.
func statsOf(pids []int, keep func(procStat) bool) ([]procStat, error) {
	var out []procStat
	for _, pid := range pids {
		st, err := readStat(pid)
		if errors.Is(err, errNoProcess) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if keep(st) {
			out = append(out, st)
		}
	}
	return out, nil
}

func pidsOf(sts []procStat) []int {
	pids := make([]int, 0, len(sts))
	for _, st := range sts {
		pids = append(pids, st.PID)
	}
	slices.Sort(pids)
	return pids
}

// GroupPIDs lists the live processes whose process group is pgid, in
// ascending order. Zombies are left out: they have exited and hold nothing
// but their pid until their parent reaps them.
func GroupPIDs(pgid int) ([]int, error) {
	sts, err := scanProcs(func(st procStat) bool { return st.PGRP == pgid && !st.dead() })
	if err != nil {
		return nil, fmt.Errorf("list group %d: %w", pgid, err)
	}
	return pidsOf(sts), nil
}

// SessionPIDs lists the live processes whose session is sid, in ascending
// order, leaving zombies out as GroupPIDs does.
func SessionPIDs(sid int) ([]int, error) {
	sts, err := scanProcs(func(st procStat) bool { return st.Session == sid && !st.dead() })
	if err != nil {
		return nil, fmt.Errorf("list session %d: %w", sid, err)
	}
	return pidsOf(sts), nil
}

// groupMembers lists the live processes of the group led by leader that may
// belong to it: same process group, started no earlier than the leader, and
// (checked by the caller) in the same boot.
func groupMembers(leader Identity) ([]procStat, error) {
	return scanProcs(func(st procStat) bool {
		return st.PGRP == leader.PID && st.StartTime >= leader.StartTime && !st.dead()
	})
}

// WaitGone waits until every process of ids is gone (a zombie counts as
// gone), polling /proc every 20 ms, for at most bound or until ctx ends.
func WaitGone(ctx context.Context, boot BootIDSource, ids []Identity, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
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
