package launch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Scope says which processes Marked looks at.
type Scope int

const (
	// AllProcesses is every process of the host this process can read,
	// except this process itself.
	AllProcesses Scope = iota
	// Children is the children of this process only. For a child subreaper
	// (BecomeSubreaper) they include descendants reparented to it, which
	// proves they are ours.
	Children
)

// Marked lists the live processes in scope whose environment holds marker,
// a "KEY=value" entry: one scan of /proc (for Children, of this process's
// children only: childStats), one read of each candidate's
// /proc/PID/environ. The marker matches a whole entry only, never a prefix
// of a longer value ("K=/a" does not match "K=/ab"). This process and
// zombies are left out, and so are processes whose environment cannot be
// read (another user's, or gone). Each Identity is read with the boot id
// from boot (nil: ReadBootID), and the process's stat is read again after
// its environment, so a pid reused during the scan is not reported.
//
// The environment is the one the process was started with: a process that
// changed its own environment later is still found by its first one.
func Marked(boot BootIDSource, marker string, scope Scope) ([]Identity, error) {
	key, _, ok := strings.Cut(marker, "=")
	if !ok || key == "" || strings.IndexByte(marker, 0) >= 0 {
		return nil, fmt.Errorf("find processes marked %q: marker is not KEY=value", marker)
	}
	bootID, err := boot.orDefault()()
	if err != nil {
		return nil, fmt.Errorf("find processes marked %q: %w", marker, err)
	}
	self := os.Getpid()
	keep := func(s procStat) bool {
		return s.PID != self && !s.dead() && (scope != Children || s.PPID == self)
	}
	var sts []procStat
	if scope == Children {
		sts, err = childStats(keep)
	} else {
		sts, err = scanProcs(keep)
	}
	if err != nil {
		return nil, fmt.Errorf("find processes marked %q: %w", marker, err)
	}
	var out []Identity
	for _, s := range sts {
		ok, err := stillMarked(s, marker)
		if err != nil {
			return nil, fmt.Errorf("find processes marked %q: %w", marker, err)
		}
		if ok {
			out = append(out, Identity{PID: s.PID, StartTime: s.StartTime, BootID: bootID})
		}
	}
	return out, nil
}

// childStats is scanProcs(keep) for the children of this process, read
// from the kernel's lists of each thread's children
// (/proc/self/task/TID/children) rather than from every process's stat.
// A list read while a child is reaped or moves between threads may leave
// one out, so the lists are read twice: two reads that name the same
// children are taken, and where they differ, or a list cannot be read
// (a kernel without CONFIG_PROC_CHILDREN), every process is scanned.
func childStats(keep func(procStat) bool) ([]procStat, error) {
	first, err1 := readChildPIDs()
	second, err2 := readChildPIDs()
	if err1 != nil || err2 != nil || !slices.Equal(first, second) {
		return scanProcs(keep)
	}
	return statsOf(first, keep)
}

// readChildPIDs is childPIDs; a test replaces it.
var readChildPIDs = childPIDs

// childPIDs lists the children of every thread of this process, sorted.
func childPIDs() ([]int, error) {
	tasks, err := os.ReadDir(procRoot + "/self/task")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, t := range tasks {
		b, err := os.ReadFile(procRoot + "/self/task/" + t.Name() + "/children")
		if errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(procRoot + "/self/task/" + t.Name()); errors.Is(serr, os.ErrNotExist) {
				continue // the thread ended
			}
		}
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("children of task %s: %q: %w", t.Name(), f, err)
			}
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// stillMarked reports whether the process s was read as carries marker in
// its environment and is still that live process (its pid not reused
// between the stat and the environ); one that is gone, unreadable or not
// marked is false with no error.
func stillMarked(s procStat, marker string) (bool, error) {
	env, err := os.ReadFile(procRoot + "/" + strconv.Itoa(s.PID) + "/environ")
	if err != nil || !hasEntry(env, marker) {
		return false, nil // gone, not readable, or not marked
	}
	now, err := readStat(s.PID)
	if errors.Is(err, errNoProcess) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return now.StartTime == s.StartTime && !now.dead(), nil
}

// hasEntry reports whether env, the NUL-separated entries of
// /proc/PID/environ, holds entry exactly.
func hasEntry(env []byte, entry string) bool {
	for len(env) > 0 {
		var e []byte
		e, env, _ = bytes.Cut(env, []byte{0})
		if string(e) == entry {
			return true
		}
	}
	return false
}

// Adopted lists the live processes that were reparented to this process
// (it is a child subreaper) and whose environment carries marker, a
// "KEY=value" string: descendants of what this process started that left
// their process group and session, and so are out of reach of a group
// signal when no cgroup contains them. Being our child proves they are
// ours (only descendants are reparented to a subreaper); the marker says
// which attempt they belong to. Zombies are left out: the reaper collects
// them. It is Marked(boot, marker, Children).
func Adopted(boot BootIDSource, marker string) ([]Identity, error) {
	return Marked(boot, marker, Children)
}

// IsAdopted reports whether the live process pid is one Adopted would
// list: a child of this process (a descendant reparented to it as
// subreaper) whose environment carries marker. It reads that one process,
// for a caller that meets a pid and must tell whether it is one of its
// escapees; false when it is gone, not our child or not marked.
func IsAdopted(pid int, marker string) bool {
	st, err := readStat(pid)
	if err != nil || st.dead() || st.PPID != os.Getpid() {
		return false
	}
	ok, err := stillMarked(st, marker)
	return err == nil && ok
}

// Carries reports whether the live process id holds marker ("KEY=value")
// in the environment it was started with; false when it is gone or its
// environment cannot be read (another user's).
func Carries(id Identity, marker string) bool {
	env, err := os.ReadFile(procRoot + "/" + strconv.Itoa(id.PID) + "/environ")
	return err == nil && hasEntry(env, marker)
}

// EnvValue returns the value of key in the environment of the live process
// id (its /proc/PID/environ), and whether it holds a key= entry at all. A
// process may overwrite that memory (setproctitle reuses argv and environ
// for its title, leaving /proc/PID/environ empty or holding the title):
// found is false then, and when the environment cannot be read, so an
// absent entry proves nothing about whose the process is; an entry with
// another value does.
func EnvValue(id Identity, key string) (value string, found bool) {
	env, err := os.ReadFile(procRoot + "/" + strconv.Itoa(id.PID) + "/environ")
	if err != nil {
		return "", false
	}
	prefix := key + "="
	for len(env) > 0 {
		var e []byte
		e, env, _ = bytes.Cut(env, []byte{0})
		if v, ok := bytes.CutPrefix(e, []byte(prefix)); ok {
			return string(v), true
		}
	}
	return "", false
}

// Group returns the process group and session of the live process id. A
// process group a process was started in is not rewritable from its
// memory: only setpgid or setsid change it.
func (id Identity) Group() (pgid, sid int, err error) {
	st, err := readStat(id.PID)
	if err != nil {
		return 0, 0, err
	}
	if st.StartTime != id.StartTime {
		return 0, 0, fmt.Errorf("group of %v: pid now has start time %d: %w", id, st.StartTime, ErrNotOurs)
	}
	return st.PGRP, st.Session, nil
}
