package state_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"warden/internal/testutil/testtmpfs"
	"warden/pkg/state"
)

// A lock wait that returns at all returned: the bound is only there so a
// hang fails the test instead of the suite.
const hangBound = 30 * time.Second

func TestOpenLocked(t *testing.T) {
	s, path := newCampaign(t, 1)

	start := time.Now()
	_, err := state.Open(path, state.Options{Timeout: 100 * time.Millisecond})
	if !errors.Is(err, state.ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second Open: %v, want ErrLocked naming %s", err, path)
	}
	if time.Since(start) > hangBound {
		t.Fatal("second Open waited far past its timeout")
	}
	// A read-only open needs a shared lock, which the writer's exclusive
	// lock excludes: it times out too.
	if _, err := state.OpenReadOnly(path, 100*time.Millisecond); !errors.Is(err, state.ErrLocked) {
		t.Fatalf("OpenReadOnly beside a writer: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Readers share the file; a writer waits for them.
	r1, err := state.OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := state.OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	defer r2.Close()
	if c, err := r2.Campaign(); err != nil || c.ID != "p3" {
		t.Errorf("read-only campaign: %+v, %v", c, err)
	}
	if err := r1.UpdateCampaign(func(*state.Campaign) error { return nil }); err == nil {
		t.Error("a read-only store accepted a write")
	}
	if _, err := state.Open(path, state.Options{Timeout: 100 * time.Millisecond}); !errors.Is(err, state.ErrLocked) {
		t.Errorf("Open beside readers: %v, want ErrLocked", err)
	}
}

func TestOpenReadOnlyMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if _, err := state.OpenReadOnly(path, time.Second); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenReadOnly of a missing file: %v, want ErrNotExist", err)
	}
}

func TestOpenCorrupt(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(t *testing.T, path string)
	}{
		{"truncated to half", func(t *testing.T, path string) {
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, info.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"meta pages overwritten", func(t *testing.T, path string) {
			garbage := make([]byte, 2*os.Getpagesize())
			for i := range garbage {
				garbage[i] = byte(i*7 + 3)
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(garbage, 0); err != nil {
				t.Fatal(err)
			}
		}},
		// The meta pages stay valid and the length right; bbolt panics on
		// the garbage. The read-only open after it shows the lock was released.
		{"pages past the meta pages overwritten", func(t *testing.T, path string) {
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			page := int64(os.Getpagesize())
			garbage := make([]byte, info.Size()-2*page)
			for i := range garbage {
				garbage[i] = 0xFF
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(garbage, 2*page); err != nil {
				t.Fatal(err)
			}
		}},
		{"a few bytes", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("not a database"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, path := newCampaign(t, 200)
			if _, err := s.NewAttempt("r000", "", nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			tt.corrupt(t, path)
			_, err := state.Open(path, state.Options{})
			if !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), path) ||
				!strings.Contains(err.Error(), "never repairs") {
				t.Errorf("Open: %v, want ErrCorrupt naming the path and what to do", err)
			}
			if _, err := state.OpenReadOnly(path, time.Second); !errors.Is(err, state.ErrCorrupt) {
				t.Errorf("OpenReadOnly: %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestOpenMissingBucket: a file whose buckets do not match the schema is
// reported, not repaired.
func TestOpenMissingBucket(t *testing.T) {
	s, path := newCampaign(t, 1)
	s.Close()
	rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("events")) })
	if _, err := state.Open(path, state.Options{}); !errors.Is(err, state.ErrCorrupt) {
		t.Errorf("Open without the events bucket: %v, want ErrCorrupt", err)
	}
}

func TestSchemaUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	// Version 0: a bbolt file without buckets.
	rawUpdate(t, path, func(tx *bolt.Tx) error { return nil })

	if _, err := state.OpenReadOnly(path, time.Second); !errors.Is(err, state.ErrSchemaTooOld) {
		t.Fatalf("OpenReadOnly of version 0: %v, want ErrSchemaTooOld", err)
	}
	s, err := state.Open(path, state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Error(err)
	}
	s.Close()

	var buckets []string
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		if v := string(tx.Bucket([]byte("meta")).Get([]byte("schema_version"))); v != "2" {
			t.Errorf("schema_version %q after upgrade, want 2", v)
		}
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			buckets = append(buckets, string(name))
			return nil
		})
	})
	want := "amendments attempts campaign events gates ledger live meta runs"
	if got := strings.Join(buckets, " "); got != want {
		t.Errorf("buckets %q, want %q", got, want)
	}

	// A newer version is refused, read-write and read-only.
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("3"))
	})
	if _, err := state.Open(path, state.Options{}); !errors.Is(err, state.ErrSchemaTooNew) {
		t.Errorf("Open of version 3: %v, want ErrSchemaTooNew", err)
	}
	if _, err := state.OpenReadOnly(path, time.Second); !errors.Is(err, state.ErrSchemaTooNew) {
		t.Errorf("OpenReadOnly of version 3: %v, want ErrSchemaTooNew", err)
	}
}

func TestCreateCampaign(t *testing.T) {
	s, _ := newCampaign(t, 3)
	c, err := s.Campaign()
	if err != nil {
		t.Fatal(err)
	}
	if c.State != state.CampaignRunning || c.ConsumedGPUSeconds != 3.964*3600 || c.CreatedAt.IsZero() {
		t.Errorf("campaign %+v", c)
	}
	ledger, err := s.Ledger()
	if err != nil || len(ledger) != 1 || ledger[0].Kind != state.LedgerPrior || ledger[0].GPUSeconds != 3.964*3600 {
		t.Errorf("ledger %+v, %v; want one prior entry", ledger, err)
	}
	if err := s.CreateCampaign(state.Campaign{ID: "again"}, nil); !errors.Is(err, state.ErrExists) {
		t.Errorf("second CreateCampaign: %v, want ErrExists", err)
	}
	events, _ := s.Events(0, 0)
	if len(events) != 1 || events[0].To != "running" || events[0].Run != "" {
		t.Errorf("events %+v, want one campaign event", events)
	}

	s2, _ := openStrict(t)
	bad := []state.Run{{ID: "a"}, {ID: "a"}}
	if err := s2.CreateCampaign(state.Campaign{ID: "x"}, bad); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("duplicate run ids: %v, want ErrInvalid", err)
	}
	if err := s2.CreateCampaign(state.Campaign{ID: "x"}, []state.Run{{ID: "a\x00b"}}); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("NUL in a run id: %v, want ErrInvalid", err)
	}
	if _, err := s2.Campaign(); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("refused campaign was stored: %v", err)
	}
}

func TestCampaignState(t *testing.T) {
	s, _ := newCampaign(t, 1)
	before, _ := s.LastEventSeq()
	beat := time.Date(2026, 7, 13, 12, 0, 0, 0, time.UTC)
	if err := s.UpdateCampaign(func(c *state.Campaign) error {
		c.Heartbeat, c.ControllerPID = beat, 1234
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if after, _ := s.LastEventSeq(); after != before {
		t.Error("a heartbeat appended an event")
	}
	if c, _ := s.Campaign(); !c.Heartbeat.Equal(beat) || c.ControllerPID != 1234 {
		t.Errorf("heartbeat not stored: %+v", c)
	}
	err := s.UpdateCampaign(func(c *state.Campaign) error {
		c.State = state.CampaignComplete
		return nil
	})
	if !errors.Is(err, state.ErrInvalid) {
		t.Errorf("UpdateCampaign changing the state: %v, want ErrInvalid", err)
	}

	figs := map[string]float64{"quarantined_fraction": 0.25}
	if err := s.SetCampaignState(state.CampaignStopped, "drain-quarantine-threshold", "5 of 20 runs", figs); err != nil {
		t.Fatal(err)
	}
	c, _ := s.Campaign()
	if c.State != state.CampaignStopped || c.StopReason != "drain-quarantine-threshold" || c.StopFigures["quarantined_fraction"] != 0.25 {
		t.Errorf("stopped campaign %+v", c)
	}
	last, _ := s.Events(before, 0)
	if len(last) != 1 || last[0].From != "running" || last[0].To != "stopped" || last[0].Reason != "drain-quarantine-threshold" {
		t.Errorf("stop event %+v", last)
	}
	var te *state.TransitionError
	if err := s.SetCampaignState(state.CampaignComplete, "", "", nil); !errors.As(err, &te) {
		t.Errorf("stopped -> complete: %v, want a *TransitionError", err)
	}
	if err := s.SetCampaignState(state.CampaignRunning, "", "resumed", nil); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Campaign(); c.StopReason != "" || c.StopFigures != nil {
		t.Errorf("resumed campaign keeps its stop: %+v", c)
	}
	if _, err := s.AppendEvent(state.Event{Message: "controller resumed after a crash"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvent(state.Event{Run: "r000", Message: "x"}); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("AppendEvent for a run: %v, want ErrInvalid", err)
	}
}

func TestLedger(t *testing.T) {
	s, _ := newCampaign(t, 1)
	for _, e := range []state.LedgerEntry{
		{Kind: state.LedgerReserve, Run: "r000", GPUSeconds: 1200},
		{Kind: state.LedgerCharge, Run: "r000", Attempt: 1, GPUSeconds: 700.5},
		{Kind: state.LedgerRelease, Run: "r000", GPUSeconds: 1200},
	} {
		if _, err := s.AddLedger(e); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := s.Campaign()
	if c.ConsumedGPUSeconds != 3.964*3600+700.5 || c.ReservedGPUSeconds != 0 {
		t.Errorf("totals consumed %g reserved %g", c.ConsumedGPUSeconds, c.ReservedGPUSeconds)
	}
	if _, err := s.AddLedger(state.LedgerEntry{Kind: state.LedgerRelease, GPUSeconds: 1}); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("release beyond the reservation: %v, want ErrInvalid", err)
	}
	if _, err := s.AddLedger(state.LedgerEntry{Kind: "refund", GPUSeconds: 1}); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("unknown kind: %v, want ErrInvalid", err)
	}
	entries, _ := s.Ledger()
	if len(entries) != 4 || entries[3].Seq != 4 || entries[3].Kind != state.LedgerRelease || entries[3].At.IsZero() {
		t.Errorf("ledger %+v", entries)
	}
}

func TestGatesAndAmendments(t *testing.T) {
	s, _ := newCampaign(t, 2)
	for _, g := range []state.GateVerdict{
		{Gate: "gpu-idle", Run: "r000", Attempt: 1, Verdict: state.VerdictPass},
		{Gate: "colocation", Verdict: state.VerdictFail, Figures: map[string]float64{"delta": 0.07}},
		{Gate: "gpu-idle", Run: "r001", Attempt: 1, Verdict: state.VerdictError, Detail: "nvml timeout"},
	} {
		if _, err := s.AddGateVerdict(g); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AddGateVerdict(state.GateVerdict{Gate: "x", Verdict: "maybe"}); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("unknown verdict: %v, want ErrInvalid", err)
	}
	all, _ := s.GateVerdicts("")
	one, _ := s.GateVerdicts("r001")
	if len(all) != 3 || len(one) != 1 || one[0].Seq != 3 || one[0].Detail != "nvml timeout" {
		t.Errorf("verdicts all=%+v r001=%+v", all, one)
	}
	for seq, want := range []int{3, 2, 1, 0, 0} {
		after, err := s.GateVerdictsAfter(uint64(seq))
		if err != nil || len(after) != want || (want > 0 && after[0].Seq != uint64(seq+1)) {
			t.Errorf("GateVerdictsAfter(%d) = %+v, %v; want the %d from %d on", seq, after, err, want, seq+1)
		}
	}
	var ix state.GateIndex
	if err := s.ReadGates(&ix); err != nil || ix.Seq != 3 || ix.Last["gpu-idle"] != state.VerdictError || ix.Detail["gpu-idle"] != "nvml timeout" || ix.Errors["gpu-idle"] != 1 || ix.Last["colocation"] != state.VerdictFail {
		t.Errorf("ReadGates = %+v, %v; want the last of three", ix, err)
	}
	if _, err := s.AddGateVerdict(state.GateVerdict{Gate: "gpu-idle", Run: "r001", Attempt: 2, Verdict: state.VerdictError}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadGates(&ix); err != nil || ix.Seq != 4 || ix.Detail["gpu-idle"] != "" || ix.Errors["gpu-idle"] != 2 || ix.Last["colocation"] != state.VerdictFail {
		t.Errorf("ReadGates after a fourth = %+v, %v; want its verdict added to the three", ix, err)
	}

	a := state.Amendment{ID: "A-P3-1", Date: "2026-07-10", Title: "co-location", Text: "...", ProtocolSHA256: "abc123"}
	if err := s.AddAmendment(a); err != nil {
		t.Fatal(err)
	}
	if err := s.AddAmendment(a); !errors.Is(err, state.ErrExists) {
		t.Errorf("duplicate amendment: %v, want ErrExists", err)
	}
	if err := s.AddAmendment(state.Amendment{ID: "A-P3-4", Title: "budget"}); err != nil {
		t.Fatal(err)
	}
	list, _ := s.Amendments()
	if len(list) != 2 || list[0].ID != "A-P3-1" || list[1].ID != "A-P3-4" || list[0].RegisteredAt.IsZero() {
		t.Errorf("amendments %+v", list)
	}
	att, err := s.NewAttempt("r000", "", nil)
	if err != nil || strings.Join(att.Amendments, ",") != "A-P3-1,A-P3-4" {
		t.Errorf("attempt amendments %v (%v), want both", att.Amendments, err)
	}
}

// TestCheckDetectsCorruption writes bad records with bbolt directly and
// expects Check to name each, and a strict store to refuse writes on top.
func TestCheckDetectsCorruption(t *testing.T) {
	tests := []struct {
		name   string
		inject func(t *testing.T, tx *bolt.Tx) error
		rule   state.Rule
	}{
		{"gap in events", func(t *testing.T, tx *bolt.Tx) error {
			b := tx.Bucket([]byte("events"))
			k, _ := b.Cursor().Last()
			next := binary.BigEndian.Uint64(k) + 2 // skips one
			return putJSON(b, seqKey(next), state.Event{Seq: next, From: "running", To: "running", Message: "injected"})
		}, state.RuleEventSeq},
		{"ledger total differs", func(t *testing.T, tx *bolt.Tx) error {
			b := tx.Bucket([]byte("campaign"))
			var c state.Campaign
			getJSON(t, b, []byte("campaign"), &c)
			c.ConsumedGPUSeconds += 100
			return putJSON(b, []byte("campaign"), c)
		}, state.RuleLedger},
		{"negative reservation", func(t *testing.T, tx *bolt.Tx) error {
			return putJSON(tx.Bucket([]byte("ledger")), seqKey(2),
				state.LedgerEntry{Seq: 2, Kind: state.LedgerRelease, GPUSeconds: 50})
		}, state.RuleLedger},
		{"two complete attempts", func(t *testing.T, tx *bolt.Tx) error {
			var a state.Attempt
			getJSON(t, tx.Bucket([]byte("attempts")), attemptKey("r000", 1), &a)
			a.N = 2
			if err := putJSON(tx.Bucket([]byte("attempts")), attemptKey("r000", 2), a); err != nil {
				return err
			}
			var r state.Run
			getJSON(t, tx.Bucket([]byte("runs")), []byte("r000"), &r)
			r.Attempts = 2
			return putJSON(tx.Bucket([]byte("runs")), []byte("r000"), r)
		}, state.RuleOneResult},
		{"run says not done", func(t *testing.T, tx *bolt.Tx) error {
			var r state.Run
			getJSON(t, tx.Bucket([]byte("runs")), []byte("r000"), &r)
			r.Done, r.Result = false, 0
			return putJSON(tx.Bucket([]byte("runs")), []byte("r000"), r)
		}, state.RuleRunFields},
		{"attempt state behind its events", func(t *testing.T, tx *bolt.Tx) error {
			var a state.Attempt
			getJSON(t, tx.Bucket([]byte("attempts")), attemptKey("r000", 1), &a)
			a.State = state.Validating
			return putJSON(tx.Bucket([]byte("attempts")), attemptKey("r000", 1), a)
		}, state.RuleEventChain},
		{"unknown attempt state", func(t *testing.T, tx *bolt.Tx) error {
			var a state.Attempt
			getJSON(t, tx.Bucket([]byte("attempts")), attemptKey("r000", 1), &a)
			a.State = "finished"
			return putJSON(tx.Bucket([]byte("attempts")), attemptKey("r000", 1), a)
		}, state.RuleAttemptState},
		{"attempt number gap", func(t *testing.T, tx *bolt.Tx) error {
			return putJSON(tx.Bucket([]byte("attempts")), attemptKey("r001", 3),
				state.Attempt{RunID: "r001", N: 3, State: state.Failed, Reason: state.ReasonOOM})
		}, state.RuleAttemptNumbers},
		{"undecodable event", func(t *testing.T, tx *bolt.Tx) error {
			return tx.Bucket([]byte("events")).Put(seqKey(1), []byte("{not json"))
		}, state.RuleRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, path := newCampaign(t, 2)
			if _, err := s.NewAttempt("r000", "", nil); err != nil {
				t.Fatal(err)
			}
			drive(t, s, "r000", 1, happyPath)
			if _, err := s.AddLedger(state.LedgerEntry{Kind: state.LedgerReserve, GPUSeconds: 10}); err != nil {
				t.Fatal(err)
			}
			s, err := injected(t, s, path, tt.rule, func(tx *bolt.Tx) error { return tt.inject(t, tx) })
			for _, v := range violations(err) {
				if !errors.Is(v, state.ErrInvariant) {
					t.Errorf("violation %v does not match ErrInvariant", v)
				}
			}
			wantStrictRefusal(t, s)
		})
	}
}

// A commit the file system refuses names the database file in its error,
// beside the operation; an operation the store refuses does not blame it.
func TestCommitErrorNamesTheDatabase(t *testing.T) {
	dir := testtmpfs.Mount(t, "4m")
	path := filepath.Join(dir, "state.db")
	s, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateCampaign(state.Campaign{ID: "c", BudgetCapGPUHours: 1}, testRuns(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddLedger(state.LedgerEntry{Kind: "reserve", GPUSeconds: -1}); err == nil || strings.Contains(err.Error(), path) {
		t.Fatalf("a refused entry: %v; want an error that does not name the database", err)
	}
	// fill the file system, then write until a commit needs a block
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 4<<20), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	note := strings.Repeat("n", 64<<10)
	for i := range 200 {
		_, err = s.AddLedger(state.LedgerEntry{Kind: "prior", GPUSeconds: 1, Note: note})
		if err != nil {
			break
		}
		if i == 199 {
			t.Fatal("200 commits of 64 KiB each on a full file system: none failed")
		}
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "commit to "+path) || !strings.HasPrefix(err.Error(), "add ledger entry prior: ") {
		t.Fatalf("commit on a full file system: %v; want ENOSPC naming %s", err, path)
	}
}
