package views

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/state"
)

// TestHints (issue 39, frictions 1 and 8): every state that needs a
// person names the next command, spelt one way: the resume of a dead or
// operator-stopped campaign; the amendment (then the resume) after a stop
// for review a failure decides, with the shared-cause flag where the
// cause is the server's; the resume alone after an infrastructure failure
// past its reruns; the budget's amendment or the freeze at the cap. A
// running or finished campaign gets none.
func TestHints(t *testing.T) {
	const dir = "/data/c p3"
	resume := "controller resume -d '/data/c p3'"
	amend := "controller amend -d '/data/c p3' -f NEW_PROTOCOL --id ID --reason TEXT --yes"
	stopped := func(r state.StopReason) api.Status {
		return api.Status{Campaign: api.CampaignStatus{State: "stopped", StopReason: r}}
	}
	tests := []struct {
		name    string
		st      api.Status
		storage Storage
		want    []string // substrings, in order
		not     string
	}{
		{"dead controller", api.Status{Campaign: api.CampaignStatus{State: "running"}}, Storage{}, []string{"the controller is dead", "resume it: " + resume}, ""},
		{"dead on a read-only file system", api.Status{Campaign: api.CampaignStatus{State: "running"}}, Storage{ReadOnly: "mounted read-only"}, []string{"mounted read-only", "then resume: " + resume}, ""},
		{"dead on a full file system", api.Status{Campaign: api.CampaignStatus{State: "running"}}, Storage{Full: true, Free: 4096},
			[]string{"file system is full (4096 bytes free)", "free space on it, then resume: " + resume}, "read-write"},
		{"dead during a stop", api.Status{Campaign: api.CampaignStatus{State: "stopped", StopReason: "server-exit"}, Current: []api.Current{{Run: "r"}}}, Storage{},
			[]string{"the controller is dead", resume}, "controller amend"},
		{"operator stop", stopped(state.StopOperator), Storage{}, []string{"resumable as it is: " + resume}, "controller amend"},
		{"server-exit", stopped("server-exit"), Storage{}, []string{amend + ", then " + resume, resume + " --retry-shared-cause"}, ""},
		{"config-mismatch", stopped("config-mismatch"), Storage{}, []string{amend, "--retry-shared-cause"}, ""},
		{"awaiting amendment, runs held", api.Status{Campaign: api.CampaignStatus{State: "stopped", StopReason: state.StopAwaitingAmendment,
			StopDetail: "nothing more can run: ...; held, not tried: p3 share the cause of p1 attempt 1 (server-exit, server s)"}}, Storage{}, []string{amend, "--retry-shared-cause"}, ""},
		{"awaiting amendment, none held", stopped(state.StopAwaitingAmendment), Storage{}, []string{amend + ", then " + resume}, "--retry-shared-cause"},
		{"validator-failed", stopped("validator-failed"), Storage{}, []string{amend + ", then " + resume}, "--retry-shared-cause"},
		{"retry allowed", stopped("profile-artifact"), Storage{}, []string{"needs no amendment: " + resume}, "controller amend"},
		{"budget", stopped(state.StopBudget), Storage{}, []string{"budget.cap_gpu_hours", amend, resume, "controller freeze -d '/data/c p3' --id ID --reason TEXT"}, ""},
		{"input changed", stopped(state.StopInputChanged), Storage{}, []string{"restore it and " + resume, amend}, ""},
		{"running", api.Status{Campaign: api.CampaignStatus{State: "running"}, Controller: api.Controller{Alive: true}}, Storage{}, nil, ""},
		{"complete", api.Status{Campaign: api.CampaignStatus{State: "complete"}}, Storage{}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Hint(tt.st, dir, tt.storage)
			if len(tt.want) == 0 && h != "" {
				t.Fatalf("hint %q, want none", h)
			}
			rest := h
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("hint %q lacks %q (in order)", h, w)
				}
				rest = rest[i+len(w):]
			}
			if tt.not != "" && strings.Contains(h, tt.not) {
				t.Fatalf("hint %q has %q", h, tt.not)
			}
		})
	}
}

// TestControllerLineOfAFinishedCampaign (friction 11): a complete
// campaign's controller line says it finished and when, not "not
// running: last heartbeat ... ago"; an unfinished one without a
// controller still reads as the alarm it is.
func TestControllerLineOfAFinishedCampaign(t *testing.T) {
	at := time.Date(2026, 12, 3, 15, 1, 50, 0, time.UTC)
	ctl := api.Controller{PID: 7, Heartbeat: at.Add(-3 * time.Second), HeartbeatAgeS: 10.3, HeartbeatIntervalS: 10}
	for _, tt := range []struct {
		state, want string
		current     []api.Current
		stateAt     time.Time
	}{
		{"complete", "pid 7, exited; campaign finished at 2026-12-03 15:01:50 UTC", nil, at},
		{"frozen", "pid 7, exited; campaign frozen at 2026-12-03 15:01:50 UTC", nil, at},
		{"stopped", "pid 7, exited; campaign stopped at 2026-12-03 15:01:50 UTC", nil, at},
		{"complete", "pid 7, exited; campaign finished at 2026-12-03 15:01:47 UTC", nil, time.Time{}}, // an old record: its last heartbeat
		{"stopped", "pid 7, not running: last heartbeat 10.3 s ago (every 10 s)", []api.Current{{Run: "r"}}, at},
		{"running", "pid 7, not running: last heartbeat 10.3 s ago (every 10 s)", nil, at},
	} {
		st := api.Status{Campaign: api.CampaignStatus{State: tt.state, StateAt: tt.stateAt}, Controller: ctl, Current: tt.current}
		if got := ControllerLine(st); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.state, got, tt.want)
		}
	}
}

// TestConsumedTextIsTheJSONFigure (friction 10): the text's "consumed"
// is the document's consumed_gpu_hours, with its two parts.
func TestConsumedTextIsTheJSONFigure(t *testing.T) {
	st := api.Status{Campaign: api.CampaignStatus{State: "running"},
		Budget: api.BudgetStatus{CapGPUHours: 1, ChargedGPUHours: 0.0168, InFlightGPUHours: 0.0066, ConsumedGPUHours: 0.0234}}
	var b bytes.Buffer
	PrintStatus(&b, st)
	want := fmt.Sprintf("consumed %.3f (charged %.3f + in flight %.3f)", st.Budget.ConsumedGPUHours, st.Budget.ChargedGPUHours, st.Budget.InFlightGPUHours)
	if !strings.Contains(b.String(), want) || want != "consumed 0.023 (charged 0.017 + in flight 0.007)" {
		t.Fatalf("status text:\n%s\nwant %q", b.String(), want)
	}
}

// TestUnknownRunNamesTheClosest (friction 11): a did-you-mean for a run
// id the campaign does not have.
func TestUnknownRunNamesTheClosest(t *testing.T) {
	ids := []string{"burnin.base", "short.small.saturation", "short.small.moderate", "long.small.moderate", "long.base.moderate", "short.base.confirm"}
	for _, tt := range []struct{ id, want string }{
		{"long.smal.moderate", `no run "long.smal.moderate" in this campaign; did you mean long.small.moderate?`},
		{"short.smal.saturation", `no run "short.smal.saturation" in this campaign; did you mean short.small.saturation?`},
		{"confirm", `no run "confirm" in this campaign; did you mean short.base.confirm?`},
		{"zzz", `no run "zzz" in this campaign (ctlq runs lists its runs)`},
	} {
		if got := UnknownRun(tt.id, ids); got != tt.want {
			t.Errorf("%s: %q\nwant %q", tt.id, got, tt.want)
		}
	}
}

// TestShowDocumentKeepsEveryField: ctlq show -o json is the run's
// document (run, record, attempts, events, gates) followed by every field
// of RunWithSanity its json tag names, none lost to the embedded
// document's own MarshalJSON.
func TestShowDocumentKeepsEveryField(t *testing.T) {
	r := RunWithSanity{RunDetail: api.RunDetail{Schema: api.Schema, Run: state.Run{ID: "p1"}},
		Sanity: map[string]json.RawMessage{"1": json.RawMessage(`{"ok":true}`)}, StderrTails: []StderrTail{{Role: "server"}}, Serving: &Serving{}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	for _, k := range []string{"schema", "run", "record", "sanity", "stderr_tails", "serving"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	b, _ = json.Marshal(RunWithSanity{RunDetail: api.RunDetail{Run: state.Run{ID: "p1"}}})
	if bytes.Contains(b, []byte("sanity")) || bytes.Contains(b, []byte("serving")) || !json.Valid(b) {
		t.Errorf("empty fields written: %s", b)
	}
}
