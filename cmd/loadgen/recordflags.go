package main

import (
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"warden/pkg/loadgen"
)

// recordFlags are the flags of "loadgen run" for the methodology's raw
// traces (requests.jsonl, events.jsonl) and the per-request deadline.
type recordFlags struct {
	seedRecords string
	runID       string
	runAttempt  string
	deadlineS   float64
}

func bindRecordFlags(cmd *cobra.Command, f *recordFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.seedRecords, "seed-records", "auto", "write requests.jsonl and events.jsonl: on, off, or auto (on when --modalities is given)")
	fl.StringVar(&f.runID, "run-id", os.Getenv("WARDEN_RUN_ID"), "run id of every record line (default $WARDEN_RUN_ID)")
	fl.StringVar(&f.runAttempt, "run-attempt", os.Getenv("WARDEN_ATTEMPT"), "the run's attempt number in every request line (default $WARDEN_ATTEMPT; empty: 0)")
	fl.Float64Var(&f.deadlineS, "request-deadline-s", 0, "each request's deadline in seconds from its planned send, the same for every system: a request still outstanding then is ended, deadline-exceeded (0: none)")
}

// apply puts the flags into the run's configuration.
func (f recordFlags) apply(cfg *loadgen.Config) error {
	switch f.seedRecords {
	case "on":
		cfg.SeedRecords = true
	case "off":
	case "auto":
		cfg.SeedRecords = len(cfg.Modalities) > 0
	default:
		return refused("--seed-records %q: want on, off or auto", f.seedRecords)
	}
	if f.runAttempt != "" {
		n, err := strconv.Atoi(f.runAttempt)
		if err != nil || n < 0 {
			return refused("--run-attempt %q: want a whole number, not negative", f.runAttempt)
		}
		cfg.RunAttempt = n
	}
	if cfg.SeedRecords && f.runID == "" {
		return refused("--seed-records needs a run id: --run-id or $WARDEN_RUN_ID")
	}
	d, err := secondsFlag("request-deadline-s", f.deadlineS)
	if err != nil {
		return err
	}
	cfg.RunID, cfg.RequestDeadline = f.runID, d
	return nil
}
