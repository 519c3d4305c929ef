package api_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

const (
	fixtureRuns      = 10_000
	fixtureEvents    = 100_000
	fixtureLive      = 5 // the last runs, left measuring
	fixtureExpectedS = 900
	fixtureSlots     = 4
)

// fixture is the campaign directory both status benchmarks read. It is
// built once per test binary; TestMain removes it.
var fixture struct {
	once sync.Once
	dir  string // guarded by once
	err  error  // guarded by once
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" {
		_ = os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// statusFixture returns a campaign directory whose state.db holds
// fixtureRuns runs and fixtureEvents events, written through the public
// state API: every run has one attempt driven planned -> ... -> complete
// (10 events), except the last fixtureLive, left in measuring; campaign
// notes fill the log up to fixtureEvents.
func statusFixture(b *testing.B) string {
	b.Helper()
	fixture.once.Do(func() {
		start := time.Now()
		fixture.dir, fixture.err = os.MkdirTemp("", "status-bench-")
		if fixture.err == nil {
			fixture.err = buildFixture(fixture.dir)
		}
		b.Logf("fixture of %d runs and %d events built in %s", fixtureRuns, fixtureEvents, time.Since(start).Round(time.Millisecond))
	})
	if fixture.err != nil {
		b.Fatal(fixture.err)
	}
	return fixture.dir
}

func buildFixture(dir string) (err error) {
	s, err := state.Open(dirlayout.State(dir), state.Options{NoSync: true})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}()
	runs := make([]state.Run, fixtureRuns)
	for i := range runs {
		runs[i] = state.Run{ID: fmt.Sprintf("run-%05d", i), Order: i, Phase: "matrix", Kind: "saturation",
			Cell: fmt.Sprintf("P%02d/C%02d", i%11, i%5), GPUs: 1, ExpectedS: fixtureExpectedS, Class: "others"}
	}
	c := state.Campaign{ID: "bench", ProtocolName: "bench", ProtocolSHA256: "abc", Dir: dir,
		BudgetCapGPUHours: 1000, BudgetUnit: "GPU-hours", Regime: "four", RegimeConcurrency: fixtureSlots}
	if err := s.CreateCampaign(c, runs); err != nil {
		return err
	}
	happy := []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready,
		state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete}
	for i, r := range runs {
		slot := fmt.Sprintf("s%d", i%fixtureSlots)
		if _, err := s.NewAttempt(r.ID, "", func(a *state.Attempt) {
			a.Slot, a.GPUIDs, a.CPUs, a.Port = slot, []int{i % fixtureSlots}, "0-7", 8000+i%fixtureSlots
		}); err != nil {
			return err
		}
		steps := happy
		if i >= fixtureRuns-fixtureLive {
			steps = happy[:5] // up to measuring
		}
		for _, to := range steps {
			if _, err := s.Transition(r.ID, 1, to, "", "", nil, nil); err != nil {
				return err
			}
		}
	}
	for {
		last, err := s.LastEventSeq()
		if err != nil {
			return err
		}
		if last >= fixtureEvents {
			return s.Check()
		}
		if _, err := s.AppendEvent(state.Event{Message: "note"}); err != nil {
			return err
		}
	}
}

// checkStatus fails unless st describes the fixture.
func checkStatus(b *testing.B, st api.Status) {
	b.Helper()
	wantETA := float64(fixtureLive*fixtureExpectedS) / fixtureSlots
	if st.Runs.Total != fixtureRuns || st.Runs.ByState["complete"] != fixtureRuns-fixtureLive ||
		st.Runs.ByState["running"] != fixtureLive || len(st.Current) != fixtureLive ||
		st.LastEvent != fixtureEvents || st.ETAS == nil || *st.ETAS != wantETA || st.Budget.Unit != "GPU-hours" {
		b.Fatalf("status does not describe the fixture: runs %+v, %d current, last event %d, eta %v, unit %q",
			st.Runs, len(st.Current), st.LastEvent, st.ETAS, st.Budget.Unit)
	}
}

// reportMedian reports the median of the per-call durations in ms.
func reportMedian(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	median := d[len(d)/2]
	if len(d)%2 == 0 {
		median = (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	b.ReportMetric(float64(median)/float64(time.Millisecond), "ms-median")
}

// BenchmarkStatusSocket measures `ctlq status` against a live controller:
// one request through the Unix socket to the API handler, which builds the
// status from the open store.
func BenchmarkStatusSocket(b *testing.B) {
	dir := statusFixture(b)
	s, err := state.Open(dirlayout.State(dir), state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	serve(b, s, dir, time.Now)
	client := api.NewClient(dir, 5*time.Second)
	ctx := context.Background()

	var st api.Status
	var durations []time.Duration
	for b.Loop() {
		t0 := time.Now()
		st, err = client.Status(ctx)
		durations = append(durations, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	checkStatus(b, st)
	if st.Source != "socket" {
		b.Fatalf("source %q", st.Source)
	}
	reportMedian(b, durations)
}

// BenchmarkStatusReadOnly measures `ctlq status` when no controller
// answers: open state.db read-only, build the status, close.
func BenchmarkStatusReadOnly(b *testing.B) {
	dir := statusFixture(b)
	path := dirlayout.State(dir)

	var st api.Status
	var durations []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := state.OpenReadOnly(path, 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		st, err = api.BuildStatus(s, dir, api.Controller{}, time.Now())
		if cerr := s.Close(); err == nil {
			err = cerr
		}
		durations = append(durations, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	checkStatus(b, st)
	reportMedian(b, durations)
}
