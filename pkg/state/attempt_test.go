package state_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"warden/pkg/state"
)

// readStateFile decodes dir/state.json, failing on unknown fields.
func readStateFile(t *testing.T, dir string) state.StateFile {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, state.StateFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	var sf state.StateFile
	if err := dec.Decode(&sf); err != nil {
		t.Fatalf("state.json is not complete JSON: %v", err)
	}
	return sf
}

// wantStateFile builds the expected state.json content from the database.
func wantStateFile(t *testing.T, s *state.Store, run string, n int) state.StateFile {
	t.Helper()
	a, err := s.Attempt(run, n)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var events []state.Event
	for _, e := range all {
		if e.Run == run && e.Attempt == n {
			events = append(events, e)
		}
	}
	return state.StateFile{Campaign: "p3", Attempt: a, Events: events}
}

func TestHappyPath(t *testing.T) {
	s, _ := newCampaign(t, 2)
	dir := filepath.Join(t.TempDir(), "runs", "r000", "a1")
	a, err := s.NewAttempt("r000", dir, func(a *state.Attempt) {
		a.Slot, a.GPUIDs, a.CPUs, a.Port = "s0", []int{0}, "0-7", 8100
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.N != 1 || a.State != state.Planned || a.ProtocolSHA256 != "abc123" || a.Slot != "s0" {
		t.Fatalf("new attempt %+v", a)
	}
	if err := s.FlushStateFiles(); err != nil { // the directory and the file are made by the writer
		t.Fatal(err)
	}
	if !reflect.DeepEqual(readStateFile(t, dir), wantStateFile(t, s, "r000", 1)) {
		t.Error("state.json of the planned attempt differs from the database")
	}

	for _, st := range happyPath {
		fig := map[string]float64{"step": float64(len(st.to))}
		a, err = s.Transition("r000", 1, st.to, st.reason, "to "+string(st.to), fig, func(a *state.Attempt) error {
			if st.to == state.Starting {
				a.Procs = append(a.Procs, state.Proc{Role: "server", PID: 4242, StartTime: 99, BootID: "b", PGID: 4242,
					Argv: []string{"vllm", "serve"}, StartedAt: time.Unix(1, 0).UTC()})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// state.json follows every transition once the queued writes are
		// done; a terminal transition returns once its own is written.
		if a.State.Live() {
			if err := s.FlushStateFiles(); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := readStateFile(t, dir), wantStateFile(t, s, "r000", 1); !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s state.json = %+v\nwant %+v", st.to, got, want)
		}
	}
	if a.State != state.Complete || len(a.Procs) != 1 || len(a.EventSeqs) != 10 {
		t.Fatalf("final attempt %+v", a)
	}

	events, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		if i > 0 && e.Mono < events[i-1].Mono {
			t.Errorf("event %d: monotonic clock went back", e.Seq)
		}
	}
	// 1 campaign event, then the attempt: created + 9 transitions.
	if len(events) != 11 || events[10].To != string(state.Complete) || events[10].From != string(state.Validating) {
		t.Fatalf("events: %+v", events)
	}
	if last, _ := s.LastEventSeq(); last != 11 {
		t.Errorf("LastEventSeq = %d, want 11", last)
	}
	page, err := s.Events(4, 3)
	if err != nil || len(page) != 3 || page[0].Seq != 5 || page[2].Seq != 7 {
		t.Errorf("Events(4, 3) = %+v, %v", page, err)
	}
	r, err := s.Run("r000")
	if err != nil || !r.Done || r.Result != 1 || r.Attempts != 1 || r.State() != state.RunComplete {
		t.Errorf("run after completion: %+v, %v", r, err)
	}

	// state.json is 0644, complete, and alone in its directory.
	info, err := os.Stat(filepath.Join(dir, state.StateFileName))
	if err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("state.json mode %v (%v), want 0644", info.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("attempt directory holds %v, want state.json alone", entries)
	}

	// RewriteStateFile restores a lost file.
	if err := os.Remove(filepath.Join(dir, state.StateFileName)); err != nil {
		t.Fatal(err)
	}
	if err := s.RewriteStateFile("r000", 1); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(readStateFile(t, dir), wantStateFile(t, s, "r000", 1)) {
		t.Error("rewritten state.json differs from the database")
	}
}

func TestRetryAfterFailure(t *testing.T) {
	s, _ := newCampaign(t, 1)
	if _, err := s.NewAttempt("r000", "", nil); err != nil {
		t.Fatal(err)
	}
	drive(t, s, "r000", 1, []step{{state.Reserved, ""}, {state.Preflight, ""}, {state.Starting, ""},
		{state.Ready, ""}, {state.Stopping, state.ReasonServerExit}, {state.Cleanup, ""}})

	// A second attempt while the first is live is refused.
	if _, err := s.NewAttempt("r000", "", nil); !errors.Is(err, state.ErrLiveAttempt) {
		t.Fatalf("NewAttempt beside a live attempt: %v, want ErrLiveAttempt", err)
	}
	a1 := drive(t, s, "r000", 1, []step{{state.Failed, ""}})
	if a1.Reason != state.ReasonServerExit {
		t.Errorf("failed attempt reason %q, want the pending %q", a1.Reason, state.ReasonServerExit)
	}
	if r, _ := s.Run("r000"); r.State() != state.RunFailed || r.Done {
		t.Errorf("run after a failure: %+v", r)
	}

	a2, err := s.NewAttempt("r000", "", nil)
	if err != nil || a2.N != 2 {
		t.Fatalf("second attempt: %+v, %v", a2, err)
	}
	drive(t, s, "r000", 2, happyPath)
	attempts, err := s.Attempts("r000")
	if err != nil || len(attempts) != 2 || attempts[0].State != state.Failed || attempts[1].State != state.Complete {
		t.Fatalf("attempts: %+v, %v", attempts, err)
	}
	r, _ := s.Run("r000")
	if !r.Done || r.Result != 2 || r.Attempts != 2 {
		t.Errorf("run: %+v", r)
	}
	if _, err := s.NewAttempt("r000", "", nil); !errors.Is(err, state.ErrRunDone) {
		t.Errorf("NewAttempt on a done run: %v, want ErrRunDone", err)
	}
}

// TestSecondResultRefused: a run holds one result. The API cannot create an
// attempt beside or after a result, so the second attempt in validating is
// written raw; Transition still refuses to make it a result.
func TestSecondResultRefused(t *testing.T) {
	s, path := newCampaign(t, 1)
	if _, err := s.NewAttempt("r000", "", nil); err != nil {
		t.Fatal(err)
	}
	drive(t, s, "r000", 1, happyPath)
	if _, err := s.NewAttempt("r000", "", nil); !errors.Is(err, state.ErrRunDone) {
		t.Fatalf("NewAttempt on a done run: %v, want ErrRunDone", err)
	}
	s.Close()

	rawUpdate(t, path, func(tx *bolt.Tx) error {
		a := state.Attempt{RunID: "r000", N: 2, State: state.Validating}
		if err := putJSON(tx.Bucket([]byte("attempts")), attemptKey("r000", 2), a); err != nil {
			return err
		}
		var r state.Run
		getJSON(t, tx.Bucket([]byte("runs")), []byte("r000"), &r)
		r.Attempts, r.LastState = 2, state.Validating
		return putJSON(tx.Bucket([]byte("runs")), []byte("r000"), r)
	})
	s, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, to := range []state.AttemptState{state.Complete, state.Quarantined} {
		if _, err := s.Transition("r000", 2, to, reasonFor(to), "", nil, nil); !errors.Is(err, state.ErrRunDone) {
			t.Errorf("second result (%s): %v, want ErrRunDone", to, err)
		}
	}
	if a, _ := s.Attempt("r000", 2); a.State != state.Validating {
		t.Errorf("attempt 2 is %s, want validating", a.State)
	}
}

func TestUpdateAttempt(t *testing.T) {
	s, _ := newCampaign(t, 1)
	dir := filepath.Join(t.TempDir(), "a1")
	if _, err := s.NewAttempt("r000", dir, nil); err != nil {
		t.Fatal(err)
	}
	drive(t, s, "r000", 1, pathTo(state.Stopping))
	if err := s.FlushStateFiles(); err != nil {
		t.Fatal(err)
	}
	// The file is rewritten with mode 0644 whatever the old one had.
	if err := os.Chmod(filepath.Join(dir, state.StateFileName), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := s.LastEventSeq()
	sentAt := time.Date(2026, 7, 13, 10, 0, 0, 0, time.UTC)
	a, err := s.UpdateAttempt("r000", 1, func(a *state.Attempt) error {
		a.Signals = append(a.Signals, state.Signal{At: sentAt, Role: "server", Target: "pid", PID: 4242, Signal: "SIGTERM"})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := s.LastEventSeq(); after != before {
		t.Errorf("UpdateAttempt appended events %d..%d", before+1, after)
	}
	if len(a.Signals) != 1 || !a.Signals[0].At.Equal(sentAt) || a.State != state.Stopping {
		t.Errorf("attempt after update: %+v", a)
	}
	if err := s.FlushStateFiles(); err != nil {
		t.Fatal(err)
	}
	if sf := readStateFile(t, dir); len(sf.Attempt.Signals) != 1 || sf.Attempt.Signals[0].Signal != "SIGTERM" {
		t.Errorf("state.json does not hold the signal: %+v", sf.Attempt.Signals)
	}
	if info, err := os.Stat(filepath.Join(dir, state.StateFileName)); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("rewritten state.json mode %v (%v), want 0644", info.Mode(), err)
	}
	_, err = s.UpdateAttempt("r000", 1, func(a *state.Attempt) error {
		a.State = state.Complete
		return nil
	})
	if !errors.Is(err, state.ErrInvalid) {
		t.Errorf("UpdateAttempt changing the state: %v, want ErrInvalid", err)
	}
	if a, _ := s.Attempt("r000", 1); a.State != state.Stopping {
		t.Errorf("refused update changed the state to %s", a.State)
	}
	if _, err := s.UpdateAttempt("r000", 9, func(*state.Attempt) error { return nil }); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("UpdateAttempt of a missing attempt: %v, want ErrNotFound", err)
	}
}

// TestStateFileError: when state.json cannot be written the transition is
// still committed and the error says so: at once for a terminal
// transition, which waits for its file, and from FlushStateFiles or Sync
// (or the attempt's next change) for the others; the write-back
// errors Sync reports besides are driven in cmd/controller
// (TestEvidenceWriteErrorIsTheStorages).
func TestStateFileError(t *testing.T) {
	s, _ := newCampaign(t, 1)
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(blocker, "a1") // under a regular file: cannot be created
	if _, err := s.NewAttempt("r000", dir, nil); err != nil {
		t.Fatalf("NewAttempt: %v, want the attempt committed, its file queued", err)
	}
	if err := s.FlushStateFiles(); !errors.Is(err, state.ErrStateFile) {
		t.Fatalf("FlushStateFiles after NewAttempt: %v, want ErrStateFile", err)
	}
	a, err := s.Transition("r000", 1, state.Reserved, "", "", nil, nil)
	if (err != nil && !errors.Is(err, state.ErrStateFile)) || a.State != state.Reserved {
		t.Fatalf("Transition: %+v, %v; want the committed attempt", a, err)
	}
	if _, err := s.Transition("r000", 1, state.Preflight, "", "", nil, nil); err != nil && !errors.Is(err, state.ErrStateFile) {
		t.Fatal(err)
	}
	if err := s.Sync(); !errors.Is(err, state.ErrStateFile) {
		t.Fatalf("Sync: %v, want the queued write's ErrStateFile", err)
	}
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync with nothing queued on a healthy file system: %v", err)
	}
	if got, _ := s.Attempt("r000", 1); got.State != state.Preflight {
		t.Errorf("database holds %s, want preflight", got.State)
	}
	a, err = s.Transition("r000", 1, state.Interrupted, "", "", nil, nil)
	if !errors.Is(err, state.ErrStateFile) || a.State != state.Interrupted {
		t.Fatalf("terminal Transition: %+v, %v; want the committed attempt and ErrStateFile", a, err)
	}
}

func TestSummary(t *testing.T) {
	s, _ := newCampaign(t, 6)
	mustNew := func(run string) {
		t.Helper()
		if _, err := s.NewAttempt(run, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	mustNew("r000")
	drive(t, s, "r000", 1, happyPath) // complete
	mustNew("r001")
	drive(t, s, "r001", 1, pathTo(state.Quarantined)) // quarantined
	mustNew("r002")
	drive(t, s, "r002", 1, pathTo(state.Measuring)) // running
	mustNew("r003")
	drive(t, s, "r003", 1, pathTo(state.Failed)) // failed
	mustNew("r004")
	drive(t, s, "r004", 1, pathTo(state.Interrupted)) // pending
	// r005: no attempt, pending

	sum, err := s.Summary()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"complete": 1, "quarantined": 1, "running": 1, "failed": 1, "pending": 2}
	if sum.RunsTotal != 6 || !reflect.DeepEqual(sum.RunsByState, want) {
		t.Errorf("summary counts %d %v, want 6 %v", sum.RunsTotal, sum.RunsByState, want)
	}
	if len(sum.Live) != 1 || sum.Live[0].RunID != "r002" || sum.Live[0].State != state.Measuring {
		t.Errorf("live: %+v", sum.Live)
	}
	last, _ := s.LastEventSeq()
	if sum.LastEventSeq != last || sum.Campaign.ID != "p3" {
		t.Errorf("summary last event %d (want %d), campaign %q", sum.LastEventSeq, last, sum.Campaign.ID)
	}
	live, err := s.LiveAttempts()
	if err != nil || !reflect.DeepEqual(live, sum.Live) {
		t.Errorf("LiveAttempts = %+v, %v", live, err)
	}
	runs, err := s.Runs()
	if err != nil || len(runs) != 6 {
		t.Fatal(runs, err)
	}
	for i := 1; i < len(runs); i++ {
		if runs[i].Order < runs[i-1].Order {
			t.Errorf("Runs not sorted by order: %d after %d", runs[i].Order, runs[i-1].Order)
		}
	}
}

// TestConcurrentAttempts drives attempts from several goroutines while
// another reads summaries; the result is consistent and every state.json
// holds the final record.
func TestConcurrentAttempts(t *testing.T) {
	const workers = 4
	s, _ := newCampaign(t, workers)
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for ctx.Err() == nil {
			if _, err := s.Summary(); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := fmt.Sprintf("r%03d", i)
			if _, err := s.NewAttempt(run, filepath.Join(root, run), nil); err != nil {
				errs <- err
				return
			}
			for _, st := range happyPath {
				if _, err := s.Transition(run, 1, st.to, st.reason, "", nil, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	for i := range workers {
		run := fmt.Sprintf("r%03d", i)
		if got, want := readStateFile(t, filepath.Join(root, run)), wantStateFile(t, s, run, 1); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: state.json differs from the database", run)
		}
	}
	if last, _ := s.LastEventSeq(); last != 1+workers*10 {
		t.Errorf("%d events, want %d", last, 1+workers*10)
	}
}
