package gates

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// MaxOtherProcs bounds how many other users' processes a HostRecord lists.
const MaxOtherProcs = 1000

// pfKthread is the kernel's PF_KTHREAD flag in /proc/PID/stat.
const pfKthread = 0x00200000

// ProcInfo is one process of another user.
type ProcInfo struct {
	PID  int    `json:"pid"`
	UID  int    `json:"uid"` // real uid
	Comm string `json:"comm"`
}

// HostRecord is the host's load and other users' processes at one moment,
// recorded before and after a run's measured interval (A-P3-1: "host load
// average"; the seed's "other-user process samples"). It is a record, not
// a gate: the caller stores it with the attempt and judges nothing from it.
type HostRecord struct {
	LoadAvg1  float64 `json:"loadavg1"`
	LoadAvg5  float64 `json:"loadavg5"`
	LoadAvg15 float64 `json:"loadavg15"`
	// OtherUsersProcs are the first MaxOtherProcs processes, by pid, whose
	// real uid is not the caller's. Kernel threads are left out.
	OtherUsersProcs []ProcInfo `json:"other_users_procs"`
	// OtherUsersCount counts every such process seen, also those beyond
	// the bound.
	OtherUsersCount int `json:"other_users_count"`
}

// ReadHostRecord reads /proc/loadavg and lists other users' processes from
// /proc. Processes that exit during the scan are skipped. In a container
// with its own pid namespace only that namespace's processes are visible.
func ReadHostRecord(ownUID int) (HostRecord, error) {
	return readHostRecord("/proc", ownUID, MaxOtherProcs)
}

func readHostRecord(procRoot string, ownUID, max int) (HostRecord, error) {
	var r HostRecord
	b, err := os.ReadFile(filepath.Join(procRoot, "loadavg"))
	if err != nil {
		return r, fmt.Errorf("read host load: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return r, fmt.Errorf("read host load: %s: %q has fewer than three fields", filepath.Join(procRoot, "loadavg"), strings.TrimSpace(string(b)))
	}
	for i, p := range []*float64{&r.LoadAvg1, &r.LoadAvg5, &r.LoadAvg15} {
		if *p, err = strconv.ParseFloat(f[i], 64); err != nil {
			return r, fmt.Errorf("read host load: %w", err)
		}
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return r, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 && e.IsDir() {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	for _, pid := range pids {
		dir := filepath.Join(procRoot, strconv.Itoa(pid))
		// On procfs one stat says whose a process is (/proc/PID belongs to
		// the process's uid); only other users' processes are read further.
		if fi, err := os.Stat(dir); err == nil && procRoot == "/proc" {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == ownUID {
				continue
			}
		}
		p, kthread, err := readProc(dir, pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) || errors.Is(err, errProcGone) {
			continue // exited during the scan
		}
		if err != nil {
			return r, fmt.Errorf("list processes: %w", err)
		}
		if kthread || p.UID == ownUID {
			continue
		}
		r.OtherUsersCount++
		if len(r.OtherUsersProcs) < max {
			r.OtherUsersProcs = append(r.OtherUsersProcs, p)
		}
	}
	return r, nil
}

// errProcGone: a /proc entry read empty, as it does for a process that
// exited between listing and reading.
var errProcGone = errors.New("process gone")

// readProc reads the real uid, command name and kernel-thread flag of one
// process.
func readProc(dir string, pid int) (ProcInfo, bool, error) {
	p := ProcInfo{PID: pid}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return p, false, err
	}
	uid := -1
	for line := range bytes.Lines(status) {
		if rest, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			fields := bytes.Fields(rest)
			if len(fields) > 0 {
				if uid, err = strconv.Atoi(string(fields[0])); err != nil {
					return p, false, fmt.Errorf("parse %s/status: %w", dir, err)
				}
			}
			break
		}
	}
	if uid < 0 {
		if len(status) == 0 {
			return p, false, errProcGone
		}
		return p, false, fmt.Errorf("parse %s/status: no Uid line", dir)
	}
	p.UID = uid
	if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		p.Comm = strings.TrimSpace(string(comm))
	} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
		return p, false, err
	}
	kthread := false
	if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
		// Fields after the command's closing parenthesis: state, ppid,
		// pgrp, session, tty_nr, tpgid, flags.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
			fields := bytes.Fields(stat[i+1:])
			if len(fields) > 6 {
				if flags, err := strconv.ParseUint(string(fields[6]), 10, 64); err == nil {
					kthread = flags&pfKthread != 0
				}
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
		return p, false, err
	}
	return p, kthread, nil
}
