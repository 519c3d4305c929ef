package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"warden/internal/cli"
	"warden/pkg/contract"
	"warden/pkg/dirlayout"
	"warden/pkg/validator"
)

const validateExit = `
Output: a summary line (unless -o json), then, as the LAST line, one JSON
object: {"verdict":"pass"|"fail"|"error","detail":"...","figures":{...}}
(the line a protocol validator prints; see docs/validators.md).

Exit status: 0 when a verdict was reached, whatever it is (read the last
line); 2 for a usage error (bad flags), with no verdict line. "error" means
the check could not tell (a file missing or unreadable): it never passes.`

func newValidateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a run's artifacts against the seed's contracts (layer1, layer2, client, sanity, warmup, recovery, waveform)",
		Long: `validate checks the artifacts of one run against the contracts seed 002
freezes. Each subcommand can be run by hand or named by a protocol as a
validator, whose verdict the controller records as the gate
"validator:NAME":

  controller validate layer1  --dir ${RUN_DIR}/opprof      (A-P3-5 footer/sidecar rule)
  controller validate layer2  --traces ${RUN_DIR}/traces --tp 1
  controller validate client  --result-dir ${ATTEMPT_DIR}/client [--saturation-result ${NEED_SATURATION_DIR}/client/result.json]
  controller validate sanity  --input ${ATTEMPT_DIR}/client --out ${ATTEMPT_DIR}/sanity.json
  controller validate warmup  --result-dir ${ATTEMPT_DIR}/client --min-completions 32 [--stabilization --layer1-dir ${ATTEMPT_DIR}/opprof]
  controller validate recovery --result-dir ${ATTEMPT_DIR}/client --layer1-dir ${ATTEMPT_DIR}/opprof
  controller validate profile-windows --result-dir ${ATTEMPT_DIR}/client --windows 2
  controller validate waveform --result-dir ${ATTEMPT_DIR}/client
  controller validate power --result-dir ${ATTEMPT_DIR}/client --layer1-dir ${ATTEMPT_DIR}/opprof   (the power check's measurements)
  controller validate clock-load --attempt-dir ${ATTEMPT_DIR} --phases ${PHASE_FILE}   (A-P3-2's clock/load)
  controller validate records --attempt-dir ${ATTEMPT_DIR} --campaign-dir ${CAMPAIGN_DIR}   (what the seed asks recorded)
` + validateExit,
		Args: cobra.NoArgs,
	}
	// A bad flag is a usage error: exit 2, as documented (the children
	// inherit this).
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &cli.ExitError{Code: 2, Err: fmt.Errorf("validate: %w", err)}
	})
	cmd.AddCommand(newValidateLayer1Cmd(), newValidateLayer2Cmd(), newValidateClientCmd(), newValidateSanityCmd(),
		newValidateWarmupCmd(), newValidateRecoveryCmd(), newValidateProfileWindowsCmd(), newValidateColocationCmd(), newValidatePrefixCmd(),
		newValidateWaveformCmd(), newValidatePowerCmd(), newValidateClockLoadCmd(), newValidateRecordsCmd())
	return cmd
}

// printVerdict writes the summary (text output) and the verdict line.
func printVerdict(w io.Writer, name, output string, r contract.Result) error {
	return contract.WriteVerdict(w, name, output == "json", r)
}

// verdictCmd is the validate subcommand name: its help (long, then
// validateExit), its --output flag, and a run that checks --output, then
// calls check, which returns the verdict to print, or a usage error (no
// verdict line).
func verdictCmd(name, short, long string, check func() (contract.Result, error)) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Long:  long + validateExit,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			r, err := check()
			if err != nil {
				return err
			}
			return printVerdict(cmd.OutOrStdout(), name, output, r)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output: text or json")
	return cmd
}

func checkOutput(o string) error {
	if o != "json" && o != "text" {
		return &cli.ExitError{Code: 2, Err: fmt.Errorf("validate: unknown output %q (json or text)", o)}
	}
	return nil
}

func usage(format string, a ...any) error {
	return &cli.ExitError{Code: 2, Err: fmt.Errorf("validate: "+format, a...)}
}

func newValidateLayer1Cmd() *cobra.Command {
	var stream, dir string
	var acc layer1Accounting
	cmd := verdictCmd("layer1", "Check a Layer-1 JSONL stream and its sidecar by the A-P3-5 rule",
		`layer1 checks a Layer-1 stream (JSON lines, one schema-v1 record per engine
step: docs/validators.md lists its fields) and its sidecar
<stream>.footer.json by seed 002's A-P3-5 rule: every complete line decodes
as a schema-v1 record (every field present and of its type, schema 1;
other fields allowed) or the footer, and no line is partial; the data
lines' count equals the sidecar's written_records; the last data line's
step equals its last_step_index; encoded = written + dropped; dropped = 0;
steps are unique and contiguous. A stream with an in-stream footer (a clean
close) must agree with a final sidecar. A stream without one passes only
after a hard kill (a recorded SIGKILL to the server, its group or cgroup):
the sidecar is then authoritative and its checkpoint may be at most its
flush interval older than that SIGKILL, plus --tolerance-ms (reported apart
as tolerance_used_ms); after a graceful stop it fails. The signal times are
read from --signals, by default $WARDEN_SIGNALS_FILE, which the controller
sets for validators.

Give the stream with --stream, or a directory holding exactly one *.jsonl
with --dir.`,
		func() (contract.Result, error) {
			if (stream == "") == (dir == "") {
				return contract.Result{}, usage("layer1: give exactly one of --stream and --dir")
			}
			opts := acc.options()
			if dir != "" {
				return contract.Layer1Dir(dir, acc.sidecar, acc.signals, opts), nil
			}
			return contract.Layer1Files(stream, acc.sidecar, acc.signals, opts), nil
		})
	f := cmd.Flags()
	f.StringVar(&stream, "stream", "", "the Layer-1 JSONL stream")
	f.StringVar(&dir, "dir", "", "a directory holding exactly one Layer-1 stream (*.jsonl)")
	acc.bind(f)
	return cmd
}

func newValidateClientCmd() *cobra.Command {
	var dir string
	o := contract.DefaultClient()
	cmd := verdictCmd("client", "Check the load client's result: segments, failures, tokens, rate, lag, no text",
		`client checks a load client's result directory (loadgen's result.json,
segments.jsonl and requests/*.jsonl): the timeline completed; exactly
--segments clean segments of --segment-seconds each; no clean-segment
request failed; every completed request produced exactly the output tokens
it requested; no request was sent more than --lag-threshold-s after its
planned time; no file has a prompt or generated-text field
(--forbidden-fields). An open-loop (moderate) run needs
--saturation-result: its λ must be --rate-fraction x that run's clean
completed throughput, and its achieved offered rate within --rate-tolerance
of it.`,
		func() (contract.Result, error) {
			if dir == "" {
				return contract.Result{}, usage("client: --result-dir DIR is required")
			}
			if o.Segments < 1 || o.SegmentSeconds <= 0 || o.RateFraction <= 0 || o.RateTolerance < 0 {
				return contract.Result{}, usage("client: --segments, --segment-seconds and --rate-fraction must be positive")
			}
			return contract.ClientDir(dir, o), nil
		})
	f := cmd.Flags()
	resultDirFlag(f, &dir)
	f.IntVar(&o.Segments, "segments", o.Segments, "clean segments the protocol declares")
	f.Float64Var(&o.SegmentSeconds, "segment-seconds", o.SegmentSeconds, "seconds of each clean segment")
	f.Float64Var(&o.SegmentTolS, "segment-tolerance-s", o.SegmentTolS, "how far a clean segment's length may be from --segment-seconds")
	f.StringVar(&o.SaturationResult, "saturation-result", "", "the saturation run's result.json (required for an open-loop run)")
	f.Float64Var(&o.RateFraction, "rate-fraction", o.RateFraction, "moderate λ as a fraction of the saturation throughput")
	f.Float64Var(&o.RateTolerance, "rate-tolerance", o.RateTolerance, "relative tolerance of the achieved offered rate")
	f.Float64Var(&o.LagThresholdS, "lag-threshold-s", o.LagThresholdS, "generator lag (sent - planned) no request may exceed")
	f.StringSliceVar(&o.ForbiddenFields, "forbidden-fields", o.ForbiddenFields, "JSON keys that must not appear (prompt or generated text)")
	return cmd
}

func newValidateSanityCmd() *cobra.Command {
	var out, base string
	var inputs, consts []string
	o := contract.DefaultSanity()
	cmd := verdictCmd("sanity", "Write the data sanity block (sanity.json) of a run's numeric outputs and check its red flags",
		`sanity reads the run's numeric outputs (--input: JSON or JSON-lines files, or
directories of them) and writes the seed's data sanity block to --out (by
default $WARDEN_ATTEMPT_DIR/sanity.json; "-" writes none): for every numeric
family (a JSON path in a file) n, finite, missing, min, max and distinct
count. Red flags fail the check: a negative value in a family not declared
--signed (every other family is a non-negative counter), a ratio (a leaf
named ratio, fraction, share, frac or usage) outside [0,1], a non-finite
value, a declared --constant NAME=VALUE that does not hold or is absent.
Families that never varied but were not declared are listed, not flagged.
ctlq show prints the block of an attempt.`,
		func() (contract.Result, error) {
			if len(inputs) == 0 {
				return contract.Result{}, usage("sanity: at least one --input is required")
			}
			for _, c := range consts {
				name, val, ok := strings.Cut(c, "=")
				v, err := strconv.ParseFloat(val, 64)
				if !ok || err != nil || name == "" {
					return contract.Result{}, usage("sanity: --constant %q: want NAME=NUMBER", c)
				}
				o.Constants[name] = v
			}
			if out == "" {
				if o := os.Getenv(validator.EnvSanityOut); o != "" {
					out = o // a re-adjudication: not into the ended attempt
				} else if d := os.Getenv("WARDEN_ATTEMPT_DIR"); d != "" {
					out = dirlayout.Sanity(d)
				}
			}
			if base == "" && len(inputs) > 0 {
				base = os.Getenv("WARDEN_ATTEMPT_DIR")
			}
			return contract.WriteSanity(inputs, base, out, o), nil
		})
	f := cmd.Flags()
	f.StringArrayVar(&inputs, "input", nil, "a JSON or JSON-lines file, or a directory of them (repeatable)")
	f.StringVar(&base, "base", "", "directory cut from family names (default $WARDEN_ATTEMPT_DIR)")
	f.StringVar(&out, "out", "", "where to write sanity.json (default $WARDEN_ATTEMPT_DIR/sanity.json; - for none)")
	f.StringArrayVar(&consts, "constant", nil, "a declared constant, FAMILY=VALUE; FAMILY may use * (repeatable)")
	f.StringArrayVar(&o.Signed, "signed", nil, "a family pattern that may be negative (repeatable)")
	return cmd
}

func newValidateWarmupCmd() *cobra.Command {
	var dir, pattern string
	var stabPatterns []string
	var acc layer1Accounting
	o := contract.WarmupOptions{MinCompletions: 32, Layer1: contract.DefaultLayer1}
	cmd := verdictCmd("warmup", "Check the warm-up: enough completions, or for P10-class runs A-P3-6's stabilization test",
		`warmup checks the client's warm-up segment (result.json segments[0], kind
warmup): it passes with at least --min-completions successful completions
(the seed: 32; the smaller of the segment's succeeded and the successes in
its records file). With --stabilization (or --pattern in
--stabilization-patterns), A-P3-6's OR branch for P10-class runs: at least
16 completions and the trailing-quartile test on the Layer-1 stream in
--layer1-dir: model_executed records by submit_mono_ns in the last quarter
of the warm-up after clock.t0_mono_ns, in three equal bins ([45,50),
[50,55), [55,60) s of a 60 s warm-up), at least 16 steps a bin,
R_j = sum(prefill_tokens+decode_tokens)/bin seconds, contiguous steps, the
Layer-1 accounting check passing (--sidecar, --signals, --tolerance-ms,
--flush-interval-s as for layer1); OLS slope s of R over the bin centres;
abs(s)*(warm-up/4)/R_bar <= 0.10. It reads files only, so a
re-adjudication can run it on retained telemetry.`,
		func() (contract.Result, error) {
			if dir == "" {
				return contract.Result{}, usage("warmup: --result-dir DIR is required")
			}
			if o.MinCompletions < 1 {
				return contract.Result{}, usage("warmup: --min-completions must be at least 1")
			}
			if pattern != "" && slices.Contains(stabPatterns, pattern) {
				o.Stabilization = true
			}
			if o.Stabilization && o.Layer1Dir == "" {
				return contract.Result{}, usage("warmup: the stabilization test needs --layer1-dir")
			}
			o.Sidecar, o.Signals, o.Layer1 = acc.sidecar, acc.signals, acc.options()
			return contract.WarmupDir(dir, o), nil
		})
	f := cmd.Flags()
	resultDirFlag(f, &dir)
	f.IntVar(&o.MinCompletions, "min-completions", o.MinCompletions, "successful warm-up completions required")
	f.BoolVar(&o.Stabilization, "stabilization", false, "allow A-P3-6's OR branch (P10-class runs)")
	f.StringVar(&pattern, "pattern", "", "the run's pattern (e.g. ${PATTERN}); with --stabilization-patterns")
	f.StringSliceVar(&stabPatterns, "stabilization-patterns", nil, "patterns whose runs get the OR branch (e.g. P10)")
	f.StringVar(&o.Layer1Dir, "layer1-dir", "", "directory holding the run's one Layer-1 stream (*.jsonl)")
	acc.bind(f)
	return cmd
}

func newValidateRecoveryCmd() *cobra.Command {
	var dir string
	o := contract.DefaultRecovery()
	cmd := verdictCmd("recovery", "Check that every recovery returns to clean segment C's completion rate and waiting queue",
		`recovery checks, after each profile window, the seed's recovery rule: at the
end of each recovery segment (result.json segments of kind recovery, each
right after a profile window, each --recovery-s long), the --window-s
rolling completion rate (successes of requests/*.jsonl by end_mono_ns in
[end-W, end), per second) and waiting-queue depth (the mean Layer-1
num_waiting_reqs of the records submitted in [end-W, end)) are within
--tolerance of their medians over clean segment C (the last clean
segment, sampled every --step-s from its start + W to its end). A median
of 0 waiting needs exactly 0; a clean median completion rate of 0 fails.
With --rule calibrated (a dated amendment's rule), each series' band is
the wider of --tolerance and the deviation within which the clean
segments' own samples stay jointly with probability --calibration-quantile.
Either way the verdict reports how often the clean segments' own samples
leave the band (recovery.self.*): the rule's false-failure rate.`,
		func() (contract.Result, error) {
			if dir == "" || o.Layer1Dir == "" {
				return contract.Result{}, usage("recovery: --result-dir DIR and --layer1-dir DIR are required")
			}
			if o.WindowS <= 0 || o.StepS <= 0 || o.Tolerance < 0 || o.RecoveryS <= 0 || o.RecoveryTol < 0 {
				return contract.Result{}, usage("recovery: --window-s, --step-s and --recovery-s must be positive, --tolerance and --recovery-tolerance-s not negative")
			}
			if err := checkRule("recovery: --rule", o.Rule, o.Quantile); err != nil {
				return contract.Result{}, err
			}
			return contract.RecoveryDir(dir, o), nil
		})
	f := cmd.Flags()
	resultDirFlag(f, &dir)
	f.StringVar(&o.Layer1Dir, "layer1-dir", "", "directory holding the run's one Layer-1 stream (*.jsonl)")
	f.Float64Var(&o.WindowS, "window-s", o.WindowS, "the rolling window, seconds")
	f.Float64Var(&o.StepS, "step-s", o.StepS, "spacing of the rolling samples in clean segment C, seconds")
	f.Float64Var(&o.Tolerance, "tolerance", o.Tolerance, "relative tolerance around clean segment C's medians")
	f.Float64Var(&o.RecoveryS, "recovery-s", o.RecoveryS, "each recovery's fixed length, seconds")
	f.Float64Var(&o.RecoveryTol, "recovery-tolerance-s", o.RecoveryTol, "how far a recovery's length may be from --recovery-s")
	ruleFlags(f, "rule", &o.Rule, &o.Quantile)
	return cmd
}

func newValidatePowerCmd() *cobra.Command {
	var dir string
	o := contract.DefaultPower()
	cmd := verdictCmd("power", "Measure how often the literal representativeness and recovery rules fail this run's own steady data",
		`power measures, on a run that judges no sample itself (a burn-in), the
false-failure rates the power check (docs/protocol.md, power_check) needs
before a campaign's matrix: on the run's reference (its last clean segment,
else the last --reference-tail-s of its warm-up) every block of
--block-steps consecutive model-executed Layer-1 steps against the rest
(the literal representativeness rule, --max-smd), and the rolling
completion rate and waiting queue (--window-s, every --step-s) against the
reference's medians (the literal recovery rule, --tolerance), for runs of
--windows windows and recoveries. The figures are the ones layer2 and
recovery report on their own runs (smd.self.*, recovery.self.*,
power.*). Pass when both were measured; error when either could not be.`,
		func() (contract.Result, error) {
			if dir == "" || o.Layer1Dir == "" {
				return contract.Result{}, usage("power: --result-dir DIR and --layer1-dir DIR are required")
			}
			if o.BlockSteps < 1 || o.Windows < 1 || o.ReferenceTailS < 0 || o.MaxSMD <= 0 || o.WindowS <= 0 || o.StepS <= 0 || o.Tolerance < 0 {
				return contract.Result{}, usage("power: --block-steps, --windows, --max-smd, --window-s and --step-s must be positive, --reference-tail-s and --tolerance not negative")
			}
			return contract.PowerDir(dir, o), nil
		})
	f := cmd.Flags()
	resultDirFlag(f, &dir)
	f.StringVar(&o.Layer1Dir, "layer1-dir", "", "directory holding the run's one Layer-1 stream (*.jsonl)")
	f.IntVar(&o.BlockSteps, "block-steps", o.BlockSteps, "a profile window's active steps: the blocks' length")
	f.IntVar(&o.Windows, "windows", o.Windows, "profile windows (and recoveries) of a judged run")
	f.Float64Var(&o.ReferenceTailS, "reference-tail-s", o.ReferenceTailS, "without a clean segment, the last this many seconds of the warm-up are the reference")
	f.Float64Var(&o.MaxSMD, "max-smd", o.MaxSMD, "the representativeness limit")
	f.Float64Var(&o.WindowS, "window-s", o.WindowS, "the recovery rule's rolling window, seconds")
	f.Float64Var(&o.StepS, "step-s", o.StepS, "spacing of the rolling samples, seconds")
	f.Float64Var(&o.Tolerance, "tolerance", o.Tolerance, "the recovery rule's relative band")
	return cmd
}

// resultDirFlag defines --result-dir, the load client's result directory
// the checks of client, warmup, recovery, profile-windows and waveform read.
func resultDirFlag(f *pflag.FlagSet, dir *string) {
	f.StringVar(dir, "result-dir", "", "the client's result directory (holds result.json)")
}

// layer1Accounting is the Layer-1 accounting check's inputs, the same
// flags for validate layer1 and for warmup's stabilization branch.
type layer1Accounting struct {
	sidecar, signals string
	tolMS, flushS    float64
}

func (a *layer1Accounting) bind(f *pflag.FlagSet) {
	f.StringVar(&a.sidecar, "sidecar", "", "the Layer-1 sidecar (default <stream>.footer.json)")
	f.StringVar(&a.signals, "signals", os.Getenv(validator.EnvSignalsFile), "the controller's recorded signals, a JSON array (default $"+validator.EnvSignalsFile+")")
	f.Float64Var(&a.tolMS, "tolerance-ms", 100, "Layer-1 timestamp/scheduling tolerance beyond the flush interval, reported apart")
	f.Float64Var(&a.flushS, "flush-interval-s", 0, "the configured Layer-1 flush interval the sidecar must declare (0: accept the sidecar's)")
}

func (a layer1Accounting) options() contract.Layer1Options {
	o := contract.DefaultLayer1
	o.Tolerance = time.Duration(a.tolMS * float64(time.Millisecond))
	o.FlushInterval = time.Duration(a.flushS * float64(time.Second))
	return o
}
