package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warden/internal/testutil/testbin"
	"warden/pkg/gpu/fakegpu"
)

// The tests run the real binary, built once by TestMain. The test process
// makes itself a child subreaper, so that what the stand-ins leave behind
// on purpose (setsid orphans, engines outliving their parent, forked
// sleepers) is reparented to it and can be killed and waited for. Tests in
// this package therefore do not run in parallel: a test's cleanup reaps
// every child of the test process that is not one it started.

// standinBin is the binary under test; TestMain sets it before any test runs.
var standinBin string

const (
	pollEvery = 20 * time.Millisecond
	deadline  = 30 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	return testbin.Run("standin-test-", []string{"."}, func(dir string) int {
		standinBin = filepath.Join(dir, "standin")
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintf(os.Stderr, "become a subreaper: %v\n", err)
			return 1
		}
		return m.Run()
	})
}

// harness starts stand-in processes for one test and, at its end, kills and
// waits for all of them, their process groups, and whatever they left
// behind.
type harness struct {
	t     *testing.T
	procs []*proc
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t}
	t.Cleanup(h.cleanup)
	return h
}

// proc is one process started by the harness, leader of its own group.
type proc struct {
	cmd    *exec.Cmd
	stdout string // path of its stdout file
	stderr string // path of its stderr file
	dir    string // scratch directory
	done   chan struct{}
	err    error // Wait's result, valid once done is closed
}

// baseEnv is the test's environment without the variables the stand-ins read.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "WARDEN_") || name == "CUDA_VISIBLE_DEVICES" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// start runs the stand-in binary with args in a new process group, with
// extra environment variables, its output going to files.
func (h *harness) start(env []string, args ...string) *proc {
	h.t.Helper()
	dir := h.t.TempDir()
	p := &proc{
		cmd:    exec.Command(standinBin, args...),
		stdout: filepath.Join(dir, "stdout"),
		stderr: filepath.Join(dir, "stderr"),
		dir:    dir,
		done:   make(chan struct{}),
	}
	p.cmd.Env = append(baseEnv(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := os.Create(p.stdout)
	if err != nil {
		h.t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(p.stderr)
	if err != nil {
		h.t.Fatal(err)
	}
	defer errf.Close()
	p.cmd.Stdout, p.cmd.Stderr = out, errf
	if err := p.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.procs = append(h.procs, p)
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

func (h *harness) cleanup() {
	for i := len(h.procs) - 1; i >= 0; i-- {
		p := h.procs[i]
		// The group outlives its leader when members are left behind.
		if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			h.t.Errorf("kill group %d: %v", p.cmd.Process.Pid, err)
		}
		<-p.done
		if h.t.Failed() {
			for _, f := range []string{p.stdout, p.stderr} {
				data, _ := os.ReadFile(f)
				h.t.Logf("%s of %v:\n%s", filepath.Base(f), p.cmd.Args, data)
			}
		}
	}
	reapAdopted(h.t)
}

// reapAdopted kills and waits for every child of the test process. Call it
// only when every process the harness started has been waited for: the
// children left then are those processes' leftovers, reparented here.
func reapAdopted(t *testing.T) {
	end := time.Now().Add(deadline)
	for {
		kids := childrenOf(t, os.Getpid())
		if len(kids) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Errorf("children still present: %v", kids)
			return
		}
		for _, pid := range kids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws unix.WaitStatus
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil && !errors.Is(err, unix.ECHILD) {
				t.Errorf("wait for adopted %d: %v", pid, err)
			}
		}
	}
}

// stat is what the tests read from /proc/PID/stat.
type stat struct {
	state           byte
	ppid, pgid, sid int
}

func readStat(pid int) (stat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 4 {
		return stat{}, fmt.Errorf("short stat for %d", pid)
	}
	var s stat
	s.state = f[0][0]
	s.ppid, _ = strconv.Atoi(f[1])
	s.pgid, _ = strconv.Atoi(f[2])
	s.sid, _ = strconv.Atoi(f[3])
	return s, nil
}

// listProcs returns the pids of all processes for which keep is true.
func listProcs(t *testing.T, keep func(pid int, s stat) bool) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := readStat(pid)
		if err != nil {
			continue // gone
		}
		if keep(pid, s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func childrenOf(t *testing.T, parent int) []int {
	return listProcs(t, func(_ int, s stat) bool { return s.ppid == parent })
}

// liveGroupMembers returns the processes of group pgid that are not zombies.
func liveGroupMembers(t *testing.T, pgid int) []int {
	return listProcs(t, func(_ int, s stat) bool { return s.pgid == pgid && s.state != 'Z' })
}

// waitFor polls cond until it is true, failing the test after the deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// wait waits for p to exit and returns its status.
func (p *proc) wait(t *testing.T) syscall.WaitStatus {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(deadline):
		t.Fatalf("%v did not exit", p.cmd.Args)
	}
	return p.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) output(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// testServer is a running stand-in server.
type testServer struct {
	*proc
	url string
}

// startServer starts "standin server" on a free port and waits until it
// listens (not until it is healthy).
func (h *harness) startServer(env []string, args ...string) *testServer {
	h.t.Helper()
	t := h.t
	portFile := filepath.Join(t.TempDir(), "port")
	p := h.start(env, append([]string{"server", "--port", "0", "--port-file", portFile}, args...)...)
	var port string
	waitFor(t, "the server's port file", func() bool {
		if p.exited() {
			t.Fatalf("server exited before listening: %v\n%s", p.err, p.output(t, p.stderr))
		}
		data, err := os.ReadFile(portFile)
		port = strings.TrimSpace(string(data))
		return err == nil
	})
	return &testServer{proc: p, url: "http://127.0.0.1:" + port}
}

var httpClient = &http.Client{Timeout: deadline, Transport: &http.Transport{Proxy: nil}}

// healthyServer starts a stand-in server with args and waits until it
// answers /health.
func (h *harness) healthyServer(args ...string) *testServer {
	h.t.Helper()
	s := h.startServer(nil, args...)
	s.waitHealthy(h.t)
	return s
}

// runClient runs the stand-in's client with args, in the environment env
// added, and fails the test unless it exits 0.
func (h *harness) runClient(env []string, args ...string) {
	h.t.Helper()
	c := h.start(env, append([]string{"client"}, args...)...)
	if ws := c.wait(h.t); ws.ExitStatus() != 0 {
		h.t.Fatalf("client ended with %v:\n%s", ws, c.output(h.t, c.stderr))
	}
}

// post sends the JSON body to the server's path and returns the
// response; its body is closed when the test ends.
func (s *testServer) post(t *testing.T, path, body string) *http.Response {
	t.Helper()
	resp, err := httpClient.Post(s.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// profileWindow opens and closes a profile window on the server, as a
// load client does: POST /start_profile, then /stop_profile, each 200.
func (s *testServer) profileWindow(t *testing.T) {
	t.Helper()
	for _, ep := range []string{"/start_profile", "/stop_profile"} {
		resp, err := httpClient.Post(s.url+ep, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", ep, resp.StatusCode)
		}
	}
}

// healthStatus returns the status of GET /health, or 0 if it failed.
func (s *testServer) healthStatus() int {
	resp, err := httpClient.Get(s.url + "/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (s *testServer) waitHealthy(t *testing.T) {
	t.Helper()
	waitFor(t, "health 200", func() bool {
		if s.exited() {
			t.Fatalf("server exited before healthy: %v\n%s", s.err, s.output(t, s.stderr))
		}
		return s.healthStatus() == http.StatusOK
	})
}

// fakeGPUs makes a fake host of n GPUs and returns its directory and reader.
func fakeGPUs(t *testing.T, n int) (string, *fakegpu.Backend) {
	t.Helper()
	dir := t.TempDir()
	if err := fakegpu.Init(dir, n, 143771); err != nil {
		t.Fatal(err)
	}
	b, err := fakegpu.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, b
}

func usedMiB(t *testing.T, b *fakegpu.Backend, gpu int) int {
	t.Helper()
	used, err := b.MemoryUsedMiB(gpu)
	if err != nil {
		t.Fatal(err)
	}
	return used
}

func gpuProcs(t *testing.T, b *fakegpu.Backend, gpu int) []fakegpu.Process {
	t.Helper()
	procs, err := b.Processes(gpu)
	if err != nil {
		t.Fatal(err)
	}
	return procs
}

// alive reports whether the process with pid and start time still runs.
func alive(p fakegpu.Process) bool {
	start, err := fakegpu.StartTime(p.PID)
	if err != nil || start != p.StartTime {
		return false
	}
	s, err := readStat(p.PID)
	return err == nil && s.state != 'Z'
}
