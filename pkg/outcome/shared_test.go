package outcome

import (
	"strings"
	"testing"
	"time"

	"warden/pkg/state"
	"warden/protocols"
)

// TestSharedCause (issue 39, friction 1): the runs not tried yet whose
// planned server is that of a run whose last attempt failed for a cause
// of the server's own (server-exit, oom, server-not-ready,
// config-mismatch) and that no amendment covers since, are held; a run
// with another server, a run already tried, a failure of another class
// and a failure an amendment covers hold none.
func TestSharedCause(t *testing.T) {
	t0 := time.Date(2026, 7, 12, 10, 0, 0, 0, time.UTC)
	bad := protocols.ServerSpec{Name: "vllm", Kind: "vllm", Command: protocols.CommandSpec{Argv: []string{"vllm", "serve", "--port", "${PORT}", "--max-num-seqs=oops"}}}
	good := bad
	good.Command.Argv = []string{"vllm", "serve", "--port", "${PORT}", "--max-num-seqs=256"}
	other := protocols.ServerSpec{Name: "sglang", Kind: "sglang", Command: protocols.CommandSpec{Argv: []string{"sglang", "--port", "${PORT}"}}}
	plan := &protocols.Plan{}
	unit := 0
	add := func(id string, s protocols.ServerSpec) {
		unit++
		plan.Runs = append(plan.Runs, protocols.Run{ID: id, Server: s, Unit: unit})
	}
	for _, id := range []string{"F", "H1", "tried", "H2", "done"} {
		add(id, bad)
	}
	add("good", good)
	add("other", other)
	// a run of F's own unit (its moderate, say) is not held: it runs after
	// F's rerun, on its slots
	plan.Runs = append(plan.Runs, protocols.Run{ID: "F.moderate", Server: bad, Unit: 1})
	f := fakeRecords{
		runs: []state.Run{
			{ID: "F", Attempts: 1, LastState: state.Failed},
			{ID: "H1"},
			{ID: "tried", Attempts: 1, LastState: state.Interrupted},
			{ID: "H2"},
			{ID: "done", Attempts: 1, LastState: state.Complete, Done: true},
			{ID: "good"},
			{ID: "other"},
			{ID: "F.moderate"},
		},
		attempts: map[string]state.Attempt{"F": {RunID: "F", N: 1, State: state.Failed, Reason: state.ReasonServerExit, UpdatedAt: t0}},
	}
	got, err := SharedCause(plan, f)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range got {
		ids = append(ids, h.Run)
		if h.Cause != "F" || h.Attempt != 1 || h.Reason != state.ReasonServerExit || h.Server != "vllm" {
			t.Errorf("held %+v", h)
		}
	}
	if g := strings.Join(ids, " "); g != "H1 H2" {
		t.Fatalf("held %q, want H1 H2", g)
	}
	if txt := HeldText(got); txt != "H1, H2 share the cause of F attempt 1 (server-exit, server vllm)" {
		t.Errorf("text %q", txt)
	}

	for _, r := range []state.Reason{state.ReasonOOM, state.ReasonServerNotReady, state.ReasonConfigMismatch} {
		f.attempts["F"] = state.Attempt{RunID: "F", N: 1, State: state.Failed, Reason: r, UpdatedAt: t0}
		if got, _ := SharedCause(plan, f); len(got) != 2 {
			t.Errorf("%s holds %+v, want H1 and H2", r, got)
		}
	}
	// a client's failure is not the server's: nothing is held
	f.attempts["F"] = state.Attempt{RunID: "F", N: 1, State: state.Failed, Reason: state.ReasonClientFailed, UpdatedAt: t0}
	if got, _ := SharedCause(plan, f); len(got) != 0 {
		t.Errorf("client-failed holds %+v", got)
	}
	// an amendment registered after the failure that names F covers it;
	// one from before it, or naming another run, does not
	f.attempts["F"] = state.Attempt{RunID: "F", N: 1, State: state.Failed, Reason: state.ReasonServerExit, UpdatedAt: t0}
	f.ams = []state.Amendment{{ID: "A0", RegisteredAt: t0.Add(-time.Minute), Runs: []string{"F"}}, {ID: "A1", RegisteredAt: t0.Add(time.Minute), Runs: []string{"H1"}}}
	if got, _ := SharedCause(plan, f); len(got) != 2 {
		t.Errorf("with amendments that do not cover F: held %+v", got)
	}
	f.ams = append(f.ams, state.Amendment{ID: "A2", Kind: "amend", RegisteredAt: t0.Add(time.Minute), Runs: []string{"F", "H1", "H2"}})
	if got, _ := SharedCause(plan, f); len(got) != 0 {
		t.Errorf("with F amended: held %+v", got)
	}
}
