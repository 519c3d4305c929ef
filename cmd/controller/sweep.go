package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"warden/internal/cli"
	"warden/pkg/planview"
	"warden/pkg/sweep"
	"warden/protocols"
)

// sweepExits are controller sweep's exit statuses, as its help and
// docs/sweep.md list them.
var sweepExits = []struct {
	code    int
	meaning string
}{
	{0, "the campaign runs (with --foreground: it ended, as start's does); with --dry-run or --print-protocol, the protocol is written and its plan fits the budget"},
	{1, "refused or failed: the campaign directory exists and is not empty, or writing or starting failed (nothing is left of what the sweep made)"},
	{2, "a flag is wrong (the message names it), or the written protocol does not plan (every problem with its file, line and field; the files are kept for review)"},
	{3, "the plan's estimate or worst case passes the budget cap: start refuses it unless --allow-over-budget (with --dry-run the files are kept)"},
	{exitNoGPUs, "NVML does not initialize for --gpu-backend auto or nvml"},
	{exitNotOwned, "the campaign directory exists and another user owns it, as start refuses it"},
}

func sweepLong() string {
	var b strings.Builder
	b.WriteString(`sweep writes the protocol of a config or rate sweep and starts it, in one
command. The server command (--serve-cmd) runs in every configuration of
the grid (--grid KEY=V1,V2,..., repeatable: the product of their values,
each KEY=V appended to the command as --KEY V; or --serve-params FILE,
vllm bench sweep serve's JSON of parameter combinations), at every load:
--request-rate inf is a closed loop of --max-concurrency requests (the
saturation load), a rate an open loop at that many requests/s, several
--max-concurrency values several closed loops; --rate-fraction F adds a
moderate load at F x the saturation run's throughput. The requests are a
synthetic pattern (loadgen materialize's flags: --input-uniform A:B,
--output-fixed N, --num-requests N, ...), materialized into DIR/inputs/,
or an existing --manifest. --cap-gpu-hours is the budget; --gpus the GPU
slots.

The protocol is written to DIR/inputs/sweep.yaml: a normal Warden protocol,
dated today, each line commented with the flag it came from. It is
started as controller start -f DIR/inputs/sweep.yaml -d DIR starts a
protocol (the same code, the same flags after the sweep's own): detached,
hashed, resumable with controller resume -d DIR, and controller plan -f
DIR/inputs/sweep.yaml gives the plan it runs. --dry-run writes the files
and prints the plan without starting; --print-protocol prints the
protocol instead. -o json prints one document, also on failure (error,
exit_code, flag or problems). docs/sweep.md has the details.

Exit status:
`)
	for _, e := range sweepExits {
		line := fmt.Sprintf("  %d ", e.code)
		for _, w := range strings.Fields(e.meaning) {
			if len(line)+1+len(w) > 76 {
				b.WriteString(line + "\n")
				line = "    "
			}
			line += " " + w
		}
		b.WriteString(line + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func newSweepCmd() *cobra.Command {
	a := sweep.DefaultArgs()
	var sf startFlags
	var dir string
	var dryRun, printProtocol bool
	cmd := &cobra.Command{
		Use:   "sweep -d DIR --serve-cmd CMD --model M --grid KEY=V1,V2 ... --cap-gpu-hours N",
		Short: "Write a config or rate sweep's protocol into a new campaign directory and start it",
		Long:  sweepLong(),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			doc, err := runSweep(cmd, a, &sf, dir, dryRun, printProtocol)
			if sf.output == "json" {
				if werr := writeJSON(cmd.OutOrStdout(), sweepDocument(doc, err)); werr != nil && err == nil {
					return werr
				}
			}
			return err
		},
	}
	sf.bind(cmd)
	f := cmd.Flags()
	f.StringVarP(&dir, "dir", "d", "", "campaign directory (created; it must not exist or be empty)")
	f.BoolVar(&dryRun, "dry-run", false, "write the protocol and the manifest and print the plan; start nothing")
	f.BoolVar(&printProtocol, "print-protocol", false, "as --dry-run, and print the protocol written instead of the plan")
	f.StringVar(&a.Name, "name", a.Name, "the protocol's name (a safe path component)")
	f.StringVar(&a.ServeCmd, "serve-cmd", "", "the server's command line, split into words as a POSIX shell does (no expansion); ${PORT} is the slot's port (added as --port ${PORT} for vllm, sglang and standin when it names none)")
	f.StringVar(&a.ServerKind, "server-kind", a.ServerKind, "vllm, sglang, vllm-omni, sglang-omni or standin; auto: from --serve-cmd's program (vllm, python -m sglang.launch_server, standin)")
	f.StringVar(&a.Model, "model", "", "the model name the client sends with each request (the server's served model name)")
	f.StringArrayVar(&a.Grid, "grid", nil, "KEY=V1,V2,...: a server flag's values (repeatable: one configuration per combination; true and false: --KEY and --no-KEY)")
	f.StringVar(&a.ServeParams, "serve-params", "", "instead of --grid: vllm bench sweep serve's JSON file, a list of parameter combinations or an object of named ones")
	f.IntVar(&a.GPUsPerRun, "gpus-per-run", a.GPUsPerRun, "GPUs of every run; 0: the product of the tensor- and pipeline-parallel sizes the grid or --serve-cmd gives (1 each)")
	f.Float64Var(&a.ReadyTimeoutS, "server-ready-timeout", a.ReadyTimeoutS, "seconds a server may take to answer its health probe")
	f.Float64Var(&a.StartupS, "startup-s", a.StartupS, "seconds a server is expected to take to start, for the estimate")
	f.StringSliceVar(&a.RequestRates, "request-rate", a.RequestRates, "loads: inf (a closed loop of --max-concurrency requests) or requests per second (an open loop), comma-separated")
	f.IntSliceVar(&a.MaxConcurrency, "max-concurrency", a.MaxConcurrency, "the client's most outstanding requests, comma-separated: each a load of every rate")
	f.Float64SliceVar(&a.RateFractions, "rate-fraction", nil, "moderate loads at these fractions of the saturation run's clean throughput (needs --request-rate inf with one --max-concurrency)")
	f.IntVar(&a.NumRuns, "num-runs", a.NumRuns, "process-level repeats of every configuration")
	f.Float64Var(&a.WarmupS, "warmup-seconds", a.WarmupS, "the client's warm-up seconds")
	f.Float64Var(&a.CleanSegmentS, "clean-segment-seconds", a.CleanSegmentS, "seconds of each clean (measured) segment")
	f.IntVar(&a.NumCleanSegments, "num-clean-segments", a.NumCleanSegments, "clean segments of every run")
	f.Float64Var(&a.DrainAllowanceS, "drain-allowance-s", a.DrainAllowanceS, "drain seconds after which a run is quarantined")
	f.Float64Var(&a.WatchdogS, "watchdog-s", a.WatchdogS, "drain seconds after which the client is ended and the run fails")
	f.StringVar(&a.Validate, "validate", a.Validate, "client: Warden's client validator on the closed loops and moderate loads; none")
	f.Float64Var(&a.RateTolerance, "rate-tolerance", a.RateTolerance, "with --validate client: how far a moderate load's offered rate may be from its λ, relative")
	f.StringVar(&a.Manifest, "manifest", "", "an existing manifest, instead of a synthetic pattern")
	f.BoolVar(&a.ManifestPrivate, "manifest-private", false, "with --manifest: a private input, hashed only, never copied (mode 0600 in a 0700 directory)")
	f.StringVar(&a.PatternID, "pattern-id", "", "the pattern's id (default synthetic, or the manifest's file name)")
	f.StringVar(&a.PatternKind, "pattern-kind", a.PatternKind, "synthetic or prefix-pool (loadgen materialize --kind)")
	f.StringVar(&a.InputUniform, "input-uniform", "", "input tokens uniform in A:B")
	f.StringVar(&a.InputMixture, "input-mixture", "", `input mixture, JSON {"uniform:A:B": weight, ...}`)
	f.IntVar(&a.InputFixed, "input-fixed", 0, "input tokens, the same for every request")
	f.IntVar(&a.OutputFixed, "output-fixed", 0, "output tokens of every request")
	f.IntVar(&a.NumPrefixes, "num-prefixes", 0, "prefix-pool: shared prefixes")
	f.IntVar(&a.PrefixLen, "prefix-len", 0, "prefix-pool: tokens of each shared prefix")
	f.IntVar(&a.SuffixFixed, "suffix-fixed", 0, "prefix-pool: tokens of each request's unique suffix")
	f.StringVar(&a.Arrival, "arrival", "", "arrival class of the synthetic manifest: steady (the default), burst:N, poisson, gamma:K")
	f.IntVar(&a.NumRequests, "num-requests", 0, "the synthetic manifest's rows")
	f.Uint64Var(&a.WorkloadSeed, "workload-seed", a.WorkloadSeed, "seed of the manifest's lengths, ids and order, and of the client's poisson and gamma arrivals")
	f.IntVar(&a.VocabMin, "vocab-min", a.VocabMin, "smallest token id drawn")
	f.IntVar(&a.VocabMax, "vocab-max", a.VocabMax, "token ids are drawn below this")
	f.Float64Var(&a.CapGPUHours, "cap-gpu-hours", 0, "the budget's cap in GPU-hours (required)")
	f.Float64Var(&a.ConsumedGPUHours, "consumed-gpu-hours", 0, "GPU-hours spent before, counted against the cap")
	f.StringVar(&a.BudgetUnit, "budget-unit", a.BudgetUnit, "what a GPU-hour is here, such as H200-hours")
	f.StringVar(&a.GPUs, "gpus", a.GPUs, "GPU indices, one slot each, such as 0,1 or 0-3")
	f.StringVar(&a.CPUs, "cpus", "", "CPUs shared out among the slots in equal consecutive shares (default the CPUs this process may run on)")
	f.StringSliceVar(&a.Ports, "ports", nil, "one port per slot (default: chosen free at start)")
	f.IntVar(&a.Parallel, "parallel", 0, "GPU slots in use at once; 0: the widest configuration's GPUs (one run at a time when every run has one GPU)")
	f.StringVar(&a.Loadgen, "loadgen", "", "the load client (default: loadgen beside this controller)")
	f.StringArrayVar(&a.Ledger, "ledger", nil, "a command whose output is recorded at start, such as 'vllm --version' (repeatable)")
	return cmd
}

// sweepDoc is controller sweep's -o json document: start's, the sweep's
// fields, and on failure the error, its exit status, and the flag or the
// problems it names.
type sweepDoc struct {
	result
	Error    string              `json:"error,omitempty"`
	ExitCode int                 `json:"exit_code"`
	Flag     string              `json:"flag,omitempty"`
	Problems []protocols.Problem `json:"problems,omitempty"`
}

func sweepDocument(res result, err error) sweepDoc {
	res.Schema, res.Action = 1, "sweep"
	d := sweepDoc{result: res}
	if err == nil {
		return d
	}
	s := cli.StatusOf(err, 1)
	d.ExitCode = s.Code
	if s.Cause != nil {
		d.Error = s.Cause.Error()
	}
	var fe *sweep.FlagError
	var wp *writtenProblems
	switch {
	case errors.As(err, &fe):
		d.Flag = "--" + fe.Flag
	case errors.As(err, &wp):
		d.Flag = wp.flag
	}
	var ps *protocols.Problems
	if errors.As(err, &ps) {
		d.Problems = ps.List
	}
	return d
}

// writtenProblems are the problems of the protocol a sweep wrote, each
// with the flag its line came from; flag is the first problem's.
type writtenProblems struct {
	ps   *protocols.Problems
	flag string
	msg  string
}

func (e *writtenProblems) Error() string { return e.msg }
func (e *writtenProblems) Unwrap() error { return e.ps }

// runSweep builds, writes and plans the sweep's protocol, then starts it
// as controller start does (create, then launch), unless dryRun or
// printProtocol. It returns the -o json document's fields so far.
func runSweep(cmd *cobra.Command, a sweep.Args, sf *startFlags, dir string, dryRun, printProtocol bool) (result, error) {
	res := result{Schema: 1, Action: "sweep"}
	if dir == "" {
		return res, &cli.ExitError{Code: 2, Err: errors.New("sweep: -d DIR is required")}
	}
	if printProtocol && sf.output == "json" {
		return res, &cli.ExitError{Code: 2, Err: errors.New("--print-protocol prints the protocol's YAML; for JSON give --dry-run -o json")}
	}
	dryRun = dryRun || printProtocol
	abs, err := sf.check(cmd, dir)
	if err != nil {
		return res, err
	}
	res.Dir = abs
	env, err := sweepEnv(abs)
	if err != nil {
		return res, &cli.ExitError{Code: 1, Err: err}
	}
	sw, err := sweep.Build(a, env)
	if err != nil {
		return res, &cli.ExitError{Code: 2, Err: err}
	}
	w, err := sweep.Write(sw)
	var ps *protocols.Problems
	switch {
	case errors.As(err, &ps):
		res.Protocol = w.Protocol
		var lines []string
		for _, p := range ps.List {
			l := p.Error()
			if f := w.FlagAt(p.Pos.Line); f != "" {
				l += " (from " + f + ")"
			}
			lines = append(lines, l)
		}
		if ps.Omitted > 0 {
			lines = append(lines, fmt.Sprintf("... and %d more", ps.Omitted))
		}
		return res, &cli.ExitError{Code: 2, Err: &writtenProblems{ps: ps, flag: w.FlagAt(ps.List[0].Pos.Line),
			msg: fmt.Sprintf("%s: the protocol the sweep wrote does not plan, %d problem(s) (its files are kept for review; remove %s to sweep into it again):\n%s",
				w.Protocol, len(ps.List)+ps.Omitted, abs, strings.Join(lines, "\n"))}}
	case err != nil:
		return res, &cli.ExitError{Code: 1, Err: err}
	}
	res.Protocol, res.ProtocolSHA256, res.Manifest = w.Protocol, w.Plan.Protocol.SHA256, &w.Manifest
	res.Configurations, res.Runs = len(sw.Configs), len(w.Plan.Runs)
	out := cmd.OutOrStdout()
	note := out
	if printProtocol || sf.output == "json" {
		note = cmd.ErrOrStderr()
	}
	writeSweepNote(note, sw, w)
	if dryRun {
		return dryRunSweep(cmd, res, sf, w, printProtocol)
	}
	if err := sf.create(cmd, w.Protocol, abs); err != nil {
		if rerr := w.Remove(); rerr != nil {
			err = fmt.Errorf("%w (and removing what the sweep wrote failed: %v)", err, rerr)
		}
		return res, err
	}
	return runController(cmd, res, sf.foreground, "", sf.output, sf.mo)
}

// sweepEnv is what the sweep knows beside its flags.
func sweepEnv(dir string) (sweep.Env, error) {
	wd, err := os.Getwd()
	if err != nil {
		return sweep.Env{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return sweep.Env{}, fmt.Errorf("the controller's own path: %w", err)
	}
	argv := append([]string{filepath.Base(os.Args[0])}, os.Args[1:]...)
	env := sweep.Env{Dir: dir, Workdir: wd, HostCPUs: runtime.NumCPU(), Controller: self, Now: time.Now(), CommandLine: argv}
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		for i, n := 0, set.Count(); len(env.CPUs) < n; i++ {
			if set.IsSet(i) {
				env.CPUs = append(env.CPUs, i)
			}
		}
	}
	return env, nil
}

// writeSweepNote says what the sweep wrote.
func writeSweepNote(w io.Writer, sw *sweep.Sweep, wr *sweep.Written) {
	runs := fmt.Sprintf("%d configuration(s) x %d load(s)", len(sw.Configs), len(sw.Loads))
	if sw.Args.NumRuns > 1 {
		runs += fmt.Sprintf(" x %d repeats", sw.Args.NumRuns)
	}
	fmt.Fprintf(w, "wrote %s: %s = %d runs (protocol sha256 %s)\n", wr.Protocol, runs, len(wr.Plan.Runs), wr.Plan.Protocol.SHA256)
	how := "given"
	if wr.Manifest.Materialized {
		how = "materialized"
	}
	fmt.Fprintf(w, "manifest %s (%s): %d rows, sha256 %s\n", wr.Manifest.Path, how, wr.Manifest.Rows, wr.Manifest.SHA256)
}

// dryRunSweep prints the written protocol's plan (or the protocol) and
// says how to start it; the plan's budget verdict is plan's exit status.
func dryRunSweep(cmd *cobra.Command, res result, sf *startFlags, w *sweep.Written, printProtocol bool) (result, error) {
	out := cmd.OutOrStdout()
	res.DryRun = true
	switch {
	case printProtocol:
		b, err := os.ReadFile(w.Protocol)
		if err != nil {
			return res, &cli.ExitError{Code: 1, Err: err}
		}
		out.Write(b)
	case sf.output == "json":
		res.Plan = w.Plan
	default:
		if err := planview.Write(out, w.Plan, false); err != nil {
			return res, err
		}
		for _, u := range w.Plan.InputsUnchecked {
			fmt.Fprintln(cmd.ErrOrStderr(), "not checked:", u)
		}
	}
	if err := overBudget(w.Plan); err != nil {
		return res, &cli.ExitError{Code: exitOverBudget, Err: fmt.Errorf("%w; controller start refuses it unless --allow-over-budget (the files are kept in %s)", err, filepath.Dir(w.Protocol))}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "not started (--dry-run); start it with: controller start -f %s -d %s\n", w.Protocol, res.Dir)
	return res, nil
}
