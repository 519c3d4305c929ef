package ownprocs

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/gpu/sample"
)

func noSighting(t *testing.T, o *Set, what string) {
	t.Helper()
	select {
	case v := <-o.Found():
		t.Fatalf("%s: %+v", what, v)
	default:
	}
}

// A stranger is reported once, with the sample's time; after End nothing
// is judged; a pid once known stays the attempt's.
func TestWatch(t *testing.T) {
	t.Parallel()
	o := New("")
	o.known[10] = true // seen in the attempt's group at an earlier sample
	w := o.Watch(1000)
	at := time.Date(2026, 7, 13, 1, 2, 3, 0, time.UTC)
	w(sample.Record{Time: at, GPUs: []gpu.Reading{{Index: 0, Procs: []gpu.Proc{{PID: 10, UID: 1000}}}}})
	noSighting(t, o, "a known pid was judged foreign")
	stranger := sample.Record{Time: at, GPUs: []gpu.Reading{{Index: 0, Procs: []gpu.Proc{{PID: 99, UID: 1001, UsedMiB: 1}}}}}
	w(stranger)
	w(stranger) // reported once; the sampler never waits
	v := <-o.Found()
	if v.Verdict != gates.Fail || !v.At.Equal(at) || !strings.Contains(v.Detail, "pid 99") {
		t.Fatalf("%+v", v)
	}
	ended := New("")
	ended.End()
	ended.Watch(1000)(stranger)
	noSighting(t, ended, "judged after End")
}

// An escapee of the attempt (a child of this process carrying the
// attempt's marker, as one reparented to the controller is) is not a
// stranger, though no cgroup or group of the attempt holds it; a process
// without the marker is.
func TestWatchKnowsMarkedEscapees(t *testing.T) {
	t.Parallel()
	marker := "WARDEN_ATTEMPT_DIR=" + t.TempDir()
	start := func(env ...string) *exec.Cmd {
		cmd := exec.Command("sleep", "600")
		cmd.Env = append(os.Environ(), env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	marked, unmarked := start(marker), start()
	uid := os.Getuid()
	o := New(marker)
	at := time.Now()
	o.Watch(uid)(sample.Record{Time: at, GPUs: []gpu.Reading{{Index: 0, Procs: []gpu.Proc{{PID: marked.Process.Pid, UID: uid, UsedMiB: 1}}}}})
	noSighting(t, o, "the attempt's own escapee was judged foreign")
	o.Watch(uid)(sample.Record{Time: at, GPUs: []gpu.Reading{{Index: 0, Procs: []gpu.Proc{{PID: unmarked.Process.Pid, UID: uid, UsedMiB: 1}}}}})
	select {
	case v := <-o.Found():
		if !strings.Contains(v.Detail, "pid "+strconv.Itoa(unmarked.Process.Pid)) {
			t.Fatalf("the unmarked process's sighting: %+v", v)
		}
	default:
		t.Fatal("a process of ours without the attempt's marker was not judged foreign")
	}
}

// A process of the attempt's user that a sample saw on a GPU but that
// exited before the judgement, unplaced by any scan, is not a stranger
// (the attempt's own server killed as it became ready); another user's
// process that is gone is still judged, by its user.
func TestWatchPassesOverTheVanished(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cmd.Process.Kill()
	cmd.Wait()
	uid := os.Getuid()
	o := New("")
	at := time.Now()
	o.Watch(uid)(sample.Record{Time: at, GPUs: []gpu.Reading{{Index: 0, Procs: []gpu.Proc{{PID: pid, UID: uid, UsedMiB: 1}}}}})
	noSighting(t, o, "an exited process of the attempt's user was judged foreign")
	o.Watch(uid)(sample.Record{Time: at, GPUs: []gpu.Reading{{Index: 0, Procs: []gpu.Proc{{PID: pid, UID: uid + 1, UsedMiB: 1}}}}})
	select {
	case v := <-o.Found():
		if !strings.Contains(v.Detail, "another user's process") {
			t.Fatalf("%+v", v)
		}
	default:
		t.Fatal("another user's process was passed over because it is gone")
	}
}
