package fakegpu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a claiming child process: it claims
// memory, prints "claimed", and exits when its stdin closes.
const helperEnv = "FAKEGPU_TEST_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helperMain(spec))
	}
	os.Exit(m.Run())
}

// helperMain runs the child; spec is "DIR:GPU:MIB".
func helperMain(spec string) int {
	parts := strings.SplitN(spec, ":", 3)
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "bad helper spec %q\n", spec)
		return 2
	}
	gpu, err1 := strconv.Atoi(parts[1])
	mib, err2 := strconv.Atoi(parts[2])
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := Claim(parts[0], gpu, mib, WithRole("test-helper")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("claimed")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// claimingChild is a child process that holds a claim.
type claimingChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  bool
}

// startClaimingChild starts the test binary as a child that claims mib on
// gpu, and returns once the claim is written. Cleanup kills and waits for it.
func startClaimingChild(t *testing.T, dir string, gpu, mib int) *claimingChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d:%d", helperEnv, dir, gpu, mib))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &claimingChild{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		if !c.done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "claimed\n" {
		t.Fatalf("child did not claim: %q, %v", line, err)
	}
	return c
}

func (c *claimingChild) wait(t *testing.T) {
	t.Helper()
	c.done = true
	_ = c.cmd.Wait()
}

func newHost(t testing.TB, n int) (string, *Backend) {
	t.Helper()
	dir := t.TempDir()
	if err := Init(dir, n, 143771); err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, b
}

func usedMiB(t *testing.T, b *Backend, gpu int) int {
	t.Helper()
	used, err := b.MemoryUsedMiB(gpu)
	if err != nil {
		t.Fatal(err)
	}
	return used
}

func TestInitAndDevices(t *testing.T) {
	dir, b := newHost(t, 3)
	if b.Count() != 3 {
		t.Fatalf("Count() = %d, want 3", b.Count())
	}
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		d, err := b.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		if d.Index != i || d.Name != DeviceName || d.TotalMiB != 143771 {
			t.Errorf("Device(%d) = %+v", i, d)
		}
		if want := fmt.Sprintf("GPU-fake-%d-", i); !strings.HasPrefix(d.UUID, want) || len(d.UUID) <= len(want) {
			t.Errorf("Device(%d).UUID = %q, want prefix %q and more", i, d.UUID, want)
		}
		if seen[d.UUID] {
			t.Errorf("UUID %q repeated", d.UUID)
		}
		seen[d.UUID] = true
		if used := usedMiB(t, b, i); used != 0 {
			t.Errorf("MemoryUsedMiB(%d) = %d on a new host", i, used)
		}
	}
	if _, err := b.Device(3); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Device(3) error = %v, want ErrNoDevice", err)
	}
	if _, err := b.Processes(-1); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Processes(-1) error = %v, want ErrNoDevice", err)
	}
	if err := Init(dir, 2, 100); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Init error = %v, want fs.ErrExist", err)
	}
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Count() != 3 {
		t.Errorf("after a refused second Init, Count() = %d, want 3", again.Count())
	}
	if err := Claim(dir, 3, 10); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Claim on GPU 3 error = %v, want ErrNoDevice", err)
	}
}

func TestOpenMissing(t *testing.T) {
	if _, err := Open(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open(empty dir) error = %v, want fs.ErrNotExist", err)
	}
	if err := Init(t.TempDir(), 0, 100); err == nil {
		t.Fatal("Init with 0 GPUs succeeded")
	}
}

func TestClaimReleasedWhenProcessDies(t *testing.T) {
	dir, b := newHost(t, 2)
	child := startClaimingChild(t, dir, 1, 2048)
	pid := child.cmd.Process.Pid

	if used := usedMiB(t, b, 1); used != 2048 {
		t.Fatalf("MemoryUsedMiB(1) = %d with a live claim, want 2048", used)
	}
	if used := usedMiB(t, b, 0); used != 0 {
		t.Fatalf("MemoryUsedMiB(0) = %d, want 0: the claim is on GPU 1", used)
	}
	procs, err := b.Processes(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].PID != pid || procs[0].UID != os.Getuid() || procs[0].UsedMiB != 2048 {
		t.Fatalf("Processes(1) = %+v, want pid %d uid %d 2048 MiB", procs, pid, os.Getuid())
	}

	if err := child.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.wait(t)

	if used := usedMiB(t, b, 1); used != 0 {
		t.Fatalf("MemoryUsedMiB(1) = %d after the claimer died, want 0", used)
	}
	if procs, err := b.Processes(1); err != nil || len(procs) != 0 {
		t.Fatalf("Processes(1) = %+v, %v after the claimer died, want none", procs, err)
	}
	files, err := filepath.Glob(filepath.Join(dir, claimsDir, "1", "*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("claim files after death = %v, %v: the reader must leave the stale file", files, err)
	}
}

func TestZombieDoesNotCount(t *testing.T) {
	dir, b := newHost(t, 1)
	child := startClaimingChild(t, dir, 0, 512)
	pid := child.cmd.Process.Pid
	if used := usedMiB(t, b, 0); used != 512 {
		t.Fatalf("MemoryUsedMiB(0) = %d, want 512", used)
	}

	// Closing stdin makes the child exit; until Wait it stays a zombie.
	if err := child.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for {
		state, _, err := procStat(pid)
		if err != nil {
			t.Fatalf("child %d vanished before Wait: %v", pid, err)
		}
		if state == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d still in state %c", pid, state)
		}
		<-ticker.C
	}
	if used := usedMiB(t, b, 0); used != 0 {
		t.Fatalf("MemoryUsedMiB(0) = %d while the claimer is a zombie, want 0", used)
	}
	child.wait(t)
}

func TestPidIdentity(t *testing.T) {
	dir, b := newHost(t, 1)
	self := os.Getpid()
	start, err := StartTime(self)
	if err != nil {
		t.Fatal(err)
	}
	pidMax, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	noPid, err := strconv.Atoi(strings.TrimSpace(string(pidMax)))
	if err != nil {
		t.Fatal(err)
	}

	// A live pid with another start time is a reused pid: it does not count.
	if err := ClaimFor(dir, 0, self, start+1, 4242, 100); err != nil {
		t.Fatal(err)
	}
	// Pids are below pid_max, so this one belongs to no process.
	if err := ClaimFor(dir, 0, noPid, 1, 4242, 200); err != nil {
		t.Fatal(err)
	}
	if used := usedMiB(t, b, 0); used != 0 {
		t.Fatalf("MemoryUsedMiB(0) = %d with only stale claims, want 0", used)
	}

	// The same pid with its real start time counts, under the recorded uid.
	if err := ClaimFor(dir, 0, self, start, 4242, 300, WithRole("foreign")); err != nil {
		t.Fatal(err)
	}
	procs, err := b.Processes(0)
	if err != nil {
		t.Fatal(err)
	}
	want := Process{PID: self, StartTime: start, UID: 4242, UsedMiB: 300}
	if len(procs) != 1 || procs[0] != want {
		t.Fatalf("Processes(0) = %+v, want [%+v]", procs, want)
	}

	// Claiming again replaces the amount.
	if err := ClaimFor(dir, 0, self, start, 4242, 50); err != nil {
		t.Fatal(err)
	}
	if used := usedMiB(t, b, 0); used != 50 {
		t.Fatalf("MemoryUsedMiB(0) = %d after a second claim of 50, want 50", used)
	}
}

func TestClaimFileIsAtomic(t *testing.T) {
	dir, b := newHost(t, 1)
	if err := Claim(dir, 0, 64, WithRole("engine")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, claimsDir, "0"))
	if err != nil {
		t.Fatal(err)
	}
	start, err := StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d-%d.json", os.Getpid(), start)
	if len(entries) != 1 || entries[0].Name() != want {
		t.Fatalf("claim directory holds %v, want only %s (no temporary files)", entries, want)
	}
	// A temporary file of an unfinished write is not a claim.
	tmp := filepath.Join(dir, claimsDir, "0", "."+want+"123")
	if err := os.WriteFile(tmp, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if used := usedMiB(t, b, 0); used != 64 {
		t.Fatalf("MemoryUsedMiB(0) = %d, want 64", used)
	}
}

func TestParseStat(t *testing.T) {
	// The fields after the command name of a real stat line, with start time
	// 987654 in field 22.
	const tail = " S 1 2 3 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 987654 1000 200 18446744073709551615"
	for _, tc := range []struct {
		name, line string
		state      byte
		start      uint64
		ok         bool
	}{
		{"plain", "42 (sleep)" + tail, 'S', 987654, true},
		{"spaces and parentheses", "42 (a) b (c) d)" + tail, 'S', 987654, true},
		{"zombie", "42 (x)" + strings.Replace(tail, " S ", " Z ", 1), 'Z', 987654, true},
		{"no name", "42 sleep S 1", 0, 0, false},
		{"truncated", "42 (sleep) S 1 2 3", 0, 0, false},
		{"bad start", "42 (sleep)" + strings.Replace(tail, "987654", "x", 1), 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, start, err := parseStat([]byte(tc.line + "\n"))
			if (err == nil) != tc.ok {
				t.Fatalf("parseStat error = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (state != tc.state || start != tc.start) {
				t.Fatalf("parseStat = %c, %d, want %c, %d", state, start, tc.state, tc.start)
			}
		})
	}
}

func TestStartTimeOfChildIsLater(t *testing.T) {
	// A child started now has a start time no earlier than this process's.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+t.TempDir()+":0:1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	child, err := StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	self, err := StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if child < self || self == 0 {
		t.Fatalf("start times: child %d, self %d", child, self)
	}
}

// BenchmarkMemoryUsedMiB reads a GPU with one live claim and seven stale
// ones, as a controller polling for an empty GPU does.
func BenchmarkMemoryUsedMiB(b *testing.B) {
	dir := b.TempDir()
	if err := Init(dir, 1, 143771); err != nil {
		b.Fatal(err)
	}
	if err := Claim(dir, 0, 100); err != nil {
		b.Fatal(err)
	}
	for pid := 1; pid <= 7; pid++ {
		if err := ClaimFor(dir, 0, 1<<22+pid, 1, 0, 10); err != nil {
			b.Fatal(err)
		}
	}
	be, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		used, err := be.MemoryUsedMiB(0)
		if err != nil || used != 100 {
			b.Fatalf("MemoryUsedMiB = %d, %v", used, err)
		}
	}
}
