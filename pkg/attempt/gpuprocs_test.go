package attempt

import (
	"strings"
	"testing"
	"time"

	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/gpu/sample"
)

// TestOwnProcsWatch: a stranger is reported once, with the sample's time;
// after end nothing is judged; a pid once known stays the attempt's.
func TestOwnProcsWatch(t *testing.T) {
	o := newOwnProcs()
	o.known[10] = true // seen in the attempt's group at an earlier sample
	w := o.watch(1000)
	at := time.Date(2026, 7, 13, 1, 2, 3, 0, time.UTC)
	w(sample.Record{Time: at, GPUs: []gpu.Reading{{Index: 0, Procs: []gpu.Proc{{PID: 10, UID: 1000}}}}})
	select {
	case v := <-o.found:
		t.Fatalf("a known pid was judged foreign: %+v", v)
	default:
	}
	stranger := sample.Record{Time: at, GPUs: []gpu.Reading{{Index: 0, Procs: []gpu.Proc{{PID: 99, UID: 1001, UsedMiB: 1}}}}}
	w(stranger)
	w(stranger) // reported once; the sampler never waits
	v := <-o.found
	if v.Verdict != gates.Fail || !v.At.Equal(at) || !strings.Contains(v.Detail, "pid 99") {
		t.Fatalf("%+v", v)
	}
	// an escapee of the attempt (reparented to the controller, marked) is
	// not a stranger, though no cgroup or group of the attempt holds it
	o3 := newOwnProcs()
	o3.adopted = func(pid int) bool { return pid == 77 }
	o3.watch(1000)(sample.Record{Time: at, GPUs: []gpu.Reading{{Index: 0, Procs: []gpu.Proc{{PID: 77, UID: 1000, UsedMiB: 1}}}}})
	select {
	case v := <-o3.found:
		t.Fatalf("the attempt's own escapee was judged foreign: %+v", v)
	default:
	}
	o3.watch(1000)(stranger)
	if v := <-o3.found; !strings.Contains(v.Detail, "pid 99") {
		t.Fatalf("a stranger beside an escapee: %+v", v)
	}
	o2 := newOwnProcs()
	o2.end()
	o2.watch(1000)(stranger)
	select {
	case v := <-o2.found:
		t.Fatalf("judged after end: %+v", v)
	default:
	}
}
