package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"warden/pkg/atomicfile"
	"warden/pkg/loadgen"
)

// The rest of the seed's timeline in the SYNTHETIC loadgen-format files,
// for `controller validate warmup` and `controller validate recovery`:
// a warm-up segment first, and after the clean interval each profile
// window's segment followed by its recovery (the client waits
// --recovery-s after each window). Times are CLOCK_MONOTONIC from the
// client's real warm-up start, so that they join with the stand-in
// server's Layer-1 records; the segments themselves are nominal (the
// warm-up exactly --warmup-s, the clean segments after it). Completions
// lie on a lattice: one every clean-segment length / per-segment count,
// the same spacing in every recovery, so that a window of a whole number
// of gaps holds the same count wherever it lies.

type seedClientConfig struct {
	warmupCompletions int     // successes in the warm-up segment
	perSegment        int     // clean-segment successes; 0: the run's own, spread
	recoveryS         float64 // each recovery's length; 0: no recovery segments
	clock             *loadgen.Clock
	warmStart         time.Time // when the warm-up began (monotonic reading)
}

func addSeedClientFlags(cmd *cobra.Command, c *seedClientConfig) {
	f := cmd.Flags()
	f.IntVar(&c.warmupCompletions, "warmup-completions", 40, "with --loadgen-dir: successful completions the warm-up segment reports (0: misbehave, none)")
	f.IntVar(&c.perSegment, "records-per-segment", 0, "with --loadgen-dir: successes in each clean segment (0: the run's own, spread)")
	f.Float64Var(&c.recoveryS, "recovery-s", 0, "after each profile window wait this long: the fixed recovery (with --loadgen-dir: a recovery segment)")
}

func (c seedClientConfig) validate() error {
	if c.warmupCompletions < 0 || c.perSegment < 0 || c.recoveryS < 0 {
		return errors.New("--warmup-completions, --records-per-segment and --recovery-s must not be negative")
	}
	return nil
}

// start takes the clock and the warm-up's start.
func (c *seedClientConfig) start() error {
	clock, err := loadgen.NewClock()
	if err != nil {
		return err
	}
	c.clock, c.warmStart = clock, time.Now()
	return nil
}

// t0 is the warm-up start in CLOCK_MONOTONIC nanoseconds (a nominal 1 s
// before start).
func (c seedClientConfig) t0() int64 {
	if c.clock == nil {
		return 1_000_000_000
	}
	return c.clock.Mono(c.warmStart)
}

// segmentCount is the successes a clean segment holds.
func (c seedClientConfig) segmentCount(spread int) int {
	if c.perSegment > 0 {
		return c.perSegment
	}
	return spread
}

// seedRecords builds successes ending at ends in segment name.
func seedRecords(cfg clientConfig, name string, ends []int64, row *int) ([]byte, loadgen.SegmentSummary) {
	s := loadgen.SegmentSummary{Schema: loadgen.SegmentSchema, Name: name, ByClass: map[loadgen.Class]int{}}
	var lines []byte
	for _, end := range ends {
		rec := loadgen.Record{Schema: loadgen.RecordSchema, ID: fmt.Sprintf("standin-%d", *row), Row: *row, Segment: name, AdmitSegment: name,
			PlannedNS: end - 3000, SentNS: end - 2000, FirstTokenNS: end - 1000, EndNS: end,
			ExpectedInputTokens: cfg.promptWords, PromptTokens: cfg.promptWords, RequestedOutputTokens: cfg.maxTokens, OutputTokens: cfg.maxTokens,
			HTTPStatus: 200, Class: loadgen.Success}
		*row++
		b, _ := json.Marshal(rec)
		lines = append(append(lines, b...), '\n')
		s.Planned++
		s.Admitted++
		s.Ended++
		s.Succeeded++
		s.ByClass[loadgen.Success]++
		s.OutputTokens += cfg.maxTokens
	}
	return lines, s
}

// writeSeedSegment writes one segment's records and completes its summary.
func writeSeedSegment(cfg clientConfig, kind, name string, index int, start, end int64, ends []int64, row *int) (loadgen.SegmentSummary, error) {
	lines, s := seedRecords(cfg, name, ends, row)
	s.Kind, s.Index, s.StartMonoNS, s.EndMonoNS = kind, index, start, end
	s.Seconds = float64(end-start) / 1e9
	s.File = "requests/" + name + ".jsonl"
	if s.Seconds > 0 {
		s.CompletedRPS = float64(s.Succeeded) / s.Seconds
		s.OfferedRPS = float64(s.Admitted) / s.Seconds
	}
	if err := atomicfile.WriteFile(filepath.Join(cfg.loadgen.dir, s.File), lines, 0o644); err != nil {
		return s, fmt.Errorf("loadgen files: %w", err)
	}
	return s, nil
}

// lattice is the instants start + gap/2 + k*gap before end.
func lattice(start, end, gap int64) []int64 {
	var out []int64
	for t := start + gap/2; gap > 0 && t < end; t += gap {
		out = append(out, t)
	}
	return out
}

// withSeedSegments puts the warm-up segment before the clean segments and
// each profile window's segment and recovery after them; gap is the
// clean segments' spacing of successes.
func withSeedSegments(cfg clientConfig, clean []loadgen.SegmentSummary, windows []map[string]any, gap int64, row *int) ([]loadgen.SegmentSummary, error) {
	sc := cfg.seed
	t0 := sc.t0()
	warmEnd := t0 + int64(cfg.warmupS*1e9)
	var ends []int64
	for k := range sc.warmupCompletions {
		ends = append(ends, t0+int64(k+1)*(warmEnd-t0)/int64(sc.warmupCompletions+1))
	}
	warm, err := writeSeedSegment(cfg, "warmup", "warmup", 0, t0, warmEnd, ends, row)
	if err != nil {
		return nil, err
	}
	out := append([]loadgen.SegmentSummary{warm}, clean...)
	at := clean[len(clean)-1].EndMonoNS
	for i, w := range windows {
		stop := at
		if sc.clock != nil {
			if ns, ok := w["stop_return_mono_ns"].(int64); ok {
				stop = max(at, sc.clock.Mono(time.Unix(0, ns)))
			}
		}
		p, err := writeSeedSegment(cfg, "profile", fmt.Sprintf("profile-%d", i+1), i+1, at, stop, nil, row)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
		at = stop
		if sc.recoveryS <= 0 {
			continue
		}
		end := at + int64(sc.recoveryS*1e9)
		r, err := writeSeedSegment(cfg, "recovery", fmt.Sprintf("recovery-%d", i+1), i+1, at, end, lattice(at, end, gap), row)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		at = end
	}
	return out, nil
}
