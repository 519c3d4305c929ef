package campaigndir

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/launch"
	"warden/protocols"
)

// TestCreateRecordsAutoPorts: start gives every slot with port: auto a
// port of the servers' range, free on the loopback, distinct from the
// other slots', and records it in plan.json (resume uses the same).
func TestCreateRecordsAutoPorts(t *testing.T) {
	proto := miniProtocol(t, "port: 9000", "port: auto", "port: 9001", "port: auto")
	dir := filepath.Join(t.TempDir(), "campaign")
	created, err := Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	plan, err := dirlayout.ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := launch.ServerPorts()
	ports := map[int]bool{}
	for i, s := range plan.Slots {
		if !s.PortAuto || s.Port < lo || s.Port >= hi || ports[s.Port] || created.Slots[i].Port != s.Port {
			t.Fatalf("slot %s: port %d (auto %v, start's plan %d); want a distinct one in %d-%d", s.Name, s.Port, s.PortAuto, created.Slots[i].Port, lo, hi-1)
		}
		ports[s.Port] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.Port))
		if err != nil {
			t.Fatalf("slot %s's port %d is not free: %v", s.Name, s.Port, err)
		}
		l.Close()
	}
	if len(ports) != 2 {
		t.Fatalf("plan.json's slots %+v", plan.Slots)
	}
}

// TestAssignPortsAvoidsOtherSlots: a port chosen for port: auto is none
// of the fixed slots' ports and none chosen for another slot, and a fixed
// slot keeps its own. There are so many slots that a choice ignoring
// either would repeat one: 1,000 ports chosen in the servers' range (10000
// to 32767 on the kernel's default), a quarter of which fixed slots hold.
func TestAssignPortsAvoidsOtherSlots(t *testing.T) {
	lo, hi := launch.ServerPorts()
	if hi-lo < 10000 {
		t.Skipf("the servers' port range %d-%d is too small for this test", lo, hi-1)
	}
	plan := &protocols.Plan{}
	fixed := map[int]bool{}
	for p := lo; p < lo+(hi-lo)/4; p++ {
		plan.Slots = append(plan.Slots, protocols.SlotInfo{Name: "fixed-" + strconv.Itoa(p), Port: p})
		fixed[p] = true
	}
	for i := range 1000 {
		plan.Slots = append(plan.Slots, protocols.SlotInfo{Name: "auto-" + strconv.Itoa(i), PortAuto: true})
	}
	if err := assignPorts(plan); err != nil {
		t.Fatal(err)
	}
	chosen := map[int]string{}
	for i, s := range plan.Slots {
		switch {
		case !s.PortAuto && s.Port != lo+i:
			t.Fatalf("fixed slot %s was given port %d", s.Name, s.Port)
		case !s.PortAuto:
		case fixed[s.Port]:
			t.Fatalf("slot %s was given port %d, a fixed slot's", s.Name, s.Port)
		case chosen[s.Port] != "":
			t.Fatalf("slots %s and %s were both given port %d", chosen[s.Port], s.Name, s.Port)
		case s.Port < lo || s.Port >= hi:
			t.Fatalf("slot %s was given port %d, outside %d-%d", s.Name, s.Port, lo, hi-1)
		default:
			chosen[s.Port] = s.Name
		}
	}
	if len(chosen) != 1000 {
		t.Fatalf("%d ports chosen, want 1000", len(chosen))
	}
}
