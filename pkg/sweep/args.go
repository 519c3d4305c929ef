// Package sweep turns the flags of `controller sweep` into a normal Warden
// protocol: one server command, a grid of server arguments (one
// configuration per combination, as `vllm bench sweep serve` takes them),
// loads at a saturation point, at request rates or at concurrencies, a
// synthetic pattern materialized here or an existing manifest, a budget
// and the host's GPU slots. Build checks the flags, naming the flag a
// problem comes from; Protocol renders the protocol, commented so that a
// reader sees what each flag became; Write materializes the manifest and
// writes the protocol into the campaign directory's inputs/, then plans it
// with the protocols package, the same plan `controller plan -f` gives.
//
// The package starts nothing and knows no command line library: the
// controller's sweep command binds the flags to Args and starts the
// written protocol exactly as `controller start` does.
package sweep

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Args are the flags of `controller sweep`, as given. DefaultArgs holds
// the defaults the command binds; a zero field of the pattern (an input
// distribution, --output-fixed, --num-requests, --arrival) means the flag
// was not given.
type Args struct {
	// Name is the protocol's name (--name), a safe path component.
	Name string

	// The server.
	ServeCmd      string   // --serve-cmd: the server's command line, split as a POSIX shell splits words (no expansion)
	ServerKind    string   // --server-kind: vllm, sglang, vllm-omni, sglang-omni, standin; "auto" from the program
	Model         string   // --model: the model name the client sends
	Grid          []string // --grid KEY=V1,V2,...: one axis of the product each
	ServeParams   string   // --serve-params FILE: vllm bench sweep's JSON list (or mapping) of parameter combinations
	GPUsPerRun    int      // --gpus-per-run: GPUs of every run; 0 counts the parallel sizes
	ReadyTimeoutS float64  // --server-ready-timeout
	StartupS      float64  // --startup-s: expected seconds from server start to ready, for the estimate

	// The loads.
	RequestRates     []string  // --request-rate: inf (a closed loop) or requests/s
	MaxConcurrency   []int     // --max-concurrency
	RateFractions    []float64 // --rate-fraction: moderate loads at a fraction of the saturation throughput
	NumRuns          int       // --num-runs: process-level repeats of every configuration
	WarmupS          float64   // --warmup-seconds
	CleanSegmentS    float64   // --clean-segment-seconds
	NumCleanSegments int       // --num-clean-segments
	DrainAllowanceS  float64   // --drain-allowance-s
	WatchdogS        float64   // --watchdog-s
	Validate         string    // --validate: client or none
	RateTolerance    float64   // --rate-tolerance: the client validator's, for the moderate loads

	// The pattern: an existing manifest, or a synthetic one materialized
	// from loadgen materialize's flags.
	Manifest        string // --manifest
	ManifestPrivate bool   // --manifest-private: hashed only, never copied
	PatternID       string // --pattern-id
	PatternKind     string // --pattern-kind: synthetic or prefix-pool
	InputUniform    string // --input-uniform A:B
	InputMixture    string // --input-mixture JSON
	InputFixed      int    // --input-fixed
	OutputFixed     int    // --output-fixed
	NumPrefixes     int    // --num-prefixes
	PrefixLen       int    // --prefix-len
	SuffixFixed     int    // --suffix-fixed
	Arrival         string // --arrival
	NumRequests     int    // --num-requests
	WorkloadSeed    uint64 // --workload-seed
	VocabMin        int    // --vocab-min
	VocabMax        int    // --vocab-max

	// The budget.
	CapGPUHours      float64 // --cap-gpu-hours
	ConsumedGPUHours float64 // --consumed-gpu-hours
	BudgetUnit       string  // --budget-unit

	// The host.
	GPUs     string   // --gpus: GPU indices, a list such as 0,1 or 0-3: one slot each
	CPUs     string   // --cpus: the CPUs shared out among the slots; "" all of the host's
	Ports    []string // --ports: one per slot; none: auto
	Parallel int      // --parallel: the slots in use at once; 0 the widest configuration's GPUs

	// The rest of the protocol.
	Loadgen string   // --loadgen: the load client; "" the loadgen beside the controller
	Ledger  []string // --ledger: commands whose output is recorded at start
}

// DefaultArgs are the flags' defaults.
func DefaultArgs() Args {
	return Args{
		Name: "sweep", ServerKind: "auto", ReadyTimeoutS: 900, StartupS: 120,
		RequestRates: []string{"inf"}, MaxConcurrency: []int{256}, NumRuns: 1,
		WarmupS: 30, CleanSegmentS: 60, NumCleanSegments: 2, DrainAllowanceS: 60, WatchdogS: 120, Validate: "client", RateTolerance: 0.05,
		PatternKind: "synthetic", VocabMin: 1000, VocabMax: 30000,
		BudgetUnit: "GPU-hours", GPUs: "0",
	}
}

// FlagNames are the flags Args stands for, without their dashes: each
// error of Build names one of them.
var FlagNames = []string{
	"dir", "name", "serve-cmd", "server-kind", "model", "grid", "serve-params", "gpus-per-run", "server-ready-timeout", "startup-s",
	"request-rate", "max-concurrency", "rate-fraction", "num-runs", "warmup-seconds", "clean-segment-seconds",
	"num-clean-segments", "drain-allowance-s", "watchdog-s", "validate", "rate-tolerance",
	"manifest", "manifest-private", "pattern-id", "pattern-kind", "input-uniform", "input-mixture", "input-fixed",
	"output-fixed", "num-prefixes", "prefix-len", "suffix-fixed", "arrival", "num-requests", "workload-seed",
	"vocab-min", "vocab-max",
	"cap-gpu-hours", "consumed-gpu-hours", "budget-unit",
	"gpus", "cpus", "ports", "parallel",
	"loadgen", "ledger",
}

// FlagError is a flag whose value cannot make a protocol: it names the
// flag (without its dashes) and says why.
type FlagError struct {
	Flag string
	Err  error
}

func (e *FlagError) Error() string { return "--" + e.Flag + ": " + e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// flagErr returns a *FlagError for flag; flag must be one of FlagNames.
func flagErr(flag, format string, a ...any) error {
	if !slices.Contains(FlagNames, flag) {
		panic("sweep: no flag " + flag)
	}
	return &FlagError{Flag: flag, Err: fmt.Errorf(format, a...)}
}

// SplitWords splits a command line into words as a POSIX shell does,
// without expanding anything: blanks separate words; '...' is literal;
// in "..." a backslash escapes only \, ", $, ` and a newline; outside
// quotes a backslash escapes the next character (a newline: the line
// goes on). It is Python's shlex.split in its POSIX mode, which vllm bench
// sweep splits --serve-cmd with.
func SplitWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case r == '\'':
			inWord = true
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, errors.New("a single quote is not closed")
			}
			w.WriteString(string(rs[i+1 : j]))
			i = j
		case r == '"':
			inWord = true
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("\\\"$`\n", rs[j+1]) {
					j++
					if rs[j] != '\n' {
						w.WriteRune(rs[j])
					}
					continue
				}
				w.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, errors.New("a double quote is not closed")
			}
			i = j
		case r == '\\':
			if i+1 == len(rs) {
				return nil, errors.New("it ends in a backslash")
			}
			i++
			if rs[i] != '\n' {
				inWord = true
				w.WriteRune(rs[i])
			}
		default:
			inWord = true
			w.WriteRune(r)
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// shellQuote writes argv as a shell command line a reader can paste.
func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
