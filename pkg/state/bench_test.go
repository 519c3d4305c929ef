package state_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"warden/pkg/state"
)

const (
	benchRuns     = 10_000
	benchEvents   = 100_000
	benchComplete = 9_500 // runs with a complete attempt (10 events each)
	benchLive     = 20    // then runs measuring (6 events each)
	benchFailed   = 80    // then runs with a failed attempt (2 events each)
)

// buildBenchDB writes a campaign of benchRuns runs and benchEvents events,
// in batched transactions written with bbolt directly, as schema version 1
// (without counters or live index); opening it read-write upgrades it, and
// the store must then find it consistent.
func buildBenchDB(b *testing.B) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "state.db")
	s, err := state.Open(path, state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	runs := make([]state.Run, benchRuns)
	for i := range runs {
		runs[i] = state.Run{ID: fmt.Sprintf("run-%05d", i), Order: i, Phase: "matrix", Kind: "saturation",
			Cell: fmt.Sprintf("P%02d/C%02d", i%11, i%5), GPUs: 1, ExpectedS: 900, Class: "others"}
	}
	if err := s.CreateCampaign(state.Campaign{ID: "bench", ProtocolSHA256: "abc"}, runs); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}

	happy := []state.AttemptState{state.Planned, state.Reserved, state.Preflight, state.Starting,
		state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete}
	t0 := time.Date(2026, 7, 13, 0, 0, 0, 0, time.UTC)
	seq := uint64(1) // the campaign event
	const batch = 500
	for lo := 0; lo < benchRuns; lo += batch {
		rawUpdate(b, path, func(tx *bolt.Tx) error {
			rb, ab, eb := tx.Bucket([]byte("runs")), tx.Bucket([]byte("attempts")), tx.Bucket([]byte("events"))
			for i := lo; i < lo+batch; i++ {
				r := runs[i]
				var states []state.AttemptState
				a := state.Attempt{RunID: r.ID, N: 1, CreatedAt: t0, UpdatedAt: t0, ProtocolSHA256: "abc",
					GPUIDs: []int{i % 8}, CPUs: "0-7", Port: 8000 + i%8}
				switch {
				case i < benchComplete:
					states = happy
				case i < benchComplete+benchLive:
					states = happy[:6]
				case i < benchComplete+benchLive+benchFailed:
					states = []state.AttemptState{state.Planned, state.Failed}
					a.Reason = state.ReasonGPUNotIdle
				default:
					continue // pending: no attempt
				}
				from := ""
				for _, st := range states {
					seq++
					e := state.Event{Seq: seq, Wall: t0, Run: r.ID, Attempt: 1, From: from, To: string(st)}
					if err := putJSON(eb, seqKey(seq), e); err != nil {
						return err
					}
					a.EventSeqs = append(a.EventSeqs, seq)
					from = string(st)
				}
				a.State = states[len(states)-1]
				r.Attempts, r.LastState = 1, a.State
				if a.State == state.Complete {
					r.Done, r.Result = true, 1
				}
				if err := putJSON(ab, attemptKey(r.ID, 1), a); err != nil {
					return err
				}
				if err := putJSON(rb, []byte(r.ID), r); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// Campaign notes fill the log up to benchEvents.
	for seq < benchEvents {
		rawUpdate(b, path, func(tx *bolt.Tx) error {
			eb := tx.Bucket([]byte("events"))
			for n := 0; n < 10_000 && seq < benchEvents; n++ {
				seq++
				e := state.Event{Seq: seq, Wall: t0, From: "running", To: "running", Message: "note"}
				if err := putJSON(eb, seqKey(seq), e); err != nil {
					return err
				}
			}
			return nil
		})
	}

	downgradeToV1(b, path)
	if s, err = state.Open(path, state.Options{}); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}

	s, err = state.OpenReadOnly(path, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		b.Fatalf("the built database is inconsistent: %v", err)
	}
	return path
}

// BenchmarkSummary10k measures what a status query costs on a dead
// campaign of 10,000 runs and 100,000 events: open read-only, read the
// campaign and its counters, read the live attempts.
func BenchmarkSummary10k(b *testing.B) {
	path := buildBenchDB(b)
	info, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	var sum state.Summary
	b.ResetTimer()
	for b.Loop() {
		s, err := state.OpenReadOnly(path, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		sum, err = s.Summary()
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if sum.RunsTotal != benchRuns || sum.LastEventSeq != benchEvents || len(sum.Live) != benchLive ||
		sum.RunsByState["complete"] != benchComplete || sum.RunsByState["failed"] != benchFailed ||
		sum.RemainingExpectedS != (benchRuns-benchComplete)*900 {
		b.Fatalf("summary %d runs, %v, %d live, last event %d", sum.RunsTotal, sum.RunsByState, len(sum.Live), sum.LastEventSeq)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/summary")
	b.ReportMetric(float64(sum.RunsTotal), "runs")
	b.ReportMetric(float64(sum.LastEventSeq), "events")
	b.ReportMetric(float64(info.Size())/(1<<20), "db_MiB")
}

// BenchmarkRuns10k measures the runner's read of every run before each
// decision, on the campaign of 10,000 runs, once they were read before
// (what changed since is decoded again; here nothing did).
func BenchmarkRuns10k(b *testing.B) {
	s, err := state.OpenReadOnly(buildBenchDB(b), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Runs(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		runs, err := s.Runs()
		if err != nil || len(runs) != benchRuns {
			b.Fatalf("%d runs, %v", len(runs), err)
		}
	}
}
