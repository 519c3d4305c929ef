package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestAffinityFromFirstInstruction(t *testing.T) {
	var own unix.CPUSet
	if err := unix.SchedGetaffinity(0, &own); err != nil {
		t.Fatal(err)
	}
	if !own.IsSet(0) || !own.IsSet(1) {
		t.Skip("needs CPUs 0 and 1 in the test's affinity mask")
	}
	before := taskCPUs(t, os.Getpid())
	l := newLauncher(t, false)
	for _, cpu := range []int{1, 0} {
		t.Run("cpu"+strconv.Itoa(cpu), func(t *testing.T) {
			dir := t.TempDir()
			spec := childSpec(t, "threads", dir)
			spec.CPUs = []int{cpu}
			p := start(t, l, spec)
			pid, _ := waitReady(t, filepath.Join(dir, "ready"))
			if pid != p.PID {
				t.Fatalf("ready file names pid %d, started %d", pid, p.PID)
			}
			gpid, _ := waitReady(t, filepath.Join(dir, "ready.g"))

			want := strconv.Itoa(cpu)
			child := taskCPUs(t, p.PID)
			if len(child) < 5 {
				t.Errorf("child has %d threads, want at least 5 (4 locked + runtime)", len(child))
			}
			for tid, got := range child {
				if got != want {
					t.Errorf("child thread %d: Cpus_allowed_list %q, want %q", tid, got, want)
				}
			}
			for tid, got := range taskCPUs(t, gpid) {
				if got != want {
					t.Errorf("grandchild %d thread %d: Cpus_allowed_list %q, want %q", gpid, tid, got, want)
				}
			}
			// The forking thread had its mask restored: the controller's
			// own threads are as they were.
			for tid, got := range taskCPUs(t, os.Getpid()) {
				if got != before[os.Getpid()] {
					t.Errorf("own thread %d: Cpus_allowed_list %q after Start, want %q", tid, got, before[os.Getpid()])
				}
			}
		})
	}
}

func TestProcessGroupAndSession(t *testing.T) {
	l := newLauncher(t, false)
	for _, setsid := range []bool{false, true} {
		t.Run(fmt.Sprintf("setsid=%v", setsid), func(t *testing.T) {
			dir := t.TempDir()
			spec := childSpec(t, "forkn", dir, envN+"=3")
			spec.Setsid = setsid
			p := start(t, l, spec)
			waitReady(t, filepath.Join(dir, "ready"))
			want := []int{p.PID}
			for i := range 3 {
				g, _ := waitReady(t, filepath.Join(dir, "ready.g"+strconv.Itoa(i)))
				want = append(want, g)
			}
			slices.Sort(want)

			pgid, err := unix.Getpgid(p.PID)
			if err != nil {
				t.Fatal(err)
			}
			if pgid != p.PID || p.PGID != p.PID {
				t.Errorf("pgid %d (Proc.PGID %d), want the child's pid %d", pgid, p.PGID, p.PID)
			}
			got, err := GroupPIDs(p.PID)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("GroupPIDs = %v, want %v", got, want)
			}
			sid, err := unix.Getsid(p.PID)
			if err != nil {
				t.Fatal(err)
			}
			ownSid, err := unix.Getsid(0)
			if err != nil {
				t.Fatal(err)
			}
			if setsid {
				if sid != p.PID {
					t.Errorf("session %d, want the child's pid %d", sid, p.PID)
				}
				got, err := SessionPIDs(sid)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("SessionPIDs = %v, want %v", got, want)
				}
			} else if sid != ownSid {
				t.Errorf("session %d, want ours %d", sid, ownSid)
			}
		})
	}
}

func TestCgroupPlacement(t *testing.T) {
	l := newLauncher(t, true)
	t.Run("clone-into-cgroup", func(t *testing.T) {
		dir := t.TempDir()
		spec := childSpec(t, "threads", dir)
		spec.Cgroup = "placement"
		p := start(t, l, spec)
		if p.Cgroup != filepath.Join(l.Cgroups.Root(), "placement") {
			t.Errorf("Proc.Cgroup = %q, want the leaf under %s", p.Cgroup, l.Cgroups.Root())
		}
		waitReady(t, filepath.Join(dir, "ready"))
		gpid, _ := waitReady(t, filepath.Join(dir, "ready.g"))
		for _, pid := range []int{p.PID, gpid} {
			got, err := procCgroup(pid)
			if err != nil {
				t.Fatal(err)
			}
			if got != p.leaf.rel {
				t.Errorf("pid %d in cgroup %q, want %q", pid, got, p.leaf.rel)
			}
		}
		procs, err := p.Leaf().Procs()
		if err != nil {
			t.Fatal(err)
		}
		want := []int{p.PID, gpid}
		slices.Sort(want)
		if !slices.Equal(procs, want) {
			t.Errorf("Leaf.Procs = %v, want %v", procs, want)
		}
		if pop, err := p.Leaf().Populated(); err != nil || !pop {
			t.Errorf("Populated = %v, %v; want true", pop, err)
		}
	})
	t.Run("cgroup.procs-fallback", func(t *testing.T) {
		fl := *l
		fl.noCloneIntoCgroup = true
		dir := t.TempDir()
		spec := childSpec(t, "sleep", dir)
		spec.Cgroup = "fallback"
		p := start(t, &fl, spec)
		got, err := procCgroup(p.PID)
		if err != nil {
			t.Fatal(err)
		}
		if got != p.leaf.rel {
			t.Errorf("pid %d in cgroup %q, want %q", p.PID, got, p.leaf.rel)
		}
	})
}

func TestStopCooperativeSendsOneSIGTERM(t *testing.T) {
	for _, cg := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroup=%v", cg), func(t *testing.T) {
			p, dir := startChild(t, cg, "sleep", "coop")
			waitReady(t, filepath.Join(dir, "ready"))
			recs := stopChild(t, p, StopOptions{Grace: waitLong, GroupGrace: waitLong})
			if len(recs) != 1 {
				t.Fatalf("Stop sent %d signals, want 1: %+v", len(recs), recs)
			}
			r := recs[0]
			if r.Target != TargetPID || r.PID != p.PID || r.Signal != "SIGTERM" || r.Role != "sleep" || r.At.IsZero() {
				t.Errorf("record %+v, want SIGTERM to pid %d of role sleep", r, p.PID)
			}
			if st := p.Exit(); st.Signal != "SIGTERM" || st.Code != -1 || st.At.IsZero() {
				t.Errorf("exit %+v, want killed by SIGTERM", st)
			}
			if pop, err := p.Leaf().Populated(); err != nil || pop {
				t.Errorf("leaf populated = %v, %v after Stop", pop, err)
			}
		})
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	for _, cg := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroup=%v", cg), func(t *testing.T) {
			p, dir := startChild(t, cg, "ignoreterm", "stubborn")
			_, gid := waitGrandchild(t, dir)
			recs := stopChild(t, p, StopOptions{Grace: 100 * time.Millisecond, GroupGrace: 100 * time.Millisecond})
			want := []string{"pid SIGTERM", "group SIGTERM", "group SIGKILL"}
			if cg {
				want = []string{"pid SIGTERM", "group SIGTERM", "cgroup SIGTERM", "group SIGKILL", "cgroup SIGKILL"}
			}
			var got []string
			for i, r := range recs {
				got = append(got, r.Target+" "+r.Signal)
				if i > 0 && r.At.Before(recs[i-1].At) {
					t.Errorf("record %d at %v is before record %d at %v", i, r.At, i-1, recs[i-1].At)
				}
				if r.Target == TargetGroup && r.PID != p.PID {
					t.Errorf("group record names pgid %d, want %d", r.PID, p.PID)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("signal sequence %q, want %q", got, want)
			}
			if st := p.Exit(); st.Signal != "SIGKILL" {
				t.Errorf("leader exit %+v, want SIGKILL", st)
			}
			members, err := GroupPIDs(p.PID)
			if err != nil {
				t.Fatal(err)
			}
			if len(members) != 0 {
				t.Errorf("group %d still has live members %v after Stop", p.PID, members)
			}
			if alive, err := gid.Alive(nil); err != nil || alive {
				t.Errorf("grandchild alive=%v err=%v after Stop", alive, err)
			}
			// The grandchild's zombie is reparented to us and reaped.
			waitFor(t, "no process at all in the group", func() (bool, error) {
				any, err := anyInGroup(p.PID)
				return !any, err
			})
		})
	}
}

func TestEscapedGrandchildKilledThroughCgroup(t *testing.T) {
	p, dir := startChild(t, true, "escape", "escape")
	gpid, gid := waitGrandchild(t, dir)
	killOnCleanup(t, gid)
	st, err := readStat(gpid)
	if err != nil {
		t.Fatal(err)
	}
	if st.PGRP == p.PID || st.Session == p.PID {
		t.Fatalf("grandchild %d did not escape: pgrp %d session %d", gpid, st.PGRP, st.Session)
	}
	if procs, _ := p.Leaf().Procs(); !slices.Contains(procs, gpid) {
		t.Fatalf("escaped grandchild %d not in the leaf: %v", gpid, procs)
	}

	recs := stopChild(t, p, StopOptions{Grace: waitLong, GroupGrace: 100 * time.Millisecond})
	var killed bool
	for _, r := range recs {
		if r.Target == TargetCgroup && r.Signal == "SIGKILL" && slices.Contains(r.Members, gpid) {
			killed = true
		}
		if r.Target == TargetGroup {
			t.Errorf("group signalled although only the leader was in it: %+v", r)
		}
	}
	if !killed {
		t.Errorf("no cgroup SIGKILL naming %d in %+v", gpid, recs)
	}
	if alive, err := gid.Alive(nil); err != nil || alive {
		t.Errorf("escaped grandchild alive=%v err=%v after Stop", alive, err)
	}
	if pop, err := p.Leaf().Populated(); err != nil || pop {
		t.Errorf("leaf populated = %v, %v after Stop", pop, err)
	}
	// It was reparented to us (subreaper) and reaped as an unknown pid.
	waitFor(t, "the reaper to record the grandchild's exit", func() (bool, error) {
		u, ok := unknownExit(gpid)
		return ok && u.Status.Signal == "SIGKILL", nil
	})
}

func TestEscapedGrandchildWithoutCgroupsIsReparented(t *testing.T) {
	noCgroup := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(noCgroup, []byte("22 1 0:21 / /proc rw - proc proc rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := newManager("nocgroup", noCgroup, selfCgroup)
	if err != nil {
		t.Fatal(err)
	}
	if m.Available() || !strings.Contains(m.Mode(), "process groups") {
		t.Fatalf("manager without cgroup2: Available %v Mode %q", m.Available(), m.Mode())
	}
	l := &Launcher{Reaper: testReaper, Cgroups: m}
	dir := t.TempDir()
	spec := childSpec(t, "escape", dir)
	spec.Cgroup = "ignored"
	spec.Env = append(spec.Env, "LAUNCH_TEST_MARKER="+dir)
	p := start(t, l, spec)
	if p.Cgroup != "" {
		t.Errorf("Proc.Cgroup = %q without cgroups", p.Cgroup)
	}
	gpid, gid := waitGrandchild(t, dir)
	killOnCleanup(t, gid)
	waitFor(t, "the escaped grandchild to be reparented to us", func() (bool, error) {
		st, err := readStat(gpid)
		return err == nil && st.PPID == os.Getpid(), err
	})

	recs := stopChild(t, p, StopOptions{Grace: waitLong, GroupGrace: 100 * time.Millisecond})
	if len(recs) != 1 || recs[0].Target != TargetPID {
		t.Errorf("records %+v, want one SIGTERM to the pid", recs)
	}
	// Without a cgroup nothing reaches it: this is the limit of process
	// groups, which the subreaper at least makes visible.
	if alive, err := gid.Alive(nil); err != nil || !alive {
		t.Fatalf("escaped grandchild alive=%v err=%v; expected it to survive Stop without cgroups", alive, err)
	}
	// Adopted finds it by the marker its environment inherited, and only
	// with the right marker.
	if ids, err := Adopted(nil, "WARDEN_ATTEMPT_DIR=/no/such/attempt"); err != nil || len(ids) != 0 {
		t.Fatalf("Adopted with another marker = %v, %v", ids, err)
	}
	ids, err := Adopted(nil, "LAUNCH_TEST_MARKER="+dir)
	if err != nil || len(ids) != 1 || ids[0] != gid {
		t.Fatalf("Adopted = %v, %v; want the escapee %v", ids, err, gid)
	}
	if _, err := Signal(nil, ids[0], "escapee", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reaper to record the escapee's exit", func() (bool, error) {
		u, ok := unknownExit(gpid)
		return ok && u.Status.Signal == "SIGKILL", nil
	})
	count, _ := testReaper.Unknown()
	if count == 0 {
		t.Error("Unknown count is 0 after an unknown exit")
	}
}

func TestImmediateExitNotLost(t *testing.T) {
	// With the hook, every child has exited (it is a zombie) before Start
	// registers it: its status must still reach its Proc, not be reaped as
	// an unknown pid.
	waitZombie := func(pid int) {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		_ = pollUntil(ctx, func() (bool, error) {
			st, err := readStat(pid)
			return err != nil || st.State == 'Z', nil
		})
	}
	for name, hook := range map[string]func(int){"plain": nil, "exited-before-registration": waitZombie} {
		t.Run(name, func(t *testing.T) {
			l := newLauncher(t, false)
			l.afterFork = hook
			dir := t.TempDir()
			procs := make([]*Proc, 50)
			for i := range procs {
				procs[i] = start(t, l, childSpec(t, "exit3", dir))
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			for _, p := range procs {
				select {
				case <-p.Done():
				case <-ctx.Done():
					t.Fatalf("%s: Done did not fire within %v", p, waitLong)
				}
				if st := p.Exit(); st.Code != 3 || st.Signal != "" {
					t.Errorf("%s: exit %+v, want code 3", p, st)
				}
				if p.StartTime == 0 || p.BootID == "" {
					t.Errorf("%s: identity not read after fork", p)
				}
				if _, lost := unknownExit(p.PID); lost {
					t.Errorf("%s: exit recorded as unknown", p)
				}
			}
		})
	}
}

func TestIdentityMismatchRefused(t *testing.T) {
	l := newLauncher(t, false)
	dir := t.TempDir()
	p := start(t, l, childSpec(t, "sleep", dir))
	waitReady(t, filepath.Join(dir, "ready"))
	for _, delta := range []int64{1, -1} {
		fake := p.Identity
		fake.StartTime = uint64(int64(fake.StartTime) + delta)
		if alive, err := fake.Alive(nil); err != nil || alive {
			t.Errorf("fake identity (start %+d): Alive = %v, %v", delta, alive, err)
		}
		if _, err := Signal(nil, fake, "fake", syscall.SIGKILL); !errors.Is(err, ErrNotOurs) {
			t.Errorf("Signal with start time %+d: %v, want ErrNotOurs", delta, err)
		}
		if _, err := SignalGroup(nil, fake, "fake", syscall.SIGKILL); !errors.Is(err, ErrNotOurs) {
			t.Errorf("SignalGroup with start time %+d: %v, want ErrNotOurs", delta, err)
		}
		recs, err := Reclaim(context.Background(), nil, Leftover{Leader: fake, Role: "fake"}, StopOptions{})
		if err != nil || len(recs) != 0 {
			t.Errorf("Reclaim of a reused pid: %+v, %v; want nothing sent", recs, err)
		}
	}
	if alive, err := p.Alive(nil); err != nil || !alive {
		t.Fatalf("process alive=%v err=%v after refused signals", alive, err)
	}
	select {
	case <-p.Done():
		t.Fatalf("process exited: %+v", p.Exit())
	default:
	}
	for _, bad := range []int{0, 1, -1} {
		if _, err := Signal(nil, Identity{PID: bad, BootID: p.BootID}, "bad", syscall.SIGKILL); !errors.Is(err, ErrNotOurs) {
			t.Errorf("Signal pid %d: %v, want ErrNotOurs", bad, err)
		}
		if _, err := SignalGroup(nil, Identity{PID: bad, BootID: p.BootID}, "bad", syscall.SIGKILL); !errors.Is(err, ErrNotOurs) {
			t.Errorf("SignalGroup pgid %d: %v, want ErrNotOurs", bad, err)
		}
	}
}

func TestBootIDChangeRefused(t *testing.T) {
	l := newLauncher(t, false)
	dir := t.TempDir()
	p := start(t, l, childSpec(t, "sleep", dir))
	waitReady(t, filepath.Join(dir, "ready"))
	rebooted := fakeBoot("00000000-0000-0000-0000-000000000000")
	if p.BootID == "00000000-0000-0000-0000-000000000000" {
		t.Fatal("real boot id equals the fake one")
	}
	if alive, err := p.Alive(rebooted); err != nil || alive {
		t.Errorf("Alive after a boot id change = %v, %v; want false", alive, err)
	}
	if _, err := Signal(rebooted, p.Identity, "x", syscall.SIGKILL); !errors.Is(err, ErrNotOurs) {
		t.Errorf("Signal after a boot id change: %v, want ErrNotOurs", err)
	}
	if _, err := SignalGroup(rebooted, p.Identity, "x", syscall.SIGKILL); !errors.Is(err, ErrNotOurs) {
		t.Errorf("SignalGroup after a boot id change: %v, want ErrNotOurs", err)
	}
	recs, err := Reclaim(context.Background(), rebooted, Leftover{Leader: p.Identity, Role: "x"}, StopOptions{})
	if err != nil || len(recs) != 0 {
		t.Errorf("Reclaim after a boot id change: %+v, %v; want nothing sent", recs, err)
	}
	if id, err := Lookup(p.PID, rebooted); err != nil || id.BootID != "00000000-0000-0000-0000-000000000000" || id.StartTime != p.StartTime {
		t.Errorf("Lookup with injected boot id = %+v, %v", id, err)
	}
	if alive, err := p.Alive(nil); err != nil || !alive {
		t.Fatalf("process alive=%v err=%v after refused signals", alive, err)
	}
	failing := func() (string, error) { return "", errors.New("no boot id") }
	if _, err := p.Alive(failing); err == nil {
		t.Error("Alive with a failing boot id source returned no error")
	}
}

func TestReclaimLeftover(t *testing.T) {
	p, dir := startChild(t, true, "ignoreterm", "leftover")
	_, gid := waitGrandchild(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	// As at resume: only the recorded identity and leaf path are known.
	recs, err := Reclaim(ctx, nil, Leftover{Leader: p.Identity, Role: "server", Cgroup: p.Cgroup},
		StopOptions{Grace: 100 * time.Millisecond, GroupGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Target+" "+r.Signal)
	}
	want := []string{"pid SIGTERM", "group SIGTERM", "cgroup SIGTERM", "group SIGKILL", "cgroup SIGKILL"}
	if !slices.Equal(got, want) {
		t.Errorf("signal sequence %q, want %q", got, want)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatal("leader not reaped")
	}
	if st := p.Exit(); st.Signal != "SIGKILL" {
		t.Errorf("exit %+v, want SIGKILL", st)
	}
	if alive, err := gid.Alive(nil); err != nil || alive {
		t.Errorf("grandchild alive=%v err=%v after Reclaim", alive, err)
	}
	if pop, err := p.Leaf().Populated(); err != nil || pop {
		t.Errorf("leaf populated = %v, %v", pop, err)
	}
}

func TestKillFallbackPerPID(t *testing.T) {
	l := newLauncher(t, true)
	dir := t.TempDir()
	spec := childSpec(t, "forkn", dir, envN+"=3")
	spec.Cgroup = "fallback-kill"
	p := start(t, l, spec)
	waitReady(t, filepath.Join(dir, "ready"))
	for i := range 3 {
		waitReady(t, filepath.Join(dir, "ready.g"+strconv.Itoa(i)))
	}
	if procs, _ := p.Leaf().Procs(); len(procs) != 4 {
		t.Fatalf("leaf holds %v, want 4 processes", procs)
	}
	if err := p.Leaf().killEach(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the leaf to empty", func() (bool, error) {
		pop, err := p.Leaf().Populated()
		return !pop, err
	})
	waitDone(t, p)
	if st := p.Exit(); st.Signal != "SIGKILL" {
		t.Errorf("exit %+v, want SIGKILL", st)
	}
}

func TestManagerCleanupRefusesPopulatedLeaf(t *testing.T) {
	l := newLauncher(t, true)
	dir := t.TempDir()
	spec := childSpec(t, "sleep", dir)
	spec.Cgroup = "busy"
	p := start(t, l, spec)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	err := l.Cgroups.Cleanup(ctx)
	if err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("Cleanup with a populated leaf: %v, want an error naming it", err)
	}
	if _, err := l.Cgroups.NewLeaf("busy"); err == nil {
		t.Error("NewLeaf reused a populated leaf")
	}
	if _, err := Stop(ctx, p, StopOptions{Grace: waitLong}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Cgroups.NewLeaf("busy"); err != nil {
		t.Errorf("NewLeaf refused an empty existing leaf: %v", err)
	}
	if err := l.Cgroups.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if dirExists(l.Cgroups.Root()) {
		t.Errorf("campaign root %s still exists", l.Cgroups.Root())
	}
}

func TestOpenLeaf(t *testing.T) {
	l := newLauncher(t, true)
	leaf, err := l.Cgroups.NewLeaf("open")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leaf.Remove(context.Background()) })
	got, err := OpenLeaf(leaf.Path)
	if err != nil {
		t.Fatal(err)
	}
	if got != leaf {
		t.Errorf("OpenLeaf = %+v, want %+v", got, leaf)
	}
	notCgroup := filepath.Join(t.TempDir(), "warden-x", "leaf")
	if err := os.MkdirAll(notCgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"relative/warden-x/leaf",
		leaf.Path + "/../open",
		l.Cgroups.Root(), // the campaign root, not a leaf
		notCgroup,        // not on cgroup2
	} {
		if _, err := OpenLeaf(bad); err == nil {
			t.Errorf("OpenLeaf(%q) succeeded", bad)
		}
	}
}

func TestStartErrors(t *testing.T) {
	notRunning := &Launcher{Reaper: NewReaper()}
	dir := t.TempDir()
	if _, err := notRunning.Start(childSpec(t, "exit3", dir)); err == nil {
		t.Error("Start with a reaper that is not running succeeded")
	}
	l := newLauncher(t, false)
	for name, spec := range map[string]Spec{
		"empty argv":  {},
		"missing exe": {Argv: []string{filepath.Join(dir, "missing")}},
		"bad cpu":     {Argv: []string{"/bin/true"}, CPUs: []int{-1}},
		"bad dir":     {Argv: []string{"/bin/true"}, Dir: filepath.Join(dir, "missing")},
	} {
		if p, err := l.Start(spec); err == nil {
			t.Errorf("%s: Start succeeded", name)
			killAndReap(t, p)
		}
	}
	if err := testReaper.Start(context.Background()); err == nil {
		t.Error("second Reaper.Start succeeded")
	}
}

func TestOutputFiles(t *testing.T) {
	l := newLauncher(t, false)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.log")
	if err := os.WriteFile(out, []byte("before\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := childSpec(t, "nosuchmode", dir) // writes an error to stderr, exits 1
	spec.StdoutPath = filepath.Join(dir, "stdout.log")
	p := start(t, l, spec)
	waitDone(t, p)
	if st := p.Exit(); st.Code != 1 {
		t.Errorf("exit %+v, want code 1", st)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "before\n") || !strings.Contains(string(b), "unknown mode") {
		t.Errorf("stderr file %q: want the old content followed by the child's error", b)
	}
	fi, err := os.Stat(spec.StdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("stdout file mode %v, want 0644", fi.Mode().Perm())
	}
}

// A child started with pipes for its standard input and output talks to
// the controller line by line: what is written reaches it, what it writes
// comes back, and closing its input ends it.
func TestStdinStdoutPipes(t *testing.T) {
	l := newLauncher(t, false)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	p := start(t, l, Spec{Role: "echo", Argv: []string{"cat"}, Stdin: inR, Stdout: outW})
	inR.Close()
	outW.Close()
	if _, err := inW.Write([]byte("stop\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != "stop\n" {
		t.Fatalf("read %q, %v; want the line written to its input", buf, err)
	}
	inW.Close()
	waitDone(t, p)
	if ex := p.Exit(); ex.Code != 0 || ex.Signal != "" {
		t.Errorf("exit %+v after its input closed, want 0", ex)
	}
}
