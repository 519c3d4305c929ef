package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"warden/pkg/contract"
)

func newValidateClockLoadCmd() *cobra.Command {
	o := contract.DefaultClockLoad()
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
		func() (contract.Result, error) {
			o.ForbiddenReasons = nil
			for _, r := range strings.Split(reasons, ",") {
				if r = strings.TrimSpace(r); r != "" {
					o.ForbiddenReasons = append(o.ForbiddenReasons, r)
				}
			}
			if o.AttemptDir == "" || o.Phases == "" || len(o.ForbiddenReasons) == 0 || !(o.MaxLoad1 > 0) {
				return contract.Result{}, usage("clock-load: --attempt-dir and --phases are required (or $WARDEN_ATTEMPT_DIR and $WARDEN_PHASE_FILE); --forbid-reasons names at least one reason; --max-load1 is positive")
			}
			return contract.ClockLoad(o), nil
		})
	f := cmd.Flags()
	f.StringVar(&o.AttemptDir, "attempt-dir", os.Getenv("WARDEN_ATTEMPT_DIR"), "the attempt directory (default $WARDEN_ATTEMPT_DIR)")
	f.StringVar(&o.Phases, "phases", os.Getenv("WARDEN_PHASE_FILE"), "the load client's phase file (default $WARDEN_PHASE_FILE)")
	f.StringVar(&reasons, "forbid-reasons", reasons, "comma-separated NVML clock-event reasons that fail the run")
	f.Float64Var(&o.MaxLoad1, "max-load1", o.MaxLoad1, "the host's 1-minute load average may not exceed this (default: this host's CPU count)")
	return cmd
}

func newValidateRecordsCmd() *cobra.Command {
	o := contract.RecordsOptions{AttemptDir: os.Getenv("WARDEN_ATTEMPT_DIR")}
	cmd := verdictCmd("records", "Record the compile-cache key and directory, MoE backend, server source commit and model shards of a run",
		`records keeps what seed 002 asks recorded of every run ("source/patched
commit, ... model path and shard hashes, ... MoE backend, compile cache
key"), read from where the server exposes it: vLLM's startup lines (the
attempt's server.out and server.err), /server_info's system_env.vllm_version
(server-config.json), and the campaign's provenance index (model shards, a
provenance entry with shards:). It writes --out (default
$WARDEN_ATTEMPT_DIR/records.json); a record the server did not expose is
"unknown" and named in "unknown". With --compile-key-of RUN_DIR (the burn-in
of the same configuration) the run's compile-cache key must be that run's:
another key fails ("a per-run output directory changes the compile-cache
key", stop condition 1), a key unknown on either side is an error.`,
		func() (contract.Result, error) {
			if o.AttemptDir == "" {
				return contract.Result{}, usage("records: --attempt-dir is required (or $WARDEN_ATTEMPT_DIR)")
			}
			if o.Out == "" {
				o.Out = filepath.Join(o.AttemptDir, "records.json")
			}
			return contract.Records(o), nil
		})
	f := cmd.Flags()
	f.StringVar(&o.AttemptDir, "attempt-dir", o.AttemptDir, "the attempt directory (default $WARDEN_ATTEMPT_DIR)")
	f.StringVar(&o.CampaignDir, "campaign-dir", "", "the campaign directory, whose provenance index holds the model's shards")
	f.StringVar(&o.Out, "out", "", "where to write records.json (default ATTEMPT_DIR/records.json; - for none)")
	f.StringVar(&o.CompileKeyOf, "compile-key-of", "", "a run directory whose latest records.json holds the compile-cache key this run must share")
	return cmd
}
