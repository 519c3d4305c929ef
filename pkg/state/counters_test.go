package state_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"warden/pkg/state"
)

// scanSummary computes what Summary reports about the runs from a full
// read of the runs and attempts, the way the store did before it kept
// counters.
func scanSummary(t *testing.T, s *state.Store) (byState map[string]int, remaining float64, live []state.Attempt) {
	t.Helper()
	runs, err := s.Runs()
	if err != nil {
		t.Fatal(err)
	}
	byState = map[string]int{}
	for _, r := range runs {
		byState[string(r.State())]++
		if !r.Done && !r.Closed() { // frozen or not run: never to run
			remaining += r.ExpectedS
		}
		atts, err := s.Attempts(r.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range atts {
			if !a.State.Terminal() {
				live = append(live, a)
			}
		}
	}
	// Summary lists live attempts by run id; Runs sorts by plan order.
	slices.SortFunc(live, func(a, b state.Attempt) int { return strings.Compare(a.RunID, b.RunID) })
	return byState, remaining, live
}

// assertSummaryMatchesScan compares Summary and LiveAttempts with a scan.
func assertSummaryMatchesScan(t *testing.T, s *state.Store, when string) {
	t.Helper()
	byState, remaining, live := scanSummary(t, s)
	sum, err := s.Summary()
	if err != nil {
		t.Fatalf("%s: Summary: %v", when, err)
	}
	total := 0
	for _, n := range byState {
		total += n
	}
	if sum.RunsTotal != total || !reflect.DeepEqual(sum.RunsByState, byState) {
		t.Errorf("%s: summary counts %d %v, the runs say %d %v", when, sum.RunsTotal, sum.RunsByState, total, byState)
	}
	if math.Abs(sum.RemainingExpectedS-remaining) > 1e-6 {
		t.Errorf("%s: summary remaining %.9f s, the runs say %.9f s", when, sum.RemainingExpectedS, remaining)
	}
	if len(sum.Live) != len(live) || (len(live) > 0 && !reflect.DeepEqual(sum.Live, live)) {
		t.Errorf("%s: summary live %v, the attempts say %v", when, liveNames(sum.Live), liveNames(live))
	}
	got, err := s.LiveAttempts()
	if err != nil || !reflect.DeepEqual(got, sum.Live) {
		t.Errorf("%s: LiveAttempts %v, %v; Summary.Live %v", when, liveNames(got), err, liveNames(sum.Live))
	}
}

func liveNames(atts []state.Attempt) []string {
	var out []string
	for _, a := range atts {
		out = append(out, fmt.Sprintf("%s/%d:%s", a.RunID, a.N, a.State))
	}
	return out
}

// TestSummaryFollowsEveryChange drives runs through every kind of path,
// with expected seconds that are not whole numbers, and compares the
// summary with a full scan after every write.
func TestSummaryFollowsEveryChange(t *testing.T) {
	s, _ := openStrict(t)
	runs := testRuns(8)
	for i := range runs {
		runs[i].ExpectedS = 100.1 + float64(i)/3
	}
	if err := s.CreateCampaign(state.Campaign{ID: "c"}, runs); err != nil {
		t.Fatal(err)
	}
	assertSummaryMatchesScan(t, s, "after CreateCampaign")

	// Each run's attempts, each ending in the given state.
	plans := map[string][]state.AttemptState{
		"r000": {state.Complete},
		"r001": {state.Quarantined},
		"r002": {state.Failed, state.Interrupted, state.Complete},
		"r003": {state.Interrupted},
		"r004": {state.Failed},
		"r005": {state.Failed, state.Measuring},
		"r006": {state.Planned},
		// r007: no attempt
	}
	for _, run := range []string{"r000", "r001", "r002", "r003", "r004", "r005", "r006"} {
		for n, end := range plans[run] {
			if _, err := s.NewAttempt(run, "", nil); err != nil {
				t.Fatal(err)
			}
			assertSummaryMatchesScan(t, s, fmt.Sprintf("%s attempt %d created", run, n+1))
			for _, st := range pathTo(end) {
				if _, err := s.Transition(run, n+1, st.to, st.reason, "", nil, nil); err != nil {
					t.Fatalf("%s attempt %d to %s: %v", run, n+1, st.to, err)
				}
				assertSummaryMatchesScan(t, s, fmt.Sprintf("%s attempt %d to %s", run, n+1, st.to))
			}
		}
	}
	// A refused transition changes nothing.
	if _, err := s.Transition("r000", 1, state.Failed, state.ReasonOOM, "", nil, nil); err == nil {
		t.Fatal("a complete attempt moved to failed")
	}
	assertSummaryMatchesScan(t, s, "after a refused transition")

	sum, err := s.Summary()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"complete": 2, "quarantined": 1, "pending": 2, "failed": 1, "running": 2}
	if !reflect.DeepEqual(sum.RunsByState, want) || sum.RunsTotal != 8 {
		t.Errorf("final counts %d %v, want 8 %v", sum.RunsTotal, sum.RunsByState, want)
	}
	var remaining float64
	for _, i := range []int{3, 4, 5, 6, 7} { // the runs not done
		remaining += runs[i].ExpectedS
	}
	if math.Abs(sum.RemainingExpectedS-remaining) > 1e-6 {
		t.Errorf("remaining %.9f s, want %.9f s", sum.RemainingExpectedS, remaining)
	}
	if got := liveNames(sum.Live); !reflect.DeepEqual(got, []string{"r005/2:measuring", "r006/1:planned"}) {
		t.Errorf("live %v", got)
	}
	if err := s.Check(); err != nil {
		t.Error(err)
	}
}

// downgradeToV1 turns the closed database at path into what schema
// version 1 wrote: no counters record, no live index, version 1.
func downgradeToV1(t testing.TB, path string) {
	t.Helper()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("campaign")).Delete([]byte("counters")); err != nil {
			return err
		}
		if err := tx.DeleteBucket([]byte("live")); err != nil {
			return err
		}
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("1"))
	})
}

// TestSchemaUpgradeFrom1 opens version 1 files: read-only refuses them,
// read-write computes the counters and the live index, and the summary is
// the one the store had before the downgrade.
func TestSchemaUpgradeFrom1(t *testing.T) {
	t.Run("campaign", func(t *testing.T) {
		s, path := newCampaign(t, 5)
		for run, end := range map[string]state.AttemptState{"r000": state.Complete, "r001": state.Failed,
			"r002": state.Measuring, "r003": state.Reserved} {
			if _, err := s.NewAttempt(run, "", nil); err != nil {
				t.Fatal(err)
			}
			drive(t, s, run, 1, pathTo(end))
		}
		before, err := s.Summary()
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		downgradeToV1(t, path)

		if _, err := state.OpenReadOnly(path, time.Second); !errors.Is(err, state.ErrSchemaTooOld) {
			t.Fatalf("OpenReadOnly of version 1: %v, want ErrSchemaTooOld", err)
		}
		s, err = state.Open(path, state.Options{Strict: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Check(); err != nil {
			t.Fatalf("after the upgrade: %v", err)
		}
		after, err := s.Summary()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(after, before) {
			t.Errorf("summary after the upgrade\n%+v\nbefore the downgrade\n%+v", after, before)
		}
		if after.RemainingExpectedS != 4*600 || len(after.Live) != 2 {
			t.Errorf("upgraded summary: remaining %g s, live %v", after.RemainingExpectedS, liveNames(after.Live))
		}
		// The upgraded records are kept current (strict mode checks each write).
		drive(t, s, "r002", 1, pathTo(state.Complete)[len(pathTo(state.Measuring)):])
		if _, err := s.Transition("r003", 1, state.Interrupted, "", "", nil, nil); err != nil {
			t.Fatal(err)
		}
		assertSummaryMatchesScan(t, s, "after the upgrade")
		if sum, _ := s.Summary(); len(sum.Live) != 0 || sum.RunsByState["complete"] != 2 {
			t.Errorf("summary %+v", sum)
		}
	})
	t.Run("no campaign", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		s, err := state.Open(path, state.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket([]byte("live")); err != nil {
				return err
			}
			return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("1"))
		})
		s, err = state.Open(path, state.Options{Strict: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Summary(); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("Summary without a campaign: %v, want ErrNotFound", err)
		}
		if err := s.CreateCampaign(state.Campaign{ID: "c"}, testRuns(2)); err != nil {
			t.Fatal(err)
		}
		assertSummaryMatchesScan(t, s, "campaign created after the upgrade")
	})
}

// TestCheckDetectsCounterMismatch writes counters and live index entries
// that disagree with the runs and attempts, with bbolt directly, and
// expects Check to report the rule and a strict store to refuse writes.
func TestCheckDetectsCounterMismatch(t *testing.T) {
	editCounters := func(t *testing.T, tx *bolt.Tx, edit func(c map[string]any)) error {
		b := tx.Bucket([]byte("campaign"))
		var c map[string]any
		getJSON(t, b, []byte("counters"), &c)
		edit(c)
		return putJSON(b, []byte("counters"), c)
	}
	tests := []struct {
		name   string
		inject func(t *testing.T, tx *bolt.Tx) error
		rule   state.Rule
		// summary is what Summary then returns: "ok" or "violation".
		summary string
	}{
		{"a run counted in the wrong state", func(t *testing.T, tx *bolt.Tx) error {
			return editCounters(t, tx, func(c map[string]any) {
				by := c["runs_by_state"].(map[string]any)
				by["pending"] = by["pending"].(float64) - 1
				by["failed"] = 1
			})
		}, state.RuleCounters, "ok"},
		{"a run missing from the counts", func(t *testing.T, tx *bolt.Tx) error {
			return editCounters(t, tx, func(c map[string]any) {
				by := c["runs_by_state"].(map[string]any)
				by["complete"] = by["complete"].(float64) - 1
			})
		}, state.RuleCounters, "ok"},
		{"remaining seconds off", func(t *testing.T, tx *bolt.Tx) error {
			return editCounters(t, tx, func(c map[string]any) {
				c["remaining_expected_s"] = c["remaining_expected_s"].(float64) + 0.01
			})
		}, state.RuleCounters, "ok"},
		{"counters record missing", func(t *testing.T, tx *bolt.Tx) error {
			return tx.Bucket([]byte("campaign")).Delete([]byte("counters"))
		}, state.RuleCounters, "violation"},
		{"live attempt missing from the index", func(t *testing.T, tx *bolt.Tx) error {
			return tx.Bucket([]byte("live")).Delete(attemptKey("r001", 1))
		}, state.RuleLiveIndex, "ok"},
		{"terminal attempt in the index", func(t *testing.T, tx *bolt.Tx) error {
			return tx.Bucket([]byte("live")).Put(attemptKey("r000", 1), []byte{})
		}, state.RuleLiveIndex, "ok"},
		{"index names no attempt", func(t *testing.T, tx *bolt.Tx) error {
			return tx.Bucket([]byte("live")).Put(attemptKey("r002", 1), []byte{})
		}, state.RuleLiveIndex, "violation"},
		{"index entry with a value", func(t *testing.T, tx *bolt.Tx) error {
			return tx.Bucket([]byte("live")).Put(attemptKey("r001", 1), []byte("x"))
		}, state.RuleLiveIndex, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, path := newCampaign(t, 3)
			for _, run := range []string{"r000", "r001"} {
				if _, err := s.NewAttempt(run, "", nil); err != nil {
					t.Fatal(err)
				}
			}
			drive(t, s, "r000", 1, happyPath)
			drive(t, s, "r001", 1, pathTo(state.Measuring))
			s, err := injected(t, s, path, tt.rule, func(tx *bolt.Tx) error { return tt.inject(t, tx) })
			for _, v := range violations(err) {
				if v.Rule != tt.rule {
					t.Errorf("also reported %v; only %s was injected", v, tt.rule)
				}
			}
			_, err = s.Summary()
			switch tt.summary {
			case "ok":
				if err != nil {
					t.Errorf("Summary: %v; it reads the derived records as they are", err)
				}
			case "violation":
				if !errors.Is(err, state.ErrInvariant) || !hasRule(err, tt.rule) {
					t.Errorf("Summary: %v, want a %s violation", err, tt.rule)
				}
			}
			wantStrictRefusal(t, s)
		})
	}
}

// TestCampaignBudgetUnitAndConcurrency: both are recorded at creation,
// changed through UpdateCampaign and read back by Summary; a negative
// concurrency is refused.
func TestCampaignBudgetUnitAndConcurrency(t *testing.T) {
	s, path := openStrict(t)
	if err := s.CreateCampaign(state.Campaign{ID: "c", RegimeConcurrency: -1}, testRuns(1)); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("negative concurrency at creation: %v, want ErrInvalid", err)
	}
	if err := s.CreateCampaign(state.Campaign{ID: "c", BudgetUnit: "H200-hours", RegimeConcurrency: 2}, testRuns(1)); err != nil {
		t.Fatal(err)
	}
	if sum, err := s.Summary(); err != nil || sum.Campaign.BudgetUnit != "H200-hours" || sum.Campaign.RegimeConcurrency != 2 {
		t.Fatalf("after creation: %+v, %v", sum.Campaign, err)
	}
	err := s.UpdateCampaign(func(c *state.Campaign) error {
		c.BudgetUnit, c.RegimeConcurrency = "GPU-hours", 4
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.UpdateCampaign(func(c *state.Campaign) error {
		c.RegimeConcurrency = -3
		return nil
	})
	if !errors.Is(err, state.ErrInvalid) {
		t.Errorf("negative concurrency through UpdateCampaign: %v, want ErrInvalid", err)
	}
	s.Close()

	r, err := state.OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sum, err := r.Summary()
	if err != nil || sum.Campaign.BudgetUnit != "GPU-hours" || sum.Campaign.RegimeConcurrency != 4 {
		t.Errorf("after UpdateCampaign: %+v, %v", sum.Campaign, err)
	}
	// The JSON names are part of the file format.
	var raw string
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		raw = string(tx.Bucket([]byte("campaign")).Get([]byte("campaign")))
		return nil
	})
	if !strings.Contains(raw, `"budget_unit":"GPU-hours"`) || !strings.Contains(raw, `"regime_concurrency":4`) {
		t.Errorf("campaign record %s", raw)
	}
}

// TestNoSync: a store opened with NoSync records and reads back like any
// other, and the file opens again after Close.
func TestNoSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := state.Open(path, state.Options{NoSync: true, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateCampaign(state.Campaign{ID: "c"}, testRuns(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewAttempt("r001", "", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := state.OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	sum, err := r.Summary()
	if err != nil || sum.RunsByState["running"] != 1 || sum.RunsByState["pending"] != 2 || len(sum.Live) != 1 {
		t.Errorf("summary after reopening: %+v, %v", sum, err)
	}
}

// TestSchemaUpgradeV1Fixture opens testdata/v1-campaign.db, written by the
// store at schema version 1: a campaign of seven runs (r000 complete, r001
// quarantined, r002 measuring, r003 failed, r004 interrupted, r005 failed
// then a second attempt in preflight, r006 without an attempt; ExpectedS
// 600 + 0.5*i), with ledger entries, a gate verdict and an amendment.
func TestSchemaUpgradeV1Fixture(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "v1-campaign.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := state.OpenReadOnly(path, time.Second); !errors.Is(err, state.ErrSchemaTooOld) {
		t.Fatalf("OpenReadOnly of the version 1 fixture: %v, want ErrSchemaTooOld", err)
	}
	s, err := state.Open(path, state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	sum, err := s.Summary()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"complete": 1, "quarantined": 1, "running": 2, "failed": 1, "pending": 2}
	if sum.Campaign.ID != "v1" || sum.RunsTotal != 7 || !reflect.DeepEqual(sum.RunsByState, want) {
		t.Errorf("summary %q: %d runs %v, want v1: 7 %v", sum.Campaign.ID, sum.RunsTotal, sum.RunsByState, want)
	}
	if wantS := 601 + 601.5 + 602 + 602.5 + 603; math.Abs(sum.RemainingExpectedS-wantS) > 1e-9 {
		t.Errorf("remaining %g s, want %g", sum.RemainingExpectedS, wantS)
	}
	if got := liveNames(sum.Live); !reflect.DeepEqual(got, []string{"r002/1:measuring", "r005/2:preflight"}) {
		t.Errorf("live %v", got)
	}
	if sum.Campaign.BudgetUnit != "" || sum.Campaign.RegimeConcurrency != 0 {
		t.Errorf("fields version 1 did not have: unit %q, concurrency %d", sum.Campaign.BudgetUnit, sum.Campaign.RegimeConcurrency)
	}
	assertSummaryMatchesScan(t, s, "upgraded fixture")

	// The upgraded file is kept current.
	drive(t, s, "r002", 1, pathTo(state.Complete)[len(pathTo(state.Measuring)):])
	drive(t, s, "r005", 2, []step{{state.Failed, state.ReasonGPUNotIdle}})
	assertSummaryMatchesScan(t, s, "after driving the upgraded fixture")
	s.Close()
	r, err := state.OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatalf("read-only open after the upgrade: %v", err)
	}
	defer r.Close()
	if sum, err := r.Summary(); err != nil || len(sum.Live) != 0 || sum.RunsByState["complete"] != 2 {
		t.Errorf("read-only summary %+v, %v", sum, err)
	}
}
