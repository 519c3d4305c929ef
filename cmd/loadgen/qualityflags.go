package main

import (
	"fmt"
	"math"
	"os"

	"github.com/spf13/cobra"

	"warden/pkg/loadgen"
)

// qualityFlags are the flags of "loadgen run" for the quality pass after
// the drain (docs/loadgen.md, "The quality pass").
type qualityFlags struct {
	rows       int
	dir        string
	lengthDiff int64
	relRMS     float64
}

func bindQualityFlags(cmd *cobra.Command, f *qualityFlags) {
	fl := cmd.Flags()
	fl.IntVar(&f.rows, "quality-rows", 0, "after the drain, send the manifest's first N requests again, streamed and not, keep both outputs in --quality-dir and compare their audio (0: no quality pass)")
	fl.StringVar(&f.dir, "quality-dir", "", "the private directory (mode 0700, outside the campaign) the quality pass keeps its outputs in")
	fl.Int64Var(&f.lengthDiff, "quality-max-length-diff-samples", 0, "the concatenated stream may differ from the complete output by this many samples")
	fl.Float64Var(&f.relRMS, "quality-max-rel-rms", loadgen.DefaultMaxRelRMS, "the RMS of the difference over the common length, relative to the complete output's, may be at most this")
}

// apply puts the flags into the run's configuration.
func (f qualityFlags) apply(cfg *loadgen.Config) error {
	if f.rows == 0 && f.dir == "" {
		return nil
	}
	switch {
	case f.rows < 0 || f.lengthDiff < 0 || math.IsNaN(f.relRMS) || f.relRMS < 0 || math.IsInf(f.relRMS, 0):
		return refused("--quality-rows, --quality-max-length-diff-samples and --quality-max-rel-rms must not be negative")
	case f.rows == 0:
		return refused("--quality-dir needs --quality-rows")
	}
	if err := loadgen.CheckQualityDir(f.dir, os.Getenv("WARDEN_CAMPAIGN_DIR")); err != nil {
		return refused("--quality-dir: %v", err)
	}
	cfg.Quality = loadgen.Quality{Rows: f.rows, Dir: f.dir, MaxLengthDiffSamples: f.lengthDiff, MaxRelRMS: f.relRMS}
	return nil
}

// printQuality prints the quality pass's outcome after the run's line.
func printQuality(res *loadgen.Result) {
	if q := res.Quality; q != nil {
		fmt.Printf("loadgen: quality rows=%d kept=%d compared=%d mismatched=%d\n", q.Rows, q.Kept, q.Compared, q.Mismatched)
	}
}
