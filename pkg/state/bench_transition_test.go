package state_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"warden/pkg/state"
)

// BenchmarkAttemptLifecycle measures what the records of one trivial
// attempt cost on a real file, every commit fsynced: a new attempt and its
// nine transitions to complete, on a campaign of b.N runs.
func BenchmarkAttemptLifecycle(b *testing.B) {
	b.Run("fsynced", func(b *testing.B) { benchLifecycle(b, state.Options{}) })
	b.Run("nosync", func(b *testing.B) { benchLifecycle(b, state.Options{NoSync: true}) })
}

func benchLifecycle(b *testing.B, opts state.Options) {
	dir := b.TempDir()
	s, err := state.Open(filepath.Join(dir, "state.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	runs := make([]state.Run, b.N)
	for i := range runs {
		runs[i] = state.Run{ID: fmt.Sprintf("r%06d", i), Order: i, Phase: "all", Kind: "smoke", Cell: "c", GPUs: 1, ExpectedS: 1, Class: "c"}
	}
	if err := s.CreateCampaign(state.Campaign{ID: "bench", Dir: dir, ProtocolSHA256: "abc"}, runs); err != nil {
		b.Fatal(err)
	}
	path := []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring,
		state.Stopping, state.Cleanup, state.Validating, state.Complete}
	b.ResetTimer()
	for i := range b.N {
		id := runs[i].ID
		if _, err := s.NewAttempt(id, "", nil); err != nil {
			b.Fatal(err)
		}
		for _, to := range path {
			if _, err := s.Transition(id, 1, to, "", "", nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*(1+len(path))), "us/commit")
}
