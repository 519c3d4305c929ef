package state_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"warden/pkg/state"
)

// openStrict opens a strict store in a new directory and closes it at the end.
func openStrict(t *testing.T) (*state.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := state.Open(path, state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

// testRuns returns n runs named r000, r001, ... in plan order.
func testRuns(n int) []state.Run {
	runs := make([]state.Run, n)
	for i := range runs {
		runs[i] = state.Run{ID: fmt.Sprintf("r%03d", i), Order: n - i, Phase: "matrix",
			Kind: "saturation", Cell: fmt.Sprintf("P%02d/C00", i%11), GPUs: 1, ExpectedS: 600, Class: "others"}
	}
	return runs
}

// newCampaign opens a strict store holding a campaign with n runs.
func newCampaign(t *testing.T, n int) (*state.Store, string) {
	t.Helper()
	s, path := openStrict(t)
	c := state.Campaign{ID: "p3", ProtocolName: "opprof-phase3", ProtocolSHA256: "abc123",
		BudgetCapGPUHours: 16, PriorGPUHours: 3.964}
	if err := s.CreateCampaign(c, testRuns(n)); err != nil {
		t.Fatal(err)
	}
	return s, path
}

// step is one transition of a test path.
type step struct {
	to     state.AttemptState
	reason state.Reason
}

var happyPath = []step{{state.Reserved, ""}, {state.Preflight, ""}, {state.Starting, ""},
	{state.Ready, ""}, {state.Measuring, ""}, {state.Stopping, ""}, {state.Cleanup, ""},
	{state.Validating, ""}, {state.Complete, ""}}

// drive applies steps to attempt n of run.
func drive(t *testing.T, s *state.Store, run string, n int, steps []step) state.Attempt {
	t.Helper()
	var a state.Attempt
	for _, st := range steps {
		var err error
		a, err = s.Transition(run, n, st.to, st.reason, "test", nil, nil)
		if err != nil {
			t.Fatalf("drive %s/%d to %s: %v", run, n, st.to, err)
		}
	}
	return a
}

// violations returns the *state.Violation leaves of a (joined) error.
func violations(err error) []*state.Violation {
	var out []*state.Violation
	var walk func(error)
	walk = func(err error) {
		switch u := err.(type) {
		case *state.Violation:
			out = append(out, u)
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

func hasRule(err error, rule state.Rule) bool {
	for _, v := range violations(err) {
		if v.Rule == rule {
			return true
		}
	}
	return false
}

// rawUpdate writes to the closed database at path directly with bbolt.
func rawUpdate(t testing.TB, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5e9})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// injected checks s, closes it, writes inject to its database at path
// directly and opens it again in strict mode; it fails the test unless
// Check passed before and reports a violation of rule after. It returns
// the reopened store, closed when the test ends, and Check's error.
func injected(t *testing.T, s *state.Store, path string, rule state.Rule, inject func(tx *bolt.Tx) error) (*state.Store, error) {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatalf("before injection: %v", err)
	}
	s.Close()
	rawUpdate(t, path, inject)
	s, err := state.Open(path, state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	err = s.Check()
	if !errors.Is(err, state.ErrInvariant) || !hasRule(err, rule) {
		t.Fatalf("Check: %v\nwant a %s violation", err, rule)
	}
	return s, err
}

// wantStrictRefusal fails the test unless a strict write on the corrupt
// store s is refused with ErrInvariant and not committed.
func wantStrictRefusal(t *testing.T, s *state.Store) {
	t.Helper()
	before, _ := s.LastEventSeq()
	if _, err := s.AppendEvent(state.Event{Message: "x"}); !errors.Is(err, state.ErrInvariant) {
		t.Errorf("strict write on a corrupt database: %v, want ErrInvariant", err)
	}
	if after, _ := s.LastEventSeq(); after != before {
		t.Error("the refused strict write was committed")
	}
}

// The on-disk encoding, written independently of the package.
func seqKey(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func attemptKey(run string, n int) []byte { return fmt.Appendf(nil, "%s\x00%06d", run, n) }

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

func getJSON(t testing.TB, b *bolt.Bucket, key []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b.Get(key), v); err != nil {
		t.Fatalf("decode %q: %v", key, err)
	}
}
