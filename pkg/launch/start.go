package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Spec describes a process to start. The zero value of every field is
// usable except Argv, which must name a program.
type Spec struct {
	// Role is the caller's name for the process ("server", "client"),
	// copied into Proc and every SignalRecord. Empty is allowed.
	Role string
	// Argv is the program and its arguments; Argv[0] is run as is when it
	// contains a slash and is looked up in the controller's PATH otherwise.
	// No shell is involved.
	Argv []string
	// Env is the environment, "KEY=value" each; when a key repeats, the
	// last value wins (as in os/exec). nil: the controller's own
	// environment; an empty non-nil slice: none at all.
	Env []string
	// Dir is the working directory. Empty: the controller's.
	Dir string
	// StdoutPath and StderrPath are files the output is appended to,
	// created with mode 0644 when missing. Empty: /dev/null. They may name
	// the same file.
	StdoutPath, StderrPath string
	// Stdin, Stdout and Stderr, when set, are the child's standard input,
	// output and error instead of /dev/null, StdoutPath and StderrPath (a
	// pipe the caller reads and writes: a process that reports to the
	// controller line by line). The caller keeps its own copies and closes
	// them.
	Stdin, Stdout, Stderr *os.File
	// Pdeathsig, when set, is sent to the child by the kernel when the
	// controller dies (prctl PR_SET_PDEATHSIG): a child that must not
	// outlive it, such as srun, whose death ends its Slurm step.
	Pdeathsig syscall.Signal
	// CPUs is the CPU affinity, in effect from the child's first
	// instruction. Empty: inherited from the controller.
	CPUs []int
	// Cgroup names a leaf cgroup to create under the Manager's campaign
	// root and start the process in. Empty, or no available Manager: no
	// cgroup (process group or session only).
	Cgroup string
	// Setsid starts the process as the leader of a new session (and so of a
	// new process group). false: the leader of a new process group in the
	// controller's session.
	Setsid bool
	// Stop is how Shutdown ends this process: the leader's grace, then the
	// group's (StopOptions.Grace and GroupGrace; see Stop for the steps).
	// Set it here, once per kind of process, rather than at each call. The
	// zero value: after the leader's SIGTERM the group is signalled at
	// once, and SIGKILL follows at once.
	Stop StopOptions
}

// Launcher starts processes. Its zero value is not usable: Reaper is
// required.
type Launcher struct {
	// Reaper receives the exit of every process started; it must have been
	// started (Reaper.Start) and must be the only one in the process.
	Reaper *Reaper
	// Cgroups creates the leaf cgroups. nil, or not Available: processes
	// are contained by process groups and sessions only.
	Cgroups *Manager
	// Boot is the boot id source identities are taken and checked with.
	// nil: ReadBootID.
	Boot BootIDSource

	// noCloneIntoCgroup forces the cgroup.procs fallback (tests).
	noCloneIntoCgroup bool
	// afterFork, when set, runs between the fork and the registration of
	// the new pid (tests: it waits for the child to exit there).
	afterFork func(pid int)
}

// Start starts spec's process and returns it running, registered with the
// Reaper, with its Identity read from /proc right after the fork.
//
// When CPUs is set, the fork is made from an OS thread locked to that mask
// (see doc.go: the child inherits the forking thread's mask, so every
// thread and child it ever makes starts pinned). When a leaf cgroup is
// used, the child is created in it by clone3(CLONE_INTO_CGROUP); on kernels
// without it (before 5.7: ENOSYS, or EINVAL) the pid is written to
// cgroup.procs right after the fork, and anything the child forks before
// that write stays outside the leaf.
func (l *Launcher) Start(spec Spec) (*Proc, error) {
	p, err := l.start(spec)
	if err != nil {
		return nil, fmt.Errorf("start %s %q: %w", spec.Role, spec.Argv, err)
	}
	return p, nil
}

func (l *Launcher) start(spec Spec) (*Proc, error) {
	if l.Reaper == nil {
		return nil, errors.New("launcher has no reaper")
	}
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errors.New("empty argv")
	}
	path, set, err := program(spec)
	if err != nil {
		return nil, err
	}
	env := spec.Env
	if env == nil {
		env = os.Environ()
	}
	env = dedupEnv(env)
	boot := l.Boot.orDefault()
	bootID, err := boot() // before the fork: a failure here leaves nothing running
	if err != nil {
		return nil, err
	}

	files, closeFiles, err := stdio(spec)
	if err != nil {
		return nil, err
	}
	defer closeFiles()

	leaf, cgroupFD, err := l.leafCgroup(spec)
	if err != nil {
		return nil, err
	}
	if cgroupFD >= 0 {
		defer unix.Close(cgroupFD)
	}

	sys := &syscall.SysProcAttr{Setsid: spec.Setsid, Setpgid: !spec.Setsid, Pdeathsig: spec.Pdeathsig}
	if cgroupFD >= 0 {
		sys.UseCgroupFD = true
		sys.CgroupFD = cgroupFD
	}
	attr := &syscall.ProcAttr{Dir: spec.Dir, Env: env, Files: files, Sys: sys}

	r := l.Reaper
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running {
		return nil, errors.New("reaper is not running")
	}
	started := time.Now()
	pid, err := forkExec(path, spec.Argv, attr, spec.CPUs, &set)
	if err != nil && sys.UseCgroupFD && (errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)) {
		sys.UseCgroupFD, sys.CgroupFD = false, 0
		cgroupFD = -1
		pid, err = forkExec(path, spec.Argv, attr, spec.CPUs, &set)
	}
	if err != nil {
		return nil, err
	}
	if l.afterFork != nil {
		l.afterFork(pid)
	}
	// The child cannot be reaped before it is registered (r.mu is held), so
	// its /proc entry exists even if it has already exited.
	p := &Proc{
		Role:    spec.Role,
		PGID:    pid,
		Setsid:  spec.Setsid,
		CPUs:    slices.Clone(spec.CPUs),
		Started: started,
		Stop:    spec.Stop,
		boot:    boot,
		done:    make(chan struct{}),
	}
	r.procs[pid] = p
	st, err := placeChild(pid, leaf, cgroupFD >= 0)
	if err != nil {
		return nil, err
	}
	p.Identity = Identity{PID: pid, StartTime: st.StartTime, BootID: bootID}
	if !leaf.IsZero() {
		p.leaf = leaf
		p.Cgroup = leaf.Path
	}
	return p, nil
}

// placeChild reads the new child's stat (its start time) and, when it
// has a leaf cgroup it was not cloned into (cloned false), moves it
// there. On an error it kills the child's group: the child is ours and
// unreaped, so its pid is safe to kill, and the reaper will collect it.
func placeChild(pid int, leaf Leaf, cloned bool) (procStat, error) {
	st, err := readStat(pid)
	if err == nil && !leaf.IsZero() && !cloned {
		// Fallback placement: the child may already have forked. A child
		// that has already exited cannot be moved (ESRCH) and needs no
		// containing.
		err = writeCgroupFile(leaf.Path+"/cgroup.procs", strconv.Itoa(pid))
		if errors.Is(err, unix.ESRCH) {
			err = nil
		}
	}
	if err != nil {
		_ = unix.Kill(-pid, unix.SIGKILL)
		_ = unix.Kill(pid, unix.SIGKILL)
		return st, fmt.Errorf("after fork of pid %d: %w", pid, err)
	}
	return st, nil
}

// program returns the path of the executable spec runs (looked up on
// PATH when Argv[0] has no slash) and its CPU mask.
func program(spec Spec) (string, unix.CPUSet, error) {
	var set unix.CPUSet
	path := spec.Argv[0]
	if !strings.Contains(path, "/") {
		lp, err := exec.LookPath(path)
		if err != nil {
			return "", set, err
		}
		path = lp
	}
	for _, c := range spec.CPUs {
		if c < 0 || c >= len(set)*64 {
			return "", set, fmt.Errorf("cpu %d out of range", c)
		}
		set.Set(c)
	}
	return path, set, nil
}

// stdio returns the child's standard files: the files spec names
// (opened here; closeFiles closes them) unless spec gives open ones.
func stdio(spec Spec) (files []uintptr, closeFiles func(), err error) {
	files, closeFiles, err = openStdio(spec.StdoutPath, spec.StderrPath)
	if err != nil {
		return nil, nil, err
	}
	if spec.Stdin != nil {
		files[0] = spec.Stdin.Fd()
	}
	if spec.Stdout != nil {
		files[1] = spec.Stdout.Fd()
	}
	if spec.Stderr != nil {
		files[2] = spec.Stderr.Fd()
	}
	return files, closeFiles, nil
}

// leafCgroup makes the leaf cgroup spec asks for, when cgroups are
// available, and opens it for the clone (fd -1 when the child is placed
// after the fork instead); the caller closes the fd.
func (l *Launcher) leafCgroup(spec Spec) (Leaf, int, error) {
	if spec.Cgroup == "" || !l.Cgroups.Available() {
		return Leaf{}, -1, nil
	}
	leaf, err := l.Cgroups.NewLeaf(spec.Cgroup)
	if err != nil {
		return Leaf{}, -1, err
	}
	if l.noCloneIntoCgroup {
		return leaf, -1, nil
	}
	fd, err := unix.Open(leaf.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Leaf{}, -1, fmt.Errorf("open leaf cgroup %s: %w", leaf.Path, err)
	}
	return leaf, fd, nil
}

// forkExec forks and execs. With CPUs set it does so from a new goroutine
// locked to its own OS thread whose affinity is set to the mask: the child
// inherits the mask of the thread that forked it, so the mask is in effect
// from its first instruction.
//
// Afterwards the thread's mask is restored and the thread unlocked, rather
// than discarded by returning while locked: the runtime cannot end the main
// thread, so a locked goroutine that happened to run there would wedge it
// for the life of the process, still carrying the child's mask. Only when
// the restore fails does the goroutine return locked, so that the runtime
// ends the thread (or parks it forever) instead of running other goroutines
// on the wrong CPUs. Threads the runtime creates meanwhile are not affected:
// it never clones a new thread from a locked one (it uses its template
// thread instead).
func forkExec(path string, argv []string, attr *syscall.ProcAttr, cpus []int, set *unix.CPUSet) (int, error) {
	if len(cpus) == 0 {
		return syscall.ForkExec(path, argv, attr)
	}
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var orig unix.CPUSet
		if err := unix.SchedGetaffinity(0, &orig); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("read affinity of forking thread: %w", err)}
			return
		}
		if err := unix.SchedSetaffinity(0, set); err != nil {
			runtime.UnlockOSThread() // a failed sched_setaffinity changes nothing
			ch <- result{err: fmt.Errorf("set affinity of forking thread to %v: %w", cpus, err)}
			return
		}
		pid, err := syscall.ForkExec(path, argv, attr)
		if rerr := unix.SchedSetaffinity(0, &orig); rerr == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{pid, err}
	}()
	res := <-ch
	return res.pid, res.err
}

// dedupEnv keeps only the last "KEY=value" of each key. (The C library and
// Go's own getenv take the first, so an override appended at the end would
// otherwise be ignored.)
func dedupEnv(env []string) []string {
	last := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		last[k] = i
	}
	out := make([]string, 0, len(last))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if last[k] == i {
			out = append(out, kv)
		}
	}
	return out
}

// openStdio opens /dev/null as standard input and the output files, and
// returns their descriptors for ProcAttr.Files with a function that closes
// them.
func openStdio(stdout, stderr string) ([]uintptr, func(), error) {
	var opened []*os.File
	closeAll := func() {
		for _, f := range opened {
			f.Close()
		}
	}
	open := func(path string, flag int) (*os.File, error) {
		if path == "" {
			path, flag = os.DevNull, flag&^(os.O_CREATE|os.O_APPEND)
		}
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			return nil, err
		}
		opened = append(opened, f)
		return f, nil
	}
	const out = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	in, err := open("", os.O_RDONLY)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	o, err := open(stdout, out)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	e, err := open(stderr, out)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return []uintptr{in.Fd(), o.Fd(), e.Fd()}, closeAll, nil
}
