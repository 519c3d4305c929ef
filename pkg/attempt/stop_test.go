package attempt_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"warden/pkg/attempt"
	"warden/pkg/endlog"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/launch"
	"warden/pkg/record"
	"warden/pkg/state"
)

// stopCases are the outcomes of stopping and cleanup (stop.go): the
// shutdown's signals, the cleanup gate, the charge, an operator's or the
// budget's stop.
var stopCases = []phaseCase{
	{
		name: "SIGTERM ends the server through its API parent",
		path: happy,
		check: func(h *harness) {
			if got := h.rec.signalsTo("server"); got != "SIGTERM/pid" {
				h.t.Fatalf("server signals %q, want SIGTERM to the API parent alone", got)
			}
			if e, ok := h.rec.exitOf("server"); !ok || e.Code != 0 || e.Signal != "" {
				h.t.Fatalf("server exit %+v (%v)", e, ok)
			}
			if v := h.gate("cleanup"); v.Verdict != state.VerdictPass || v.Figures["gpu0_used_mib"] != 0 || v.Figures["live_processes"] != 0 {
				h.t.Fatalf("cleanup gate %+v", v)
			}
			h.chargedOnce()
		},
	},
	{
		name: "server ignores SIGTERM: its group is killed",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--ignore-sigterm")
			h.run.Server.ShutdownGraceS, h.run.Server.GroupGraceS = 0.3, 0.3
		},
		path: happy,
		check: func(h *harness) {
			if got := h.rec.signalsTo("server"); !strings.HasPrefix(got, "SIGTERM/pid SIGTERM/group") || !strings.Contains(got, "SIGKILL/group") {
				h.t.Fatalf("server signals %q: want SIGTERM to the API parent, to its group, then SIGKILL", got)
			}
			if e, _ := h.rec.exitOf("server"); e.Signal != "SIGKILL" {
				h.t.Fatalf("server exit %+v", e)
			}
		},
	},
	forksAHundred(false),
	forksAHundred(true),
	stoppedEngine(false),
	stoppedEngine(true),
	escapedGrandchild(false),
	escapedGrandchild(true),
	{
		// An engine child that escapes everything the controller can see
		// (a new session, a cleared environment, no cgroup) keeps its GPU
		// memory: the cleanup gate fails naming it.
		name: "an escaped engine child holds GPU memory",
		prep: func(h *harness) {
			h.plan.CleanupS = 0.5
			h.run.Server.Command = shell(`env -i PATH="$$PATH" WARDEN_FAKE_GPU_DIR="$$WARDEN_FAKE_GPU_DIR" CUDA_VISIBLE_DEVICES="$$CUDA_VISIBLE_DEVICES" setsid ` + standinBin +
				` orphan --gpu-mem-mib 512 >/dev/null 2>&1 & exec ` + standinBin + ` server --port ${PORT} --load-s 0.2 --shutdown-timeout 1 --effective-config "effective config: enable_chunked_prefill=True"`)
			h.at(state.Stopping, func(record.Report) {
				waitUntil(h.t, "the escapee's claim", func() bool {
					mib, err := h.gpus.MemoryUsedMiB(0)
					return err == nil && mib >= 512
				})
			})
		},
		path: "reserved preflight starting ready measuring stopping cleanup failed:cleanup-timeout",
		check: func(h *harness) {
			v := h.gate("cleanup")
			h.killClaimers()
			if v.Verdict != state.VerdictFail || v.Figures["gpu0_used_mib"] != 512 || !strings.Contains(v.Detail, "MiB used") || !strings.Contains(v.Detail, "pid ") {
				h.t.Fatalf("cleanup gate %+v", v)
			}
			h.wantDetail("cleanup gate: ")
			h.chargedOnce()
		},
	},
	{
		name: "the attempt's own leftover on the GPU",
		prep: func(h *harness) {
			h.plan.CleanupS = 0.3
			h.at(state.Cleanup, func(record.Report) { h.claim(0, os.Getuid(), 1024) })
		},
		path: "reserved preflight starting ready measuring stopping cleanup failed:cleanup-timeout",
		check: func(h *harness) {
			if v := h.gate("cleanup"); v.Figures["gpu0_used_mib"] != 1024 || v.Figures["cleanup_s"] < 0.3 {
				h.t.Fatalf("cleanup gate %+v, want it failed after its 0.3 s", v)
			}
			h.chargedOnce()
		},
	},
	{
		// seed 002 stop condition 2 at cleanup: another user's process
		// holds the GPU once the attempt's are gone
		name: "another user's process holds the GPU at cleanup",
		prep: func(h *harness) {
			h.plan.CleanupS = 0.3
			h.at(state.Cleanup, func(record.Report) { h.claim(0, 4242, 1024) })
		},
		path: "reserved preflight starting ready measuring stopping cleanup failed:foreign-gpu-process",
		check: func(h *harness) {
			h.wantDetail("cleanup gate: ", "pid "+strconv.Itoa(os.Getpid()))
			h.chargedOnce()
		},
	},
	{
		// the signals could not be sent (the boot id cannot be read, so
		// no process can be identified): the processes outlive the
		// cleanup timeout, and the failure is cleanup-failed, not a
		// timeout
		name: "the signals cannot be sent",
		prep: func(h *harness) {
			h.plan.CleanupS = 0.3
			h.at(state.Stopping, func(record.Report) { h.boot.set(true) })
		},
		path: "reserved preflight starting ready measuring stopping cleanup failed:cleanup-failed",
		check: func(h *harness) {
			h.boot.set(false)
			v := h.gate("cleanup")
			h.killGroup("server")
			if v.Verdict != state.VerdictFail || v.Figures["live_processes"] == 0 {
				h.t.Fatalf("cleanup gate %+v", v)
			}
			h.chargedOnce()
		},
	},
	{
		name: "the record of stopping refused",
		prep: func(h *harness) {
			h.openEnds()
			h.refuseAt(state.Stopping)
		},
		path:  "reserved preflight starting ready measuring stopping!",
		check: func(h *harness) { h.wantEnded() },
	},
	{
		name: "the record of cleanup refused",
		prep: func(h *harness) {
			h.openEnds()
			h.refuseAt(state.Cleanup)
		},
		path:  "reserved preflight starting ready measuring stopping cleanup!",
		check: func(h *harness) { h.wantEnded() },
	},
	{
		name: "the record of the interruption refused",
		prep: func(h *harness) {
			h.openEnds()
			h.run.Client = phaseClient(nil, "hang")
			h.stopAt(state.Measuring, nil)
			h.refuseAt(state.Interrupted)
		},
		path:  "reserved preflight starting ready measuring interrupted!",
		check: func(h *harness) { h.wantEnded() },
	},
	{
		// an operator's stop: the client is ended first, then the server
		// through its API parent; no stopping is recorded, the attempt
		// is interrupted (it restarts from a fresh server on resume)
		name: "an operator's stop ends the client, then the server",
		prep: func(h *harness) {
			h.run.Client = phaseClient(nil, "hang")
			h.stopAt(state.Measuring, nil)
		},
		path: "reserved preflight starting ready measuring interrupted:interrupted",
		check: func(h *harness) {
			sigs := h.rec.signalList()
			if len(sigs) < 2 || sigs[0].Role != "client" || sigs[0].Signal != "SIGTERM" || h.rec.signalsTo("server") != "SIGTERM/pid" {
				h.t.Fatalf("signals %+v: want the client's SIGTERM, then the server's", sigs)
			}
			if _, ok := h.rec.entered(state.Stopping); ok {
				h.t.Fatal("an interrupted attempt recorded stopping")
			}
			h.chargedOnce()
		},
	},
	{
		// the budget is a hard stop while runs are in flight: the
		// attempt is ended gracefully and charged what it ran
		name: "budget cap while measuring",
		prep: func(h *harness) {
			h.run.Client = phaseClient(nil, "hang")
			h.stopAt(state.Measuring, attempt.ErrBudgetExhausted)
		},
		path: "reserved preflight starting ready measuring interrupted:budget-exhausted",
		check: func(h *harness) {
			h.wantDetail("the campaign's GPU time reached its cap: stopped while measuring")
			if got := h.rec.signalsTo("client"); !strings.HasPrefix(got, "SIGTERM/pid") {
				h.t.Fatalf("client signals %q: want it ended gracefully", got)
			}
			h.chargedOnce()
		},
	},
}

func TestStop(t *testing.T) {
	t.Parallel()
	runCases(t, stopCases)
}

// cgroupNames numbers the tests' campaign cgroups.
var cgroupNames atomic.Int64

// withCgroups contains the attempt's processes in cgroups of a campaign
// root of its own, where cgroup v2 is writable; elsewhere the launcher
// falls back to process groups, as a controller with --cgroups auto does.
func (h *harness) withCgroups() {
	h.t.Helper()
	m, err := launch.NewManager(fmt.Sprintf("attempt-test-%d-%d", os.Getpid(), cgroupNames.Add(1)))
	if err != nil {
		h.t.Fatal(err)
	}
	if !m.Available() {
		h.t.Logf("containment: %s", m.Mode())
	}
	h.env.Cgroups, h.env.Launcher.Cgroups = m, m
	h.t.Cleanup(func() {
		if err := m.Cleanup(context.Background()); err != nil {
			h.t.Error(err)
		}
	})
}

// forksAHundred: a server whose engine leaves a hundred processes in its
// group. The API parent exits on SIGTERM; the children left in the group
// are ended by the group (and cgroup) signals.
func forksAHundred(cgroups bool) phaseCase {
	return phaseCase{
		name: fmt.Sprintf("the engine leaves a hundred children (cgroups %v)", cgroups),
		prep: func(h *harness) {
			if cgroups {
				h.withCgroups()
			}
			h.run.Server.Command = standinServer("--fork", "100")
			h.run.Server.ReadyTimeoutS = 50
			h.at(state.Measuring, func(record.Report) {
				srv := h.proc("server")
				waitUntil(h.t, "the engine's hundred children", func() bool {
					ps, err := launch.GroupPIDs(srv.PGID)
					return err == nil && len(ps) >= 102 // API parent, engine, 100 children
				})
			})
		},
		path: happy,
		check: func(h *harness) {
			if got := h.rec.signalsTo("server"); !strings.HasPrefix(got, "SIGTERM/pid SIGTERM/group") {
				h.t.Fatalf("server signals %q: want SIGTERM to the API parent, then to the group it left behind", got)
			}
			if v := h.gate("cleanup"); v.Verdict != state.VerdictPass || v.Figures["gpu0_used_mib"] != 0 {
				h.t.Fatalf("cleanup gate %+v", v)
			}
			if ps, err := launch.GroupPIDs(h.proc("server").PGID); err != nil || len(ps) != 0 {
				h.t.Fatalf("the server's group after the attempt: %v (%v)", ps, err)
			}
		},
	}
}

// stoppedEngine: a server whose engine is stopped (SIGSTOP, the stand-in
// for uninterruptible sleep) cannot take its parent's word or SIGTERM;
// only SIGKILL (or cgroup.kill) ends it.
func stoppedEngine(cgroups bool) phaseCase {
	var engine launch.Identity
	return phaseCase{
		name: fmt.Sprintf("a stopped engine is killed (cgroups %v)", cgroups),
		prep: func(h *harness) {
			if cgroups {
				h.withCgroups()
			}
			h.run.Server.ShutdownGraceS, h.run.Server.GroupGraceS = 0.5, 0.5
			h.at(state.Measuring, func(record.Report) {
				engine = h.engine()
				if err := syscall.Kill(engine.PID, syscall.SIGSTOP); err != nil {
					h.t.Fatal(err)
				}
				waitUntil(h.t, "the engine to stop", func() bool { return procState(engine.PID) == 'T' })
			})
		},
		path: happy,
		check: func(h *harness) {
			if alive, err := engine.Alive(nil); alive || err != nil {
				h.t.Fatalf("the stopped engine %d survived the attempt (%v)", engine.PID, err)
			}
			if got := h.rec.signalsTo("server"); !strings.Contains(got, "SIGKILL/group") && !strings.Contains(got, "SIGKILL/cgroup") {
				h.t.Fatalf("server signals %q: want SIGKILL to the group or cgroup", got)
			}
			if v := h.gate("cleanup"); v.Verdict != state.VerdictPass || v.Figures["gpu0_used_mib"] != 0 {
				h.t.Fatalf("cleanup gate %+v", v)
			}
		},
	}
}

// escapedGrandchild: the engine leaves a process that holds GPU memory in
// a session of its own (and, with cgroups, that moves itself out of the
// attempt's cgroup, as a root daemon can), so no group or cgroup signal
// reaches it. It still carries the attempt's marker and, its parent gone,
// was reparented to the controller: cleanup kills it as adopted, and the
// gate passes.
func escapedGrandchild(cgroups bool) phaseCase {
	return phaseCase{
		name: fmt.Sprintf("a grandchild that escaped its session is killed as adopted (cgroups %v)", cgroups),
		prep: func(h *harness) {
			flags := []string{"--setsid-grandchild"}
			if cgroups {
				h.withCgroups()
				if !h.env.Cgroups.Available() {
					h.t.Skipf("cgroup v2 is not writable here (%s): no cgroup to escape", h.env.Cgroups.Mode())
				}
				flags = append(flags, "--escape-cgroup")
			}
			h.run.Server.Command = standinServer(flags...)
			h.t.Cleanup(h.killClaimers) // an escapee the attempt left, should the test fail
			h.at(state.Measuring, func(record.Report) {
				srv := h.proc("server")
				waitUntil(h.t, "the escapee in a session of its own (and out of the server's cgroup), reparented to the test", func() bool {
					ids, _ := launch.Adopted(nil, "WARDEN_ATTEMPT_DIR="+h.adir)
					for _, id := range ids {
						if _, sid, err := id.Group(); err != nil || id.PID == srv.PID || sid == srv.PGID {
							continue
						}
						if !cgroups {
							return true
						}
						procs, err := os.ReadFile(filepath.Join(srv.Cgroup, "cgroup.procs"))
						return err == nil && !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(id.PID))
					}
					return false
				})
			})
		},
		path: happy,
		check: func(h *harness) {
			if got := h.rec.signalsTo("adopted"); got != "SIGKILL/pid" {
				h.t.Fatalf("signals to adopted processes %q, want one SIGKILL", got)
			}
			if v := h.gate("cleanup"); v.Verdict != state.VerdictPass || v.Figures["gpu0_used_mib"] != 0 || v.Figures["live_processes"] != 0 {
				h.t.Fatalf("cleanup gate %+v", v)
			}
			if !strings.Contains(h.log.String(), "killed a descendant that escaped its process group") {
				h.t.Fatalf("the attempt's log does not say it killed the escapee")
			}
		},
	}
}

// engine is the stand-in server's engine: the process of its group that
// runs "standin engine".
func (h *harness) engine() launch.Identity {
	h.t.Helper()
	srv := h.proc("server")
	var engine launch.Identity
	waitUntil(h.t, "the engine", func() bool {
		ps, _ := launch.GroupPIDs(srv.PGID)
		for _, pid := range ps {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if bytes.Contains(cmd, []byte("\x00engine\x00")) {
				id, err := launch.Lookup(pid, nil)
				engine = id
				return err == nil
			}
		}
		return false
	})
	return engine
}

// procState is the state letter of pid in /proc/PID/stat, 0 when there is
// no such process.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// killClaimers ends the processes that hold claims on the fake host and
// are not the test process: the test's own descendants that escaped the
// attempt. It waits until none is left.
func (h *harness) killClaimers() {
	h.t.Helper()
	held := func() []fakegpu.Process {
		var out []fakegpu.Process
		for i := range h.gpus.Count() {
			procs, _ := h.gpus.Processes(i)
			for _, p := range procs {
				if p.PID != os.Getpid() {
					out = append(out, p)
				}
			}
		}
		return out
	}
	for _, p := range held() {
		if st, err := fakegpu.StartTime(p.PID); err == nil && st == p.StartTime {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	waitUntil(h.t, "the escaped processes to end", func() bool { return len(held()) == 0 })
}

// openEnds opens the campaign's end log for the attempt.
func (h *harness) openEnds() {
	h.t.Helper()
	var err error
	if h.env.Ends, err = endlog.Open(h.dir); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { h.env.Ends.Close() })
}

// wantEnded fails the test unless the end log holds the attempt's end,
// after its server's start, and nothing was charged: resume charges an
// attempt whose end could not be recorded, to that end.
func (h *harness) wantEnded() {
	h.t.Helper()
	ends, err := endlog.Read(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	at, ok := ends[endlog.Key{Run: runID, N: 1}]
	if !ok || len(ends) != 1 || !at.After(h.proc("server").StartedAt) || at.After(time.Now()) {
		h.t.Fatalf("end log %v, want the attempt's end after its server's start", ends)
	}
	if c := h.rec.charges(); len(c) != 0 {
		h.t.Fatalf("charged %+v", c)
	}
}
