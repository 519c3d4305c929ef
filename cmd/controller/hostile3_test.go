package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/internal/boltfault"
	"warden/internal/testutil/testports"
	"warden/pkg/campaigndir"
	"warden/pkg/dirlayout"
	"warden/pkg/launch"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// snapshot maps each file directly in dir to its content.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			files[e.Name()] = b
		}
	}
	return files
}

// A campaign stopped by its operator, its state.db then damaged (one bit
// of a page header, the page found by walking the file; or truncated to 0
// bytes): resume, --resume and resume --foreground each refuse with exit
// 5, naming the file and the copy; the copy holds the damaged bytes, is
// made once for one content, and nothing else in the directory changes:
// no lock taken, no daemon started, no record written. ctlq status says
// the same with its own exit status.
func TestResumeRefusesDamagedDatabase(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 1, measureS: "30"})
	c.signalWhileMeasuring(proto, syscall.SIGTERM, "the controller to stop", 60*time.Second)
	path := dirlayout.State(c.dir)
	clean, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T)
		want   string
	}{
		{"page header bit", func(t *testing.T) {
			if err := boltfault.FlipHeaderBit(path, 0, boltfault.FieldFlags); err != nil {
				t.Fatal(err)
			}
		}, "neither branch nor leaf"},
		{"empty", func(t *testing.T) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}, "the file is empty (0 bytes)"},
	} {
		// serial: every case damages the same campaign's database in turn
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, clean, 0o600); err != nil {
				t.Fatal(err)
			}
			tc.damage(t)
			damaged, _ := os.ReadFile(path)
			before := snapshot(t, c.dir)
			var kept string
			for _, args := range [][]string{{"resume", "-d", c.dir}, {"--resume", "-d", c.dir}, {"resume", "-d", c.dir, "--foreground"}} {
				out, code := c.controller(args...)
				if code != exitDamaged || !strings.Contains(out, path+" is damaged or empty") || !strings.Contains(out, tc.want) ||
					strings.Contains(out, "goroutine") || strings.Contains(out, "controller running") {
					t.Fatalf("%v: exit %d, want %d:\n%s", args, code, exitDamaged, out)
				}
				if lockfile.Held(dirlayout.Lock(c.dir)) {
					t.Fatalf("%v left a controller running", args)
				}
				after := snapshot(t, c.dir)
				var added []string
				for name := range after {
					if _, ok := before[name]; !ok {
						added = append(added, name)
					} else if !bytes.Equal(before[name], after[name]) {
						t.Fatalf("%v changed %s", args, name)
					}
				}
				if len(after) != len(before)+1 || len(added) != 1 || !strings.HasPrefix(added[0], dirlayout.StateFile+campaigndir.DamagedSuffix) {
					t.Fatalf("%v: files added %v, want one copy", args, added)
				}
				if kept == "" {
					kept = added[0]
				} else if added[0] != kept {
					t.Fatalf("%v kept a second copy %s of the same content (first %s)", args, added[0], kept)
				}
				if !strings.Contains(out, filepath.Join(c.dir, kept)) || !bytes.Equal(after[kept], damaged) {
					t.Fatalf("%v: the copy %s is not named or not the damaged file:\n%s", args, kept, out)
				}
			}
			if err := os.Remove(filepath.Join(c.dir, kept)); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(ctlqBin, "status", "-d", c.dir)
			sout, _ := cmd.CombinedOutput()
			out, code := string(sout), cmd.ProcessState.ExitCode()
			if code != 6 || !strings.Contains(out, path+" is damaged or empty") {
				t.Fatalf("ctlq status: exit %d:\n%s", code, out)
			}
		})
	}
	// restored, the campaign is as the operator left it
	if err := os.WriteFile(path, clean, 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.store()
	defer s.Close()
	if cp, err := s.Campaign(); err != nil || cp.State != state.CampaignStopped || cp.StopReason != state.StopOperator {
		t.Fatalf("campaign %+v, %v", cp, err)
	}
}

// flood opens n connections to addr on network and keeps them open until
// the test ends, sending nothing: a leaky local poller. Dials that fail
// (a full backlog) are counted, not fatal.
func flood(t *testing.T, network, addr string, n int) (opened int) {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.DialTimeout(network, addr, 2*time.Second)
		if err != nil {
			continue
		}
		conns = append(conns, c)
	}
	return len(conns)
}

// A controller whose open-files limit is 512, its socket and metrics
// listener capped at 4 connections each, while a local client holds 700
// idle connections to each: the listeners take 4, the rest wait in the
// kernel's backlog, so the controller keeps the descriptors it needs.
// SIGTERM then stops the campaign as an operator stop: the attempt in
// flight is interrupted (never cleanup-failed), and nothing of the
// campaign is left alive.
func TestFloodedListenersCannotStarveTheController(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 1, measureS: "30"})
	port := testports.Free(t, 1)[0]
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command("prlimit", "--nofile=512:512", controllerBin, "start", "-f", proto, "-d", c.dir,
		"--gpu-backend", "fake", "--metrics", addr)
	cmd.Env = append(os.Environ(), MaxConnsEnv+"=4")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	lock := dirlayout.Lock(c.dir)
	pid := lockfile.Owner(lock)
	c.waitMeasuring()
	sock := flood(t, "unix", dirlayout.Socket(c.dir), 700)
	tcp := flood(t, "tcp", addr, 700)
	if sock+tcp < 600 {
		t.Fatalf("only %d and %d connections opened: the flood does not pass the controller's limit", sock, tcp)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	c.waitUnlocked("the controller to stop", 60*time.Second)
	s := c.store()
	defer s.Close()
	cp, err := s.Campaign()
	if err != nil || cp.State != state.CampaignStopped || cp.StopReason != state.StopOperator {
		t.Fatalf("campaign %s (%s: %s), %v", cp.State, cp.StopReason, cp.StopDetail, err)
	}
	c.soleAttempt(s, "p1.saturation", state.Interrupted)
	c.assertNoProcesses()
	log, _ := os.ReadFile(dirlayout.Log(c.dir))
	if bytes.Contains(log, []byte("too many open files")) {
		t.Fatalf("the controller ran out of descriptors:\n%s", tail(string(log), 3000))
	}
}

// A server that overwrote its initial environment as setproctitle does
// (/proc/PID/environ holds no entry), left alive by a controller killed
// while it measured: resume recognises it by pid, start time, boot id,
// cgroup and the process group it was started in, and ends it; it is never
// "not this campaign's". A stop of the resumed controller then ends the
// second attempt's server too, so no recorded process of the campaign is
// alive.
func TestResumeEndsAServerThatRewroteItsEnvironment(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 1, measureS: "30", serverArgs: `, --rewrite-environ`})
	c.signalWhileMeasuring(proto, syscall.SIGKILL, "the controller to die", 30*time.Second)
	s := c.store()
	first := serverProc(t, c.attempts(s, "p1.saturation")[0])
	s.Close()
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", first.PID)); err != nil || bytes.Contains(env, []byte("=")) {
		t.Fatalf("the server's environment was not rewritten: %q, %v", env, err)
	}
	t.Cleanup(func() { syscall.Kill(first.PID, syscall.SIGKILL) }) // after a failure only: its environment hides it from killLeftovers
	if out, code := c.controller("resume", "-d", c.dir); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, out)
	}
	c.waitMeasuring()
	if out, code := c.controller("stop", "-d", c.dir); code != 0 {
		t.Fatalf("stop exited %d:\n%s", code, out)
	}
	s = c.store()
	defer s.Close()
	as := c.attempts(s, "p1.saturation")
	if len(as) != 2 || as[0].State != state.Interrupted {
		t.Fatalf("attempts %+v", as)
	}
	for _, a := range as {
		p := serverProc(t, a)
		id := launch.Identity{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID}
		if alive, err := id.Alive(nil); alive || err != nil {
			t.Fatalf("attempt %d's server %v is still alive (%v)", a.N, id, err)
		}
	}
	log, _ := os.ReadFile(dirlayout.Log(c.dir))
	if bytes.Contains(log, []byte("not this campaign's")) {
		t.Fatalf("resume called the campaign's own server foreign:\n%s", tail(string(log), 3000))
	}
	c.assertNoProcesses()
}

// serverProc is the attempt's recorded server process.
func serverProc(t *testing.T, a state.Attempt) state.Proc {
	t.Helper()
	for _, p := range a.Procs {
		if p.Role == "server" {
			return p
		}
	}
	t.Fatalf("attempt %d records no server: %+v", a.N, a.Procs)
	return state.Proc{}
}
