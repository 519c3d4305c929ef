package api_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// newStore opens a strict store in dir holding a campaign whose runs
// expect 100, 200, 300 and 400 s: r0 complete, r1 measuring, r2 failed,
// r3 without an attempt.
func newStore(t *testing.T, dir string, c state.Campaign) *state.Store {
	t.Helper()
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	runs := []state.Run{
		{ID: "r0", Order: 0, ExpectedS: 100}, {ID: "r1", Order: 1, ExpectedS: 200},
		{ID: "r2", Order: 2, ExpectedS: 300}, {ID: "r3", Order: 3, ExpectedS: 400},
	}
	if err := s.CreateCampaign(c, runs); err != nil {
		t.Fatal(err)
	}
	move := func(run string, states ...state.AttemptState) {
		t.Helper()
		if _, err := s.NewAttempt(run, "", func(a *state.Attempt) { a.Slot = "slot-" + run }); err != nil {
			t.Fatal(err)
		}
		for _, st := range states {
			var reason state.Reason
			if st == state.Failed {
				reason = state.ReasonGPUNotIdle
			}
			if _, err := s.Transition(run, 1, st, reason, "", nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	happy := []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready,
		state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete}
	move("r0", happy...)
	move("r1", happy[:5]...)
	move("r2", state.Failed)
	return s
}

// TestBuildStatus: counts, current attempts, ETA and budget unit come from
// the campaign record and its counters; plan.json is not read.
func TestBuildStatus(t *testing.T) {
	tests := []struct {
		name        string
		concurrency int
		wantETA     float64
	}{
		{"concurrency 0 counts as 1", 0, 900}, // r1 + r2 + r3 are not done
		{"concurrency 1", 1, 900},
		{"concurrency 3", 3, 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			// A plan.json that would fail to decode: the status must not need it.
			if err := os.WriteFile(dirlayout.Plan(dir), []byte("{not json"), 0o644); err != nil {
				t.Fatal(err)
			}
			s := newStore(t, dir, state.Campaign{ID: "c1", BudgetCapGPUHours: 10, BudgetUnit: "H200-hours",
				RegimeConcurrency: tt.concurrency, Regime: "pair"})
			beat := time.Date(2026, 7, 13, 12, 0, 0, 0, time.UTC)
			now := beat.Add(3 * time.Second)
			st, err := api.BuildStatus(s, dir, api.Controller{Alive: true, PID: 42, Heartbeat: beat}, now)
			if err != nil {
				t.Fatal(err)
			}
			if st.ETAS == nil || *st.ETAS != tt.wantETA {
				t.Errorf("eta %v, want %g", st.ETAS, tt.wantETA)
			}
			// no live controller, no ETA: nothing counts down
			if dead, err := api.BuildStatus(s, dir, api.Controller{PID: 42, Heartbeat: beat}, now); err != nil || dead.ETAS != nil {
				t.Errorf("eta with the controller dead: %v (%v), want null", dead.ETAS, err)
			}
			if st.Budget.Unit != "H200-hours" || st.Budget.CapGPUHours != 10 {
				t.Errorf("budget %+v", st.Budget)
			}
			want := map[string]int{"complete": 1, "running": 1, "failed": 1, "pending": 1}
			if st.Runs.Total != 4 || !reflect.DeepEqual(st.Runs.ByState, want) {
				t.Errorf("runs %+v, want 4 %v", st.Runs, want)
			}
			if len(st.Current) != 1 || st.Current[0].Run != "r1" || st.Current[0].State != "measuring" ||
				st.Current[0].Slot != "slot-r1" {
				t.Errorf("current %+v", st.Current)
			}
			last, _ := s.LastEventSeq()
			if st.LastEvent != last || st.Campaign.ID != "c1" || st.Campaign.Regime != "pair" ||
				st.Controller.PID != 42 || st.Controller.HeartbeatAgeS != 3 {
				t.Errorf("status %+v", st)
			}
		})
	}
}

// TestLivenessAndTimeInState: a controller that beats on time reads as
// healthy, with the interval beside the age; a live attempt's time in
// its state counts from its last transition, not from its creation.
func TestLivenessAndTimeInState(t *testing.T) {
	dir := t.TempDir()
	clock := time.Date(2026, 7, 13, 12, 0, 0, 0, time.UTC)
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateCampaign(state.Campaign{ID: "c", State: state.CampaignRunning}, []state.Run{{ID: "r", ExpectedS: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewAttempt("r", "", nil); err != nil {
		t.Fatal(err)
	}
	for _, st := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring} {
		if _, err := s.Transition("r", 1, st, "", "", nil, nil); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(10 * time.Second)
	}
	clock = clock.Add(-10 * time.Second) // measuring began at +40 s
	if _, err := s.Transition("r", 1, state.Stopping, "", "", nil, nil); err != nil {
		t.Fatal(err)
	}
	now := clock.Add(16 * time.Second)
	tests := []struct {
		name    string
		ctl     api.Controller
		healthy bool
	}{
		{"beat 9.7 s ago", api.Controller{Alive: true, Heartbeat: now.Add(-9700 * time.Millisecond)}, true},
		{"beat 31 s ago", api.Controller{Alive: true, Heartbeat: now.Add(-31 * time.Second)}, false},
		{"not alive", api.Controller{Heartbeat: now.Add(-time.Second)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := api.BuildStatus(s, dir, tt.ctl, now)
			if err != nil {
				t.Fatal(err)
			}
			// r expects 10 s and has run 56: nothing of it is left to wait
			// for; no ETA at all while no controller runs the campaign
			if tt.ctl.Alive && (st.ETAS == nil || *st.ETAS != 0) || !tt.ctl.Alive && st.ETAS != nil {
				t.Errorf("eta %v, want 0 with a live controller, null without", st.ETAS)
			}
			if st.Controller.Healthy != tt.healthy || st.Controller.HeartbeatIntervalS != api.HeartbeatInterval.Seconds() {
				t.Errorf("controller %+v, want healthy %v", st.Controller, tt.healthy)
			}
			if len(st.Current) != 1 || st.Current[0].State != "stopping" || st.Current[0].InStateS != 16 || st.Current[0].ElapsedS != 56 {
				t.Errorf("current %+v, want stopping for 16 s of an attempt 56 s old", st.Current)
			}
		})
	}
}

// serve serves the API for s on DIR/ctl.sock until the test ends.
func serve(t testing.TB, s *state.Store, dir string, now func() time.Time) {
	t.Helper()
	ln, err := net.Listen("unix", dirlayout.Socket(dir))
	if err != nil {
		t.Fatal(err)
	}
	sv := &api.Server{Store: s, Dir: dir, Now: now, Stop: func() {},
		Controller: func() api.Controller { return api.Controller{PID: os.Getpid(), Heartbeat: now()} }}
	srv := &http.Server{Handler: sv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		wg.Wait()
	})
}

// TestStatusSocketMatchesDatabase: the status through the socket is the
// one built from the database, marked with its source.
func TestStatusSocketMatchesDatabase(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, state.Campaign{ID: "c1", BudgetUnit: "GPU-hours", RegimeConcurrency: 2})
	now := time.Date(2026, 7, 13, 12, 0, 0, 0, time.UTC)
	serve(t, s, dir, func() time.Time { return now })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := api.NewClient(dir, 30*time.Second).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := api.BuildStatus(s, dir, api.Controller{Alive: true, PID: os.Getpid(), Heartbeat: now}, now)
	if err != nil {
		t.Fatal(err)
	}
	want.Source = "socket"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("through the socket\n%+v\nfrom the database\n%+v", got, want)
	}
	if got.ETAS == nil || *got.ETAS != 450 || got.Budget.Unit != "GPU-hours" {
		t.Errorf("eta %v, unit %q; want 450 and GPU-hours", got.ETAS, got.Budget.Unit)
	}
}

// TestReportAndRunsThroughSocket: the report and the runs list through
// the socket are those built from the database.
func TestReportAndRunsThroughSocket(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, state.Campaign{ID: "c1", RegimeConcurrency: 2})
	now := time.Date(2026, 7, 13, 12, 0, 0, 0, time.UTC)
	serve(t, s, dir, func() time.Time { return now })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := api.NewClient(dir, 30*time.Second)
	rep, err := c.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Schema != api.Schema || rep.Status.Source != "socket" || len(rep.Runs) != 4 || rep.Runs[0].Run.ID != "r0" ||
		len(rep.Runs[0].Attempts) != 1 || rep.Runs[0].State != "complete" || rep.Amendments == nil || rep.Ledger == nil {
		t.Fatalf("report %+v", rep)
	}
	runs, err := c.Runs(ctx, "failed")
	if err != nil || len(runs) != 1 || runs[0].ID != "r2" {
		t.Fatalf("runs %+v, %v", runs, err)
	}
}

// runningCampaign opens a store in a new directory on a clock stopped at
// t0 and creates a running campaign "c" of runs in it, one at a time; it
// returns the directory, the store (closed at the test's end) and t0.
func runningCampaign(t *testing.T, runs []state.Run) (string, *state.Store, time.Time) {
	t.Helper()
	dir := t.TempDir()
	t0 := time.Date(2026, 7, 13, 12, 0, 0, 0, time.UTC)
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateCampaign(state.Campaign{ID: "c", State: state.CampaignRunning, RegimeConcurrency: 1}, runs); err != nil {
		t.Fatal(err)
	}
	return dir, s, t0
}

// TestETACountsDown: while an attempt runs, the ETA loses what it has
// run of its expected seconds, never more.
func TestETACountsDown(t *testing.T) {
	dir, s, t0 := runningCampaign(t, []state.Run{{ID: "a", ExpectedS: 100}, {ID: "b", Order: 1, ExpectedS: 50}})
	if _, err := s.NewAttempt("a", "", nil); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ after, want float64 }{{0, 150}, {30, 120}, {60, 90}, {500, 50}} {
		st, err := api.BuildStatus(s, dir, api.Controller{Alive: true}, t0.Add(time.Duration(tt.after)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if st.ETAS == nil || *st.ETAS != tt.want {
			t.Errorf("after %g s: eta %v, want %g", tt.after, st.ETAS, tt.want)
		}
	}
}
