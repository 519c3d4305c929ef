package gates

import (
	"strings"
	"testing"

	"warden/pkg/gpu"
)

func TestGPUProcesses(t *testing.T) {
	rs := []gpu.Reading{
		{Index: 0, Procs: []gpu.Proc{{PID: 10, UID: 1000, UsedMiB: 100}, {PID: 11, UID: 1000, UsedMiB: 5}}},
		{Index: 1, Procs: []gpu.Proc{{PID: 20, UID: 1001, UsedMiB: -1}, {PID: 21, UID: -1, UsedMiB: 7}}},
		{Index: 2, Procs: []gpu.Proc{}},
	}
	v := GPUProcesses(rs, map[int]bool{10: true}, 1000)
	if v.Verdict != Fail || v.Figures["foreign_processes"] != 3 || v.Figures["foreign_processes_other_users"] != 2 {
		t.Fatalf("%+v", v)
	}
	for _, want := range []string{
		"GPU 0: a process outside the attempt (pid 11, uid 1000) holds 5 MiB",
		"GPU 1: another user's process (pid 20, uid 1001) holds unknown MiB",
		"GPU 1: another user's process (pid 21, uid -1) holds 7 MiB",
	} {
		if !strings.Contains(v.Detail, want) {
			t.Errorf("detail %q lacks %q", v.Detail, want)
		}
	}
	if v := GPUProcesses(rs[:1], map[int]bool{10: true, 11: true}, 1000); v.Verdict != Pass || v.Figures["foreign_processes"] != 0 {
		t.Fatalf("own processes only: %+v", v)
	}
}
