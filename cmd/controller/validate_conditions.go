package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"

	"warden/pkg/validate"
)

func newValidateClockLoadCmd() *cobra.Command {
	o := validate.DefaultClockLoad()
	reasons := strings.Join(o.ForbiddenReasons, ",")
	cmd := verdictCmd("clock-load", "Check that no thermal, power-brake or HW slowdown held the GPU clocks, and the host load, during the measured interval",
		`clock-load is A-P3-2's clock/load check: "A run reaches complete only after
client, Layer-1, Layer-2, sanity, command, clock/load, and zero-GPU-memory
cleanup checks have all succeeded." It reads what the controller recorded in
the attempt directory: the GPU samples (gpu-samples.jsonl, NVML's
clock-event reasons every sample_interval_s) between the phase file's first
clean line (its first line for a run without clean segments) and its drain
line, and the host's 1-minute load average in preflight.json and
postmeasure.json. A sample reporting one of --forbid-reasons on any GPU, or
a load above --max-load1, fails with class "infrastructure" (the run fails
clock-load: one exact rerun). No sample in the interval, a sample without
clock-event reasons, or a missing host record: error.`,
		func() (validate.Result, error) {
			o.ForbiddenReasons = nil
			for _, r := range strings.Split(reasons, ",") {
				if r = strings.TrimSpace(r); r != "" {
					o.ForbiddenReasons = append(o.ForbiddenReasons, r)
				}
			}
			if o.AttemptDir == "" || o.Phases == "" || len(o.ForbiddenReasons) == 0 || !(o.MaxLoad1 > 0) {
				return validate.Result{}, usage("clock-load: --attempt-dir and --phases are required (or $WARDEN_ATTEMPT_DIR and $WARDEN_PHASE_FILE); --forbid-reasons names at least one reason; --max-load1 is positive")
			}
			return validate.ClockLoad(o), nil
		})
	f := cmd.Flags()
	f.StringVar(&o.AttemptDir, "attempt-dir", os.Getenv("WARDEN_ATTEMPT_DIR"), "the attempt directory (default $WARDEN_ATTEMPT_DIR)")
	f.StringVar(&o.Phases, "phases", os.Getenv("WARDEN_PHASE_FILE"), "the load client's phase file (default $WARDEN_PHASE_FILE)")
	f.StringVar(&reasons, "forbid-reasons", reasons, "comma-separated NVML clock-event reasons that fail the run")
	f.Float64Var(&o.MaxLoad1, "max-load1", o.MaxLoad1, "the host's 1-minute load average may not exceed this (default: this host's CPU count)")
	return cmd
}
