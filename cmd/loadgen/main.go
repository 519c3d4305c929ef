// Command loadgen is Warden's fixed-duration load client for
// OpenAI-compatible inference servers (vLLM, SGLang), with the interface
// of the OpProf Phase 3 seed's "Required fixed-duration client":
//
//	loadgen run          drive a server through warm-up, clean segments,
//	                     profile windows, recovery and drain; write
//	                     per-request records, segments.jsonl and
//	                     result.json (docs/loadgen.md)
//	loadgen materialize  write a synthetic manifest of token ids of exact
//	                     lengths, from the seed's pattern-table flags
//
// Exit codes: 0 the run finished its timeline, every admitted request
// ended, and the results are written (requests may still have failed: see
// result.json); 1 error, nothing usable written, or interrupted (results
// written with complete=false); 2 bad flags or a run refused before it
// started; 3 the manifest ran out during the run (results written with
// complete=false); 4 the drain bound was reached: requests abandoned,
// results written with complete=false.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/loadgen"
)

func main() {
	os.Exit(cli.Run(newRootCmd(), 1, func(_ *cobra.Command, err error, _ cli.Status) {
		fmt.Fprintf(os.Stderr, "loadgen: %v\n", err)
	}))
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "loadgen",
		Short:         "Fixed-duration load client for OpenAI-compatible inference servers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newRunCmd(), newMaterializeCmd())
	return root
}

// runFlags are the flags of "loadgen run".
type runFlags struct {
	manifest, baseURL, model, endpoint, loadPoint string
	requestRate, saturationResult, arrival        string
	rateFraction                                  float64
	maxConcurrency                                int
	dispatchers                                   int
	ignoreEOS                                     bool
	temperature                                   float64
	warmupS, cleanS                               float64
	numClean                                      int
	profileAfterClean                             bool
	numWindows, profWarmup, profActive            int
	profileHoldS, profileBudgetS                  float64
	recoveryS, drainS                             float64
	seed                                          uint64
	resultDir, phaseFile                          string
	ext                                           extFlags
	rec                                           recordFlags
	stress                                        stressFlags
	quality                                       qualityFlags
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the fixed-duration timeline against a server and record every request",
		Long: `Run the seed's fixed-duration timeline against an OpenAI-compatible server:
warm-up, --num-clean-segments contiguous clean segments, then (with
--profile-after-clean) --num-profile-windows profile windows, each followed by
--recovery-seconds of recovery. Admission continues through profile and
recovery; then it stops and outstanding requests drain, never cancelled, until
every one has ended, bounded by --drain-timeout-seconds: those still
outstanding at the bound are abandoned (deadline-exceeded) and the run is
incomplete.

Load: --request-rate inf is a closed loop of --max-concurrency outstanding
requests. --load-point moderate derives λ = --rate-fraction × T_sat from
--saturation-result and refuses a hand-given finite rate. Other load points
take a finite --request-rate. --request-deadline-s ends each request at a
deadline from its planned send (deadline-exceeded). Open-loop arrivals follow the manifest's class
(steady, burst:N) unless --arrival names poisson or gamma:K (not allowed for
saturation and moderate, whose class is the manifest's).

Writes RESULT_DIR/requests/<segment>.jsonl, RESULT_DIR/segments.jsonl,
with --seed-records (on by default with --modalities) RESULT_DIR/requests.jsonl
and RESULT_DIR/events.jsonl, and RESULT_DIR/result.json (last), and appends phase lines to --phase-file
(default $WARDEN_PHASE_FILE). Never writes prompt or generated text.
See docs/loadgen.md.

Exit codes: 0 timeline finished, every request ended; 1 error or interrupted;
2 refused before the start; 3 manifest exhausted during the run; 4 drain bound
reached: requests abandoned; results written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return run(ctx, cmd, f)
		},
	}
	bindRunFlags(cmd, &f)
	return cmd
}

// bindRunFlags defines the flags of "loadgen run" on cmd, into f.
func bindRunFlags(cmd *cobra.Command, f *runFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.manifest, "manifest", "", "JSON-lines manifest (required)")
	fl.StringVar(&f.baseURL, "base-url", "", "server base URL (default http://127.0.0.1:$WARDEN_PORT)")
	fl.StringVar(&f.model, "model", "", "model name sent with each request (required)")
	fl.StringVar(&f.endpoint, "endpoint", "completions", "completions (/v1/completions) or chat (/v1/chat/completions; text prompts only)")
	fl.StringVar(&f.loadPoint, "load-point", "", "saturation, moderate, or another label (required)")
	fl.StringVar(&f.requestRate, "request-rate", "", "inf (closed loop) or requests per second; saturation needs inf, moderate refuses it")
	fl.StringVar(&f.saturationResult, "saturation-result", "", "result.json of the saturation run whose T_sat sets λ (moderate)")
	fl.Float64Var(&f.rateFraction, "rate-fraction", 0, "λ = fraction × T_sat (moderate)")
	fl.IntVar(&f.maxConcurrency, "max-concurrency", 256, "most requests outstanding at once")
	fl.IntVar(&f.dispatchers, "dispatchers", 0, "open-loop dispatchers sharing the schedule (0: one per 50,000 requests/s, at most GOMAXPROCS)")
	fl.StringVar(&f.arrival, "arrival", "manifest", "open-loop arrival class: manifest (the manifest's), steady, burst:N, poisson, gamma:K")
	fl.BoolVar(&f.ignoreEOS, "ignore-eos", false, "ask for exactly the manifest's output tokens (vLLM's ignore_eos); other counts fail as invalid-output")
	fl.Float64Var(&f.temperature, "temperature", 0, "sampling temperature")
	fl.Float64Var(&f.warmupS, "warmup-seconds", 60, "warm-up seconds (excluded from summaries)")
	fl.Float64Var(&f.cleanS, "clean-segment-seconds", 80, "seconds of each clean segment")
	fl.IntVar(&f.numClean, "num-clean-segments", 3, "contiguous clean segments")
	fl.BoolVar(&f.profileAfterClean, "profile-after-clean", false, "run profile windows after the clean interval")
	fl.IntVar(&f.numWindows, "num-profile-windows", 2, "profile windows, with --profile-after-clean")
	fl.IntVar(&f.profWarmup, "profile-warmup-iterations", 2, "the server's profiler warm-up iterations per window (recorded; set in the server's profiler config)")
	fl.IntVar(&f.profActive, "profile-active-iterations", 8, "the server's profiler active iterations per window (recorded; set in the server's profiler config)")
	fl.Float64Var(&f.profileHoldS, "profile-hold-seconds", 1, "legacy: seconds between /start_profile returning and /stop_profile, used only without --profile-traces-dir and --profile-layer1-stream (the server's window is then not observed)")
	fl.Float64Var(&f.profileBudgetS, "profile-window-budget-seconds", 24, "longest time of one profile window, from the /start_profile call to the /stop_profile call (the seed: 24); also the window's length in the manifest-length check")
	fl.Float64Var(&f.recoveryS, "recovery-seconds", 30, "fixed recovery after each profile window")
	fl.Float64Var(&f.drainS, "drain-timeout-seconds", 120, "bound of the drain: requests still outstanding this long after admission stops are abandoned (exit 4)")
	fl.Uint64Var(&f.seed, "workload-seed", 0, "seed of poisson and gamma arrivals (recorded)")
	fl.StringVar(&f.resultDir, "result-dir", "", "directory for the results (required; never overwritten)")
	fl.StringVar(&f.phaseFile, "phase-file", os.Getenv("WARDEN_PHASE_FILE"), "file to append phase lines to (default $WARDEN_PHASE_FILE)")
	bindExtFlags(cmd, &f.ext)
	bindRecordFlags(cmd, &f.rec)
	bindStressFlags(cmd, &f.stress)
	bindQualityFlags(cmd, &f.quality)
}

// refused marks an error found before the run started.
func refused(format string, a ...any) error {
	return &cli.ExitError{Code: 2, Err: fmt.Errorf(format, a...)}
}

func secondsFlag(name string, s float64) (time.Duration, error) {
	if math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
		return 0, refused("--%s %v: want a finite number of seconds, not negative", name, s)
	}
	return time.Duration(s * float64(time.Second)), nil
}

// config turns the flags into a run configuration, refusing what the seed
// forbids. m is the opened manifest.
func config(cmd *cobra.Command, f runFlags, m *loadgen.Manifest) (loadgen.Config, error) {
	cfg := loadgen.Config{
		BaseURL: strings.TrimRight(f.baseURL, "/"), Model: f.model, Endpoint: loadgen.Endpoint(f.endpoint),
		LoadPoint: f.loadPoint, MaxConcurrency: f.maxConcurrency, Dispatchers: f.dispatchers, IgnoreEOS: f.ignoreEOS, Temperature: f.temperature,
		NumClean: f.numClean, ProfileWarmupIterations: f.profWarmup, ProfileActiveIterations: f.profActive,
		Seed: f.seed, ResultDir: f.resultDir, PhaseFile: f.phaseFile, Arrival: m.Arrival,
	}
	if cfg.BaseURL == "" {
		port, ok := os.LookupEnv("WARDEN_PORT")
		if !ok {
			return cfg, refused("--base-url or $WARDEN_PORT is required")
		}
		cfg.BaseURL = "http://127.0.0.1:" + port
	}
	if f.model == "" || f.loadPoint == "" || f.resultDir == "" {
		return cfg, refused("--model, --load-point and --result-dir are required")
	}
	var err error
	for _, d := range []struct {
		name string
		s    float64
		to   *time.Duration
	}{
		{"warmup-seconds", f.warmupS, &cfg.Warmup}, {"clean-segment-seconds", f.cleanS, &cfg.CleanSegment},
		{"profile-hold-seconds", f.profileHoldS, &cfg.ProfileHold}, {"profile-window-budget-seconds", f.profileBudgetS, &cfg.ProfileWindowBudget},
		{"recovery-seconds", f.recoveryS, &cfg.Recovery}, {"drain-timeout-seconds", f.drainS, &cfg.DrainTimeout},
	} {
		if *d.to, err = secondsFlag(d.name, d.s); err != nil {
			return cfg, err
		}
	}
	if err := f.ext.apply(&cfg); err != nil {
		return cfg, err
	}
	if err := f.rec.apply(&cfg); err != nil {
		return cfg, err
	}
	if err := f.stress.apply(&cfg); err != nil {
		return cfg, err
	}
	if err := f.quality.apply(&cfg); err != nil {
		return cfg, err
	}
	if f.profileAfterClean {
		cfg.ProfileWindows = f.numWindows
	} else if cmd.Flags().Changed("num-profile-windows") && f.numWindows > 0 {
		return cfg, refused("--num-profile-windows needs --profile-after-clean")
	}
	if f.arrival != "manifest" {
		if f.loadPoint == "saturation" || f.loadPoint == "moderate" {
			return cfg, refused("--arrival %s: the %s load point takes its arrival class from the manifest", f.arrival, f.loadPoint)
		}
		if cfg.Arrival, err = loadgen.ParseArrival(f.arrival); err != nil {
			return cfg, refused("--arrival: %v", err)
		}
	}

	switch {
	case f.saturationResult != "" || cmd.Flags().Changed("rate-fraction"):
		if f.requestRate != "" {
			return cfg, refused("--request-rate %s: λ comes from --saturation-result and --rate-fraction; a hand-given rate is refused", f.requestRate)
		}
		if f.saturationResult == "" || !(f.rateFraction > 0) || math.IsInf(f.rateFraction, 0) {
			return cfg, refused("--saturation-result and a positive --rate-fraction go together")
		}
		tsat, sum, err := readSaturation(f.saturationResult, m.SHA256)
		if err != nil {
			return cfg, refused("--saturation-result %s: %v", f.saturationResult, err)
		}
		cfg.Rate = f.rateFraction * tsat
		cfg.RateFraction, cfg.SaturationCompletedRPS, cfg.SaturationResultSHA256 = f.rateFraction, tsat, sum
	case f.loadPoint == "moderate":
		return cfg, refused("the moderate load point needs --saturation-result and --rate-fraction")
	case f.requestRate == "inf":
		cfg.Rate = 0
	case f.requestRate == "":
		return cfg, refused("--request-rate is required (inf for a closed loop)")
	default:
		rate, err := strconv.ParseFloat(f.requestRate, 64)
		if err != nil || !(rate > 0) || math.IsInf(rate, 0) {
			return cfg, refused("--request-rate %q: want inf or a positive number", f.requestRate)
		}
		cfg.Rate = rate
	}
	if f.loadPoint == "saturation" && cfg.Rate != 0 {
		return cfg, refused("the saturation load point is a closed loop: --request-rate inf")
	}
	return cfg, nil
}

// readSaturation reads T_sat (clean.completed_rps) from a saturation run's
// result.json, which must be complete, of the same manifest, and a closed
// loop. It returns T_sat and the file's SHA-256.
func readSaturation(path, manifestSHA string) (float64, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, "", err
	}
	var r loadgen.Result
	if err := json.Unmarshal(data, &r); err != nil {
		return 0, "", fmt.Errorf("not a loadgen result: %w", err)
	}
	switch {
	case r.Schema != loadgen.ResultSchema:
		return 0, "", fmt.Errorf("schema %q, want %q", r.Schema, loadgen.ResultSchema)
	case !r.Complete:
		return 0, "", errors.New("the saturation run is not complete")
	case !r.Load.ClosedLoop:
		return 0, "", errors.New("not a closed-loop (saturation) run")
	case r.Manifest.SHA256 != manifestSHA:
		return 0, "", fmt.Errorf("its manifest SHA-256 %s differs from this manifest's %s", r.Manifest.SHA256, manifestSHA)
	case !(r.Clean.CompletedRPS > 0) || math.IsInf(r.Clean.CompletedRPS, 0):
		return 0, "", fmt.Errorf("clean.completed_rps %v is not a positive rate", r.Clean.CompletedRPS)
	}
	sum := sha256.Sum256(data)
	return r.Clean.CompletedRPS, hex.EncodeToString(sum[:]), nil
}

func run(ctx context.Context, cmd *cobra.Command, f runFlags) error {
	if f.manifest == "" {
		return refused("--manifest is required")
	}
	m, err := loadgen.OpenManifest(f.manifest)
	if err != nil {
		return refused("%v", err)
	}
	defer m.Close()
	cfg, err := config(cmd, f, m)
	if err != nil {
		return err
	}
	if _, err := cfg.Check(m); err != nil {
		return refused("%v", err)
	}
	if n := cfg.SpareProcs(runtime.GOMAXPROCS(0)); n > 0 {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + n)
	}
	res, err := loadgen.Run(ctx, cfg, m)
	if res != nil {
		c := res.Clean
		fmt.Printf("loadgen: load_point=%s admitted=%d clean_s=%.3f completed=%d failed=%d completed_rps=%.4f offered_rps=%.4f ttft_p50_ms=%.3f e2e_p99_ms=%.3f lag_p99_ms=%.3f sustained_lag=%v drain_s=%.3f drain_timed_out=%v drain_abandoned=%d\n",
			res.LoadPoint, res.Totals.Admitted, c.Seconds, c.Completed, c.Failed, c.CompletedRPS, c.OfferedRPS,
			c.Latency.TTFT.P50, c.Latency.E2E.P99, res.Lag.All.P99, res.Lag.Sustained, res.Drain.Seconds, res.Drain.TimedOut, res.Drain.Abandoned)
		printStress(res)
		printQuality(res)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, loadgen.ErrDrainAbandoned):
		return &cli.ExitError{Code: 4, Err: err}
	case errors.Is(err, loadgen.ErrManifestExhausted):
		return &cli.ExitError{Code: 3, Err: err}
	case errors.Is(err, loadgen.ErrResultExists), errors.Is(err, loadgen.ErrManifestTooShort), errors.Is(err, loadgen.ErrModelNotServed):
		return &cli.ExitError{Code: 2, Err: err}
	}
	return err
}

func newMaterializeCmd() *cobra.Command {
	var (
		spec                      loadgen.Spec
		uniform, mixture, arrival string
		fixed                     int
		out                       string
	)
	cmd := &cobra.Command{
		Use:   "materialize",
		Short: "Write a synthetic manifest of token ids of exact lengths",
		Long: `Write a synthetic JSON-lines manifest from the seed's pattern-table flags.
Prompts are token ids drawn uniformly from [--vocab-min, --vocab-max), so input
lengths are exact without a tokenizer (send them to /v1/completions). Exactly
one of --input-uniform A:B, --input-mixture '{"uniform:A:B":w,...}' and
--input-fixed N for --kind synthetic; --num-prefixes, --prefix-len and
--suffix-fixed for --kind prefix-pool. Same flags and seed, same bytes.
Prints a summary (rows, SHA-256, input lengths) as JSON.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, s := range []bool{uniform != "", mixture != "", fixed != 0} {
				if s {
					n++
				}
			}
			if n > 1 {
				return refused("give one of --input-uniform, --input-mixture, --input-fixed")
			}
			var err error
			switch {
			case uniform != "":
				c, err := loadgen.ParseUniform(uniform)
				if err != nil {
					return refused("%v", err)
				}
				spec.Input = loadgen.Mixture{c}
			case mixture != "":
				if spec.Input, err = loadgen.ParseMixture(mixture); err != nil {
					return refused("%v", err)
				}
			case fixed != 0:
				if fixed < 1 {
					return refused("--input-fixed %d: want at least 1", fixed)
				}
				spec.Input = loadgen.Mixture{{Min: fixed, Max: fixed, Weight: 1}}
			}
			if spec.Kind == "prefix-pool" && !cmd.Flags().Changed("prefix") {
				spec.Prefix = "pool"
			}
			if spec.Arrival, err = loadgen.ParseArrival(arrival); err != nil {
				return refused("--arrival: %v", err)
			}
			if out == "" {
				return refused("--out is required")
			}
			sum, err := loadgen.Materialize(spec, out)
			if err != nil {
				return err
			}
			data, _ := json.Marshal(sum)
			fmt.Println(string(data))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&spec.ID, "id", "", "pattern id, the prefix of request ids (required)")
	fl.StringVar(&spec.Kind, "kind", "synthetic", "synthetic or prefix-pool")
	fl.StringVar(&uniform, "input-uniform", "", "input tokens uniform in A:B, inclusive")
	fl.StringVar(&mixture, "input-mixture", "", `input mixture, JSON {"uniform:A:B": weight, ...}; exact counts per component`)
	fl.IntVar(&fixed, "input-fixed", 0, "input tokens, the same for every request")
	fl.IntVar(&spec.OutputTokens, "output-fixed", 0, "output tokens requested of every request (required)")
	fl.StringVar(&spec.Prefix, "prefix", "none", "none (synthetic manifests share no prefix longer than 16 tokens)")
	fl.IntVar(&spec.NumPrefixes, "num-prefixes", 0, "prefix-pool: shared prefixes, assigned in balance then shuffled")
	fl.IntVar(&spec.PrefixLen, "prefix-len", 0, "prefix-pool: tokens of each shared prefix")
	fl.IntVar(&spec.SuffixLen, "suffix-fixed", 0, "prefix-pool: tokens of each request's unique suffix")
	fl.StringVar(&arrival, "arrival", "steady", "arrival class recorded on every row: steady, burst:N, poisson, gamma:K")
	fl.IntVar(&spec.NumRequests, "num-requests", 0, "rows (required)")
	fl.Uint64Var(&spec.Seed, "workload-seed", 0, "seed of lengths, ids and order")
	fl.IntVar(&spec.VocabMin, "vocab-min", 1000, "smallest token id drawn")
	fl.IntVar(&spec.VocabMax, "vocab-max", 30000, "token ids are drawn below this")
	fl.StringVar(&out, "out", "", "manifest to write (atomically; mode 0600)")
	return cmd
}
