package node_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"warden/pkg/node"
	"warden/pkg/slurm"
	"warden/protocols"
)

// A node-side runner refuses a spec it cannot run before it reports
// anything or starts a process: another schema, no plan or slots, an
// attempt directory that is not a clean absolute path, a step whose GPUs
// are not the run's count.
func TestRunNodeRefuses(t *testing.T) {
	plan := &protocols.Plan{}
	slots := []protocols.SlotInfo{{Name: "s0", GPUs: []int{0, 1}, CPUs: "0", Port: 9000}}
	ok := node.Spec{Schema: 1, Plan: plan, Slots: slots, Dir: "/campaign/runs/p1/a1"}
	step := slurm.Step{JobID: "7", StepID: "0", Node: "n1", GPUs: []int{2, 3}, GPUsText: "2,3"}
	for _, c := range []struct {
		name string
		edit func(*node.Spec, *slurm.Step)
		want string
	}{
		{"schema", func(s *node.Spec, _ *slurm.Step) { s.Schema = 2 }, "schema 2"},
		{"no plan", func(s *node.Spec, _ *slurm.Step) { s.Plan = nil }, "no plan or no slots"},
		{"no slots", func(s *node.Spec, _ *slurm.Step) { s.Slots = nil }, "no plan or no slots"},
		{"relative dir", func(s *node.Spec, _ *slurm.Step) { s.Dir = "runs/p1/a1" }, "not a clean absolute path"},
		{"unclean dir", func(s *node.Spec, _ *slurm.Step) { s.Dir = "/campaign/runs/../../etc" }, "not a clean absolute path"},
		{"step GPUs", func(_ *node.Spec, st *slurm.Step) { st.GPUs, st.GPUsText = []int{2}, "2" }, "the run's slots need 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp, st := ok, step
			c.edit(&sp, &st)
			var out bytes.Buffer
			_, err := node.Run(context.Background(), node.Config{Spec: sp, Step: st, Out: &out, In: strings.NewReader("")})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
			if out.Len() > 0 {
				t.Errorf("reported before refusing: %s", out.String())
			}
		})
	}
}
