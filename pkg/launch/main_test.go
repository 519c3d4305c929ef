package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary re-runs itself as the child processes the tests start.
const (
	envMode  = "WARDEN_LAUNCH_CHILD" // child mode; unset in the test process
	envReady = "WARDEN_LAUNCH_READY" // file the child writes "PID [PORT]" to once set up
	envN     = "WARDEN_LAUNCH_N"     // number of grandchildren for forkn
	envDepth = "WARDEN_LAUNCH_DEPTH" // generation below the test process
	maxDepth = 3                     // a child mode never spawns deeper than this
)

// testReaper is the one reaper of the test process, started in TestMain.
var testReaper *Reaper

// waitLong bounds every wait for a process or file in the tests: generous,
// so that a loaded machine never fails a test, yet finite.
const waitLong = 30 * time.Second

func TestMain(m *testing.M) {
	if mode := os.Getenv(envMode); mode != "" {
		os.Exit(childMain(mode))
	}
	if err := BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testReaper = NewReaper()
	if err := testReaper.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	if err := testReaper.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 2
	}
	os.Exit(code)
}

// childMain is the child process. Modes:
//
//	sleep            wait for signals forever (SIGTERM ends it: Go's default)
//	threads          start 4 locked OS threads and a "sleep" grandchild, then sleep
//	ignoreterm       ignore SIGTERM, start an "ignoreterm-leaf" grandchild, sleep
//	ignoreterm-leaf  ignore SIGTERM and sleep
//	escape           start a grandchild in a new session ("double") and sleep
//	double           start an "ignoreterm-leaf" great-grandchild and exit at once
//	exit3            exit with code 3 at once
//	forkn            start $WARDEN_LAUNCH_N "sleep" grandchildren and sleep
//	serve            serve 200 on /health on 127.0.0.1 and write the port
//	serve-daemon     start a "serve" great-grandchild through a new session ("serve-double") and sleep
//
// Grandchildren write their ready files at READY.g, READY.g0, READY.g1, ...
func childMain(mode string) int {
	ready := os.Getenv(envReady)
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", mode, err)
		return 1
	}
	depth, _ := strconv.Atoi(os.Getenv(envDepth))
	if depth > maxDepth {
		return fail(fmt.Errorf("depth %d: refusing to run deeper than %d", depth, maxDepth))
	}
	extra := ""
	switch mode {
	case "exit3":
		return 3
	case "sleep":
	case "threads":
		for range 4 {
			go func() {
				runtime.LockOSThread()
				sleepForever()
			}()
		}
		if err := spawn("sleep", ready+".g", false); err != nil {
			return fail(err)
		}
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
		if err := spawn("ignoreterm-leaf", ready+".g", false); err != nil {
			return fail(err)
		}
	case "ignoreterm-leaf":
		signal.Ignore(syscall.SIGTERM)
	case "escape":
		// The grandchild leads a new session, forks and exits: its child is
		// in neither our group nor our session, and is orphaned.
		if err := spawn("double", ready+".g", true); err != nil {
			return fail(err)
		}
	case "double":
		if err := spawn("ignoreterm-leaf", ready, false); err != nil {
			return fail(err)
		}
		return 0
	case "serve-daemon":
		// a server that double-forks: the listener ends up orphaned, in
		// neither our group nor our session
		if err := spawn("serve-double", ready+".g", true); err != nil {
			return fail(err)
		}
	case "serve-double":
		if err := spawn("serve", ready, false); err != nil {
			return fail(err)
		}
		return 0
	case "forkn":
		n, err := strconv.Atoi(os.Getenv(envN))
		if err != nil {
			return fail(err)
		}
		for i := range n {
			if err := spawn("sleep", ready+".g"+strconv.Itoa(i), false); err != nil {
				return fail(err)
			}
		}
	case "serve":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fail(err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		go func() { _ = http.Serve(ln, mux) }()
		extra = " " + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	default:
		return fail(errors.New("unknown mode"))
	}
	if ready != "" && mode != "double" && mode != "serve-double" {
		if err := writeReady(ready, strconv.Itoa(os.Getpid())+extra); err != nil {
			return fail(err)
		}
	}
	sleepForever()
	return 0
}

func sleepForever() {
	for {
		_ = unix.Pause()
	}
}

// spawn starts this binary in mode as a child of the calling process,
// without waiting for it (a child mode's children are reaped by the test
// process as subreaper once their parent dies).
func spawn(mode, ready string, setsid bool) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	depth, _ := strconv.Atoi(os.Getenv(envDepth))
	env := append(cleanEnv(), envMode+"="+mode, envReady+"="+ready, envDepth+"="+strconv.Itoa(depth+1))
	_, err = syscall.ForkExec(exe, []string{exe}, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setsid: setsid},
	})
	return err
}

// cleanEnv is the environment without this file's variables, so that a
// child's settings never leak into the children it starts.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WARDEN_LAUNCH_") {
			env = append(env, kv)
		}
	}
	return env
}

func writeReady(path, content string) error {
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// childSpec returns a Spec that runs this binary in mode, with its ready
// file and output in dir.
func childSpec(t *testing.T, mode, dir string, env ...string) Spec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env = append(append(cleanEnv(), envMode+"="+mode, envReady+"="+filepath.Join(dir, "ready"), envDepth+"=1"), env...)
	return Spec{
		Role:       mode,
		Argv:       []string{exe},
		Env:        env,
		StdoutPath: filepath.Join(dir, "out.log"),
		StderrPath: filepath.Join(dir, "out.log"),
	}
}

var managerSeq atomic.Int64

// newLauncher returns a Launcher on the test reaper. With cgroups true it
// gets a campaign Manager (skipping the test where cgroup v2 is not
// writable); its root is removed when the test ends.
func newLauncher(t *testing.T, cgroups bool) *Launcher {
	t.Helper()
	l := &Launcher{Reaper: testReaper}
	if !cgroups {
		return l
	}
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), managerSeq.Add(1))
	m, err := NewManager(name)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Available() {
		t.Skipf("cgroup v2 unavailable: %s", m.Mode())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		if err := m.Cleanup(ctx); err != nil {
			t.Errorf("cleanup manager: %v", err)
		}
		if dirExists(m.Root()) {
			t.Errorf("campaign root %s still exists after Cleanup", m.Root())
		}
	})
	l.Cgroups = m
	return l
}

// start starts spec and makes sure, even if the test fails, that its group
// and cgroup are killed, the process is reaped and the leaf removed.
func start(t *testing.T, l *Launcher, spec Spec) *Proc {
	t.Helper()
	p, err := l.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killAndReap(t, p) })
	return p
}

// startChild starts a child in mode, with a new directory, on a launcher
// with cgroups or without; with cgroups in the leaf cgroup. It returns
// the child and its directory.
func startChild(t *testing.T, cgroups bool, mode, cgroup string) (*Proc, string) {
	t.Helper()
	l := newLauncher(t, cgroups)
	dir := t.TempDir()
	spec := childSpec(t, mode, dir)
	if cgroups {
		spec.Cgroup = cgroup
	}
	return start(t, l, spec), dir
}

// waitGrandchild waits until the child started in dir and its grandchild
// are ready and returns the grandchild's pid and identity.
func waitGrandchild(t *testing.T, dir string) (int, Identity) {
	t.Helper()
	waitReady(t, filepath.Join(dir, "ready"))
	gpid, _ := waitReady(t, filepath.Join(dir, "ready.g"))
	gid, err := Lookup(gpid, nil)
	if err != nil {
		t.Fatal(err)
	}
	return gpid, gid
}

// stopChild stops p with opts within waitLong and fails the test on an
// error; it returns the signals sent.
func stopChild(t *testing.T, p *Proc, opts StopOptions) []SignalRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	recs, err := Stop(ctx, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func killAndReap(t *testing.T, p *Proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if _, err := SignalGroup(p.boot, p.Identity, p.Role, syscall.SIGKILL); err != nil && !errors.Is(err, ErrGone) {
		t.Errorf("cleanup: %v", err)
	}
	if err := p.leaf.Kill(); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Errorf("cleanup: %s not reaped within %v", p, waitLong)
	}
	if err := p.leaf.Remove(ctx); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// killOnCleanup ends a process the test did not start directly (an
// escaped grandchild) when the test ends, if it is still the same process.
func killOnCleanup(t *testing.T, id Identity) {
	t.Cleanup(func() {
		if _, err := Signal(nil, id, "leftover", syscall.SIGKILL); err != nil && !errors.Is(err, ErrGone) {
			t.Errorf("cleanup: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		if err := pollUntil(ctx, func() (bool, error) { _, err := readStat(id.PID); return errors.Is(err, errNoProcess), nil }); err != nil {
			t.Errorf("cleanup: pid %d still present: %v", id.PID, err)
		}
	})
}

// waitReady waits for a ready file and returns the pid (and port, if any)
// written in it.
func waitReady(t *testing.T, path string) (pid, port int) {
	t.Helper()
	var content string
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	err := pollUntil(ctx, func() (bool, error) {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		content = string(b)
		return true, err
	})
	if err != nil {
		t.Fatalf("wait for ready file %s: %v", path, err)
	}
	f := strings.Fields(content)
	if len(f) == 0 {
		t.Fatalf("ready file %s is empty", path)
	}
	if pid, err = strconv.Atoi(f[0]); err != nil {
		t.Fatal(err)
	}
	if len(f) > 1 {
		if port, err = strconv.Atoi(f[1]); err != nil {
			t.Fatal(err)
		}
	}
	return pid, port
}

// waitFor polls cond until it is true, failing the test after waitLong.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := pollUntil(ctx, cond); err != nil {
		t.Fatalf("wait for %s: %v", what, err)
	}
}

// waitDone waits for the reaper to report p's exit, failing after waitLong.
func waitDone(t *testing.T, p *Proc) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(waitLong):
		t.Fatalf("%s not reaped within %v", p, waitLong)
	}
}

var cpusAllowedRe = regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)$`)

// taskCPUs returns Cpus_allowed_list of every thread of pid, by tid.
func taskCPUs(t *testing.T, pid int) map[int]string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int]string)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // the thread ended
		}
		if err != nil {
			t.Fatal(err)
		}
		m := cpusAllowedRe.FindSubmatch(b)
		if m == nil {
			t.Fatalf("no Cpus_allowed_list in %s/%s/status", dir, e.Name())
		}
		tid, _ := strconv.Atoi(e.Name())
		out[tid] = string(m[1])
	}
	return out
}

// anyInGroup reports whether any process, zombies included, is in pgid.
func anyInGroup(pgid int) (bool, error) {
	sts, err := scanProcs(func(st procStat) bool { return st.PGRP == pgid })
	return len(sts) > 0, err
}

func fakeBoot(id string) BootIDSource {
	return func() (string, error) { return id, nil }
}

// unknownExit returns the reaper's record of pid's exit, if it has one.
func unknownExit(pid int) (UnknownExit, bool) {
	_, last := testReaper.Unknown()
	for i := len(last) - 1; i >= 0; i-- {
		if last[i].PID == pid {
			return last[i], true
		}
	}
	return UnknownExit{}, false
}
