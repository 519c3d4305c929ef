package watch

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
	"warden/protocols"
)

func at(s int) time.Time { return time.Date(2026, 11, 30, 12, 0, s, 0, time.Local) }

// storeSource is a Source over a campaign's database, as ctlq reads one
// when no controller answers.
type storeSource struct{ s *state.Store }

func (s storeSource) Status() (api.Status, error) {
	st, err := api.BuildStatus(s.s, "", api.Controller{}, at(30))
	st.Source = "database"
	return st, err
}
func (s storeSource) Runs(context.Context) ([]api.RunBrief, error) { return api.BuildRuns(s.s, "") }
func (s storeSource) Events(_ context.Context, after uint64, limit int) ([]state.Event, error) {
	return s.s.Events(after, limit)
}
func (s storeSource) Close() { s.s.Close() }

// TestWatchPlain: the plain view of a campaign no controller runs is one
// line, and the watch ends at once with the campaign's status.
func TestWatchPlain(t *testing.T) {
	dir := t.TempDir()
	s, err := dirlayout.OpenStore(dir, state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	runs := []state.Run{{ID: "a", GPUs: 1, ExpectedS: 10}, {ID: "b", Order: 1, GPUs: 1, ExpectedS: 10}}
	if err := s.CreateCampaign(state.Campaign{ID: "t-1", Dir: dir, CreatedAt: at(0), State: state.CampaignRunning, BudgetCapGPUHours: 4, RegimeConcurrency: 1}, runs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewAttempt("a", "", nil); err != nil {
		t.Fatal(err)
	}
	for _, to := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete} {
		if _, err := s.Transition("a", 1, to, "", "", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetCampaignState(state.CampaignStopped, "gpu-not-idle", "x", nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	opens := 0
	plan := &protocols.Plan{Runs: []protocols.Run{{ID: "a", Measured: true}, {ID: "b", Measured: true}}, Slots: []protocols.SlotInfo{{Name: "gpu0"}}}
	w := NewWatcher(dir, plan, func() (Source, error) {
		opens++
		st, err := dirlayout.OpenStoreReadOnly(dir, time.Second)
		if err != nil {
			return nil, err
		}
		return storeSource{st}, nil
	})
	var b bytes.Buffer
	sn, err := w.Plain(&b, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	line := b.String()
	if i := strings.IndexByte(line, ' '); i > 0 {
		line = line[i+1:] // after the time of day
	}
	if want := "stopped (gpu-not-idle); runs 1/2 done, measured 1/2; budget 0.000 charged + 0.000 reserved of 4.000; controller not running\n"; line != want {
		t.Fatalf("plain line %q, want %q", line, want)
	}
	if !sn.Ended || sn.Status.Campaign.State != "stopped" || opens != 1 {
		t.Fatalf("snapshot ended %v, state %s, %d looks", sn.Ended, sn.Status.Campaign.State, opens)
	}
	// a look that cannot be made ends the watch with its error
	w = NewWatcher(dir, nil, func() (Source, error) { return nil, os.ErrPermission })
	if _, err := w.pollOnce(); err != os.ErrPermission {
		t.Fatalf("a look with no source = %v", err)
	}
}
