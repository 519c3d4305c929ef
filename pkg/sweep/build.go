package sweep

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"warden/internal/cpulist"
	"warden/pkg/dirlayout"
	"warden/pkg/loadgen"
)

// ProtocolFile is the protocol's name under the campaign directory's
// inputs/.
const ProtocolFile = "sweep.yaml"

// Env is what the sweep's command knows beside its flags.
type Env struct {
	// Dir is the campaign directory, absolute.
	Dir string
	// Workdir is where the sweep runs, absolute: the protocol's workdir,
	// where --serve-cmd's relative paths start.
	Workdir string
	// HostCPUs is how many logical CPUs this host has; CPUs are those
	// this process may run on (its affinity), the default --cpus (all
	// of 0..HostCPUs-1 when empty).
	HostCPUs int
	CPUs     []int
	// Controller is the controller's own binary, absolute: the
	// validators run it, and the default load client is beside it.
	Controller string
	// Now dates the protocol (frozen:, in UTC).
	Now time.Time
	// CommandLine is the sweep's own argv, written at the protocol's head.
	CommandLine []string
}

// Sweep is a checked sweep: what the protocol holds.
type Sweep struct {
	Args Args
	Env  Env

	Server             []string // the server command, ${PORT} in it
	Kind               string
	kindWhy            string // how the kind was chosen
	portWhy            string // what became of the port
	Configs            []Config
	Loads              []Load
	Pattern            Pattern
	Slots              []Slot
	HostGPUs, HostCPUs int
	Loadgen            string // absolute
	Ledger             [][]string
	// ExpectedS is each run's expected seconds, server start to cleanup.
	ExpectedS float64
	// Concurrency is the regime's: how many slots the sweep uses at once
	// (a run takes as many adjacent slots as it has GPUs).
	Concurrency int
}

// Config is one configuration: a combination of the grid.
type Config struct {
	ID     string
	Params []string // key=value, for the reader
	Args   []string // appended to the server command
	GPUs   int
	gpuWhy string
}

// Load is one load point of every configuration.
type Load struct {
	Name, Kind, LoadPoint string
	Rate                  string  // inf, requests/s, or "" for a moderate load
	Concurrency           int     // --max-concurrency of the client
	Fraction              float64 // a moderate load's fraction of the saturation throughput
	Validated             bool    // the client validator judges it
	why                   string
}

// Pattern is the sweep's one manifest.
type Pattern struct {
	ID   string
	Path string // absolute
	// Materialize is the synthetic manifest to write at Path; nil for an
	// existing manifest.
	Materialize *loadgen.Spec
	// MaterializeArgs is the loadgen materialize command line that writes
	// the same bytes.
	MaterializeArgs []string
	Private         bool
	// Rows and Arrival: an existing manifest's, read by Build; for a
	// synthetic one, the spec's.
	Rows    int
	Arrival loadgen.Arrival
}

// Slot is one GPU slot.
type Slot struct {
	Name string
	GPUs []int
	CPUs string
	Port int // 0: auto
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Build checks the flags and returns the sweep they describe. An error
// is a *FlagError naming the flag.
func Build(a Args, env Env) (*Sweep, error) {
	sw := &Sweep{Args: a, Env: env}
	for _, step := range []func() error{sw.checkName, sw.server, sw.configs, sw.slots, sw.pattern, sw.loads, sw.budget, sw.rest} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return sw, nil
}

func (sw *Sweep) checkName() error {
	// a protocol's commands and variables read $ as the start of a
	// variable: the paths the sweep writes into them must hold none
	if strings.Contains(sw.Env.Dir, "$") {
		return flagErr("dir", "%s: a campaign directory whose path holds '$' cannot be named in a protocol's commands", sw.Env.Dir)
	}
	if strings.Contains(sw.Env.Workdir, "$") || strings.Contains(sw.Env.Controller, "$") {
		return fmt.Errorf("the working directory %s or the controller %s holds '$', which a protocol's commands read as a variable: run controller sweep elsewhere", sw.Env.Workdir, sw.Env.Controller)
	}
	if !safeName.MatchString(sw.Args.Name) || strings.Contains(sw.Args.Name, "..") {
		return flagErr("name", "%q is not a safe path component: use letters, digits, '.', '_' and '-', starting with a letter or digit", sw.Args.Name)
	}
	return nil
}

// serverKinds are the kinds a sweep's server may be: those with a known
// readiness probe (a custom server needs one written by hand).
var serverKinds = []string{"vllm", "sglang", "vllm-omni", "sglang-omni", "standin"}

// portKinds take --port: the sweep adds --port ${PORT} to their command
// when it names no port (vLLM's and SGLang's --port, the stand-in's).
var portKinds = []string{"vllm", "sglang", "standin"}

func (sw *Sweep) server() error {
	a := sw.Args
	if strings.TrimSpace(a.ServeCmd) == "" {
		return flagErr("serve-cmd", "required: the server's command line, such as 'vllm serve Qwen/Qwen3-8B'")
	}
	argv, err := SplitWords(a.ServeCmd)
	if err != nil {
		return flagErr("serve-cmd", "%v", err)
	}
	if len(argv) == 0 {
		return flagErr("serve-cmd", "no words")
	}
	prog := filepath.Base(argv[0])
	switch kind := a.ServerKind; {
	case kind == "auto" || kind == "":
		switch {
		case prog == "vllm":
			sw.Kind = "vllm"
		case slices.Contains(argv, "sglang.launch_server") || prog == "sglang":
			sw.Kind = "sglang"
		case prog == "standin":
			sw.Kind = "standin"
		default:
			return flagErr("server-kind", "cannot tell the kind of server %s from --serve-cmd: give --server-kind %s", argv[0], strings.Join(serverKinds, ", "))
		}
		sw.kindWhy = "--server-kind auto: from --serve-cmd's program " + argv[0]
	case slices.Contains(serverKinds, kind):
		sw.Kind, sw.kindWhy = kind, "--server-kind"
	default:
		return flagErr("server-kind", "%q: want auto, %s (a custom server needs a readiness probe: write its protocol by hand)", kind, strings.Join(serverKinds, ", "))
	}
	hasVar := false
	for i, w := range argv {
		if strings.Contains(w, "${PORT}") {
			hasVar = true
		}
		if w == "--port" || strings.HasPrefix(w, "--port=") {
			given := strings.TrimPrefix(w, "--port=")
			if w == "--port" && i+1 < len(argv) {
				given = argv[i+1]
			}
			if !strings.Contains(given, "${PORT}") {
				return flagErr("serve-cmd", "gives --port %s: every slot has a port of its own; write --port '${PORT}' or leave --port out", given)
			}
		}
	}
	switch {
	case hasVar:
		sw.portWhy = "its ${PORT} is the slot's port"
	case slices.Contains(portKinds, sw.Kind):
		argv = append(argv, "--port", "${PORT}")
		sw.portWhy = "--port ${PORT} added: every slot has its own port"
	default:
		return flagErr("serve-cmd", "names no port: a %s server's command must say where it listens as ${PORT} (each slot has a port of its own)", sw.Kind)
	}
	sw.Server = argv
	if a.Model == "" {
		return flagErr("model", "required: the model name the client sends with each request (the server's served model name)")
	}
	if !(a.ReadyTimeoutS > 0) || math.IsInf(a.ReadyTimeoutS, 0) {
		return flagErr("server-ready-timeout", "%v: want a positive number of seconds", a.ReadyTimeoutS)
	}
	if !(a.StartupS >= 0) || math.IsInf(a.StartupS, 0) {
		return flagErr("startup-s", "%v: want seconds, not negative", a.StartupS)
	}
	return nil
}

// tpKeys and ppKeys are the flags whose product is a run's GPUs: the
// tensor- and pipeline-parallel sizes of vLLM (ParallelConfig's
// world_size, "TPxPP") and SGLang (tp_size, pp_size, and
// --tensor-parallel-size, its alias of --tp-size), and the stand-in's --tp
// (docs/servers.md).
var (
	tpKeys = []string{"tensor-parallel-size", "tp-size", "tp"}
	ppKeys = []string{"pipeline-parallel-size", "pp-size"}
)

func (sw *Sweep) configs() error {
	a := sw.Args
	var combos []namedCombo
	flag := "grid"
	switch {
	case len(a.Grid) > 0 && a.ServeParams != "":
		return flagErr("serve-params", "give --grid or --serve-params, not both")
	case a.ServeParams != "":
		path := a.ServeParams
		if !filepath.IsAbs(path) {
			path = filepath.Join(sw.Env.Workdir, path)
		}
		var err error
		if combos, err = parseServeParams(path); err != nil {
			return err
		}
		flag = "serve-params"
	default:
		grid, err := parseGrid(a.Grid)
		if err != nil {
			return err
		}
		for _, ps := range grid {
			combos = append(combos, namedCombo{params: ps})
		}
	}
	if a.GPUsPerRun < 0 {
		return flagErr("gpus-per-run", "%d: want a number of GPUs, or 0 to count the parallel sizes", a.GPUsPerRun)
	}
	// what the server command itself gives, for every configuration
	base := map[string]string{}
	for i, w := range sw.Server {
		k, v, eq := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		if !strings.HasPrefix(w, "--") {
			continue
		}
		if !eq && i+1 < len(sw.Server) {
			v = sw.Server[i+1]
		}
		base[param{key: k}.cliKey()] = v
	}
	ids := map[string]string{}
	for _, c := range combos {
		cfg := Config{ID: c.name}
		sizes := map[string]string{}
		for k, v := range base {
			if slices.Contains(tpKeys, k) || slices.Contains(ppKeys, k) {
				sizes[k] = v
			}
		}
		var parts []string
		for _, p := range c.params {
			k := p.cliKey()
			for _, given := range []string{k, "no-" + k} {
				if _, ok := base[given]; ok {
					return flagErr(flag, "%s: --serve-cmd already gives --%s; leave it out of --serve-cmd (the sweep appends each configuration's arguments to it)", p.text(), given)
				}
			}
			if slices.Contains(tpKeys, k) || slices.Contains(ppKeys, k) {
				sizes[k] = p.value
			}
			cfg.Params = append(cfg.Params, p.text())
			cfg.Args = append(cfg.Args, p.args()...)
			parts = append(parts, p.idPart())
		}
		if cfg.ID == "" {
			cfg.ID = strings.Join(parts, "_")
		}
		if cfg.ID == "" {
			cfg.ID = "default"
		}
		if !safeName.MatchString(cfg.ID) || strings.Contains(cfg.ID, "..") {
			return flagErr(flag, "configuration %q: its name is not a safe path component (letters, digits, '.', '_' and '-', starting with a letter or digit)", cfg.ID)
		}
		if prev, dup := ids[cfg.ID]; dup {
			return flagErr(flag, "configurations %s and %s both become %q: name them apart (in --serve-params, with _benchmark_name)", prev, strings.Join(cfg.Params, " "), cfg.ID)
		}
		ids[cfg.ID] = strings.Join(cfg.Params, " ")
		gpus, why, err := runGPUs(sizes, a.GPUsPerRun)
		if err != nil {
			return flagErr(flag, "configuration %s: %v", cfg.ID, err)
		}
		cfg.GPUs, cfg.gpuWhy = gpus, why
		sw.Configs = append(sw.Configs, cfg)
	}
	return nil
}

// runGPUs is a configuration's GPUs: --gpus-per-run when given, else the
// product of its tensor- and pipeline-parallel sizes (1 each by default).
func runGPUs(sizes map[string]string, perRun int) (int, string, error) {
	if perRun > 0 {
		return perRun, "--gpus-per-run", nil
	}
	n := 1
	var why []string
	for _, keys := range [][]string{tpKeys, ppKeys} {
		for _, k := range keys {
			v, ok := sizes[k]
			if !ok {
				continue
			}
			s, err := strconv.Atoi(v)
			if err != nil || s < 1 {
				return 0, "", fmt.Errorf("--%s %s: want a whole number of GPUs, at least 1", k, v)
			}
			n *= s
			why = append(why, k+" "+v)
			break
		}
	}
	if len(why) == 0 {
		return 1, "", nil
	}
	return n, strings.Join(why, " x "), nil
}

func (sw *Sweep) slots() error {
	a := sw.Args
	gpus, err := cpulist.Parse(a.GPUs)
	if err != nil || len(gpus) == 0 {
		return flagErr("gpus", "%q: want GPU indices, such as 0 or 0,1 or 0-3", a.GPUs)
	}
	hostCPUs := max(sw.Env.HostCPUs, 1)
	cpus := slices.Clone(sw.Env.CPUs)
	if len(cpus) == 0 {
		for i := range hostCPUs {
			cpus = append(cpus, i)
		}
	}
	if a.CPUs != "" {
		if cpus, err = cpulist.Parse(a.CPUs); err != nil || len(cpus) == 0 {
			return flagErr("cpus", "%q: want a CPU list, such as 0-15 or 0,2,4-7", a.CPUs)
		}
	}
	share := len(cpus) / len(gpus)
	if share == 0 {
		return flagErr("cpus", "%d CPUs among %d GPU slots: each slot needs at least one", len(cpus), len(gpus))
	}
	if len(a.Ports) > 0 && len(a.Ports) != len(gpus) {
		return flagErr("ports", "%d ports for %d GPU slots (--gpus %s): give one per slot, or none for ports chosen free at start", len(a.Ports), len(gpus), a.GPUs)
	}
	for i, g := range gpus {
		s := Slot{Name: "gpu" + strconv.Itoa(g), GPUs: []int{g}, CPUs: cpulist.Format(cpus[i*share : (i+1)*share])}
		if len(a.Ports) > 0 {
			p, err := strconv.Atoi(a.Ports[i])
			if err != nil || p < 1 || p > 65535 {
				return flagErr("ports", "%q: want a TCP port number", a.Ports[i])
			}
			s.Port = p
		}
		sw.Slots = append(sw.Slots, s)
		sw.HostGPUs = max(sw.HostGPUs, g+1)
	}
	sw.HostCPUs = max(hostCPUs, slices.Max(cpus)+1)
	for _, c := range sw.Configs {
		if c.GPUs > len(sw.Slots) {
			return flagErr("gpus", "configuration %s needs %d GPUs (%s); --gpus %s gives %d", c.ID, c.GPUs, c.gpuWhy, a.GPUs, len(sw.Slots))
		}
	}
	widest := 1
	for _, c := range sw.Configs {
		widest = max(widest, c.GPUs)
	}
	switch {
	case a.Parallel == 0:
		sw.Concurrency = widest
	case a.Parallel < widest || a.Parallel > len(sw.Slots):
		return flagErr("parallel", "%d: want %d to %d: the widest configuration takes %d slots, --gpus gives %d", a.Parallel, widest, len(sw.Slots), widest, len(sw.Slots))
	default:
		sw.Concurrency = a.Parallel
	}
	return nil
}

func (sw *Sweep) pattern() error {
	a := sw.Args
	synthetic := map[string]bool{
		"input-uniform": a.InputUniform != "", "input-mixture": a.InputMixture != "", "input-fixed": a.InputFixed != 0,
		"output-fixed": a.OutputFixed != 0, "num-requests": a.NumRequests != 0, "arrival": a.Arrival != "",
		"num-prefixes": a.NumPrefixes != 0, "prefix-len": a.PrefixLen != 0, "suffix-fixed": a.SuffixFixed != 0,
	}
	if a.Manifest != "" {
		for _, f := range []string{"input-uniform", "input-mixture", "input-fixed", "output-fixed", "num-requests", "arrival", "num-prefixes", "prefix-len", "suffix-fixed"} {
			if synthetic[f] {
				return flagErr(f, "goes with a synthetic pattern, not with --manifest")
			}
		}
		return sw.existingManifest()
	}
	if a.ManifestPrivate {
		return flagErr("manifest-private", "goes with --manifest: a synthetic manifest holds no private text")
	}
	id := a.PatternID
	if id == "" {
		id = "synthetic"
	}
	if !safeName.MatchString(id) || strings.Contains(id, "..") {
		return flagErr("pattern-id", "%q is not a safe path component", id)
	}
	spec := loadgen.Spec{ID: id, Kind: a.PatternKind, OutputTokens: a.OutputFixed, Prefix: "none",
		NumRequests: a.NumRequests, Seed: a.WorkloadSeed, VocabMin: a.VocabMin, VocabMax: a.VocabMax,
		NumPrefixes: a.NumPrefixes, PrefixLen: a.PrefixLen, SuffixLen: a.SuffixFixed}
	margs := []string{"loadgen", "materialize", "--id", id, "--kind", a.PatternKind}
	given := 0
	for _, f := range []string{"input-uniform", "input-mixture", "input-fixed"} {
		if synthetic[f] {
			given++
		}
	}
	switch a.PatternKind {
	case "synthetic":
		if given != 1 {
			return flagErr("input-uniform", "a synthetic pattern needs exactly one of --input-uniform A:B, --input-mixture JSON and --input-fixed N (or give --manifest)")
		}
		for _, f := range []string{"num-prefixes", "prefix-len", "suffix-fixed"} {
			if synthetic[f] {
				return flagErr(f, "goes with --pattern-kind prefix-pool")
			}
		}
		switch {
		case a.InputUniform != "":
			c, err := loadgen.ParseUniform(a.InputUniform)
			if err != nil {
				return flagErr("input-uniform", "%v", err)
			}
			spec.Input = loadgen.Mixture{c}
			margs = append(margs, "--input-uniform", a.InputUniform)
		case a.InputMixture != "":
			m, err := loadgen.ParseMixture(a.InputMixture)
			if err != nil {
				return flagErr("input-mixture", "%v", err)
			}
			spec.Input = m
			margs = append(margs, "--input-mixture", a.InputMixture)
		default:
			if a.InputFixed < 1 {
				return flagErr("input-fixed", "%d: want at least 1 token", a.InputFixed)
			}
			spec.Input = loadgen.Mixture{{Min: a.InputFixed, Max: a.InputFixed, Weight: 1}}
			margs = append(margs, "--input-fixed", strconv.Itoa(a.InputFixed))
		}
		margs = append(margs, "--prefix", "none")
	case "prefix-pool":
		if given > 0 {
			return flagErr("input-uniform", "--input-uniform, --input-mixture and --input-fixed go with --pattern-kind synthetic")
		}
		for f, v := range map[string]int{"num-prefixes": a.NumPrefixes, "prefix-len": a.PrefixLen, "suffix-fixed": a.SuffixFixed} {
			if v < 1 {
				return flagErr(f, "a prefix-pool pattern needs --num-prefixes, --prefix-len and --suffix-fixed, all positive")
			}
		}
		spec.Prefix = "pool"
		margs = append(margs, "--num-prefixes", strconv.Itoa(a.NumPrefixes), "--prefix-len", strconv.Itoa(a.PrefixLen), "--suffix-fixed", strconv.Itoa(a.SuffixFixed))
	default:
		return flagErr("pattern-kind", "%q: want synthetic or prefix-pool", a.PatternKind)
	}
	if a.OutputFixed < 1 {
		return flagErr("output-fixed", "required: the output tokens of every request, at least 1")
	}
	if a.NumRequests < 1 {
		return flagErr("num-requests", "required: the manifest's rows, at least 1 (an open loop needs rate x admission seconds of them)")
	}
	if a.VocabMin < 0 || a.VocabMax-a.VocabMin < 2 {
		return flagErr("vocab-min", "[%d, %d): the vocabulary is empty or too small", a.VocabMin, a.VocabMax)
	}
	arrival := a.Arrival
	if arrival == "" {
		arrival = "steady"
	}
	arr, err := loadgen.ParseArrival(arrival)
	if err != nil {
		return flagErr("arrival", "%v", err)
	}
	spec.Arrival = arr
	path := filepath.Join(sw.Env.Dir, dirlayout.InputsDir, id+".jsonl")
	margs = append(margs, "--output-fixed", strconv.Itoa(a.OutputFixed), "--arrival", arrival, "--num-requests", strconv.Itoa(a.NumRequests),
		"--workload-seed", strconv.FormatUint(a.WorkloadSeed, 10), "--vocab-min", strconv.Itoa(a.VocabMin), "--vocab-max", strconv.Itoa(a.VocabMax), "--out", path)
	sw.Pattern = Pattern{ID: id, Path: path, Materialize: &spec, MaterializeArgs: margs, Rows: a.NumRequests, Arrival: arr}
	return nil
}

// existingManifest reads --manifest: its rows and arrival class, which the
// open-loop rates are checked against.
func (sw *Sweep) existingManifest() error {
	a := sw.Args
	path := a.Manifest
	if !filepath.IsAbs(path) {
		path = filepath.Join(sw.Env.Workdir, path)
	}
	path = filepath.Clean(path)
	if strings.HasPrefix(path, filepath.Clean(sw.Env.Dir)+string(filepath.Separator)) {
		return flagErr("manifest", "%s is inside the campaign directory %s, which the sweep creates: keep it elsewhere", path, sw.Env.Dir)
	}
	if strings.Contains(path, "$") {
		return flagErr("manifest", "%s: a path holding '$' cannot be named in a protocol's variables", path)
	}
	m, err := loadgen.OpenManifest(path)
	if err != nil {
		return flagErr("manifest", "%v", err)
	}
	defer m.Close()
	id := a.PatternID
	if id == "" {
		id = idUnsafe.ReplaceAllString(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), "-")
		id = strings.TrimLeft(id, ".-")
	}
	if !safeName.MatchString(id) || strings.Contains(id, "..") {
		return flagErr("pattern-id", "%q is not a safe path component", id)
	}
	sw.Pattern = Pattern{ID: id, Path: path, Private: a.ManifestPrivate, Rows: m.Len(), Arrival: m.Arrival}
	return nil
}

// rateText is a number as the client's flag takes it.
func rateText(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func (sw *Sweep) loads() error {
	a := sw.Args
	if len(a.RequestRates) == 0 {
		return flagErr("request-rate", "give at least one: inf (a closed loop) or requests per second")
	}
	if len(a.MaxConcurrency) == 0 {
		return flagErr("max-concurrency", "give at least one")
	}
	var rates []float64 // 0: inf
	for _, r := range a.RequestRates {
		v := 0.0
		if r != "inf" {
			f, err := strconv.ParseFloat(r, 64)
			if err != nil || !(f > 0) || math.IsInf(f, 0) {
				return flagErr("request-rate", "%q: want inf or a positive number of requests per second", r)
			}
			v = f
		}
		if slices.Contains(rates, v) {
			return flagErr("request-rate", "%s is given twice", r)
		}
		rates = append(rates, v)
	}
	for i, c := range a.MaxConcurrency {
		if c < 1 {
			return flagErr("max-concurrency", "%d: want at least 1 request", c)
		}
		if slices.Contains(a.MaxConcurrency[:i], c) {
			return flagErr("max-concurrency", "%d is given twice", c)
		}
	}
	if a.WarmupS < 0 || math.IsInf(a.WarmupS, 0) || math.IsNaN(a.WarmupS) {
		return flagErr("warmup-seconds", "%v: want seconds, not negative", a.WarmupS)
	}
	if !(a.CleanSegmentS > 0) || math.IsInf(a.CleanSegmentS, 0) {
		return flagErr("clean-segment-seconds", "%v: want a positive number of seconds", a.CleanSegmentS)
	}
	if a.NumCleanSegments < 1 {
		return flagErr("num-clean-segments", "%d: want at least 1", a.NumCleanSegments)
	}
	if !(a.DrainAllowanceS > 0) || math.IsInf(a.DrainAllowanceS, 0) {
		return flagErr("drain-allowance-s", "%v: want a positive number of seconds", a.DrainAllowanceS)
	}
	if !(a.WatchdogS >= a.DrainAllowanceS) || math.IsInf(a.WatchdogS, 0) {
		return flagErr("watchdog-s", "%v: want at least --drain-allowance-s (%v)", a.WatchdogS, a.DrainAllowanceS)
	}
	if a.Validate != "client" && a.Validate != "none" {
		return flagErr("validate", "%q: want client or none", a.Validate)
	}
	if !(a.RateTolerance >= 0) || math.IsInf(a.RateTolerance, 0) {
		return flagErr("rate-tolerance", "%v: want a relative tolerance, not negative", a.RateTolerance)
	}
	if a.NumRuns < 1 {
		return flagErr("num-runs", "%d: want at least 1", a.NumRuns)
	}
	validated := a.Validate == "client"
	admission := time.Duration((a.WarmupS + float64(a.NumCleanSegments)*a.CleanSegmentS) * float64(time.Second))
	several := len(a.MaxConcurrency) > 1
	for _, r := range rates {
		for _, c := range a.MaxConcurrency {
			l := Load{Concurrency: c}
			cs := strconv.Itoa(c)
			switch {
			case r == 0 && !several:
				l.Name, l.Kind, l.LoadPoint, l.Rate = "saturation", "saturation", "saturation", "inf"
				l.why = "--request-rate inf --max-concurrency " + cs + ": a closed loop of " + cs + " requests"
			case r == 0:
				l.Name, l.Kind, l.LoadPoint, l.Rate = "closed-c"+cs, "closed-loop", "closed-loop", "inf"
				l.why = "--request-rate inf --max-concurrency " + cs + ": a closed loop of " + cs + " requests"
			default:
				l.Name, l.Kind, l.LoadPoint, l.Rate = "rate-"+rateText(r), "open-loop", "open-loop", rateText(r)
				if several {
					l.Name += "-c" + cs
				}
				l.why = "--request-rate " + rateText(r) + " --max-concurrency " + cs + ": an open loop at " + rateText(r) + " requests/s, at most " + cs + " outstanding"
				need, err := loadgen.CountBefore(sw.Pattern.Arrival, r, a.WorkloadSeed, admission)
				if err != nil {
					return flagErr("request-rate", "%s: %v", rateText(r), err)
				}
				if need > int64(sw.Pattern.Rows) {
					flag := "num-requests"
					if a.Manifest != "" {
						flag = "manifest"
					}
					return flagErr(flag, "%d rows, but --request-rate %s plans %d requests over the %v of warm-up and clean segments (loadgen refuses a manifest shorter than that)",
						sw.Pattern.Rows, rateText(r), need, admission)
				}
			}
			l.Validated = validated && r == 0
			sw.Loads = append(sw.Loads, l)
		}
	}
	for i, f := range a.RateFractions {
		if !(f > 0) || math.IsInf(f, 0) {
			return flagErr("rate-fraction", "%v: want a positive fraction of the saturation throughput", f)
		}
		if slices.Contains(a.RateFractions[:i], f) {
			return flagErr("rate-fraction", "%v is given twice", f)
		}
		if !slices.ContainsFunc(sw.Loads, func(l Load) bool { return l.Name == "saturation" }) {
			return flagErr("rate-fraction", "a moderate load needs the saturation load's throughput: give --request-rate inf with one --max-concurrency")
		}
		c := a.MaxConcurrency[0]
		sw.Loads = append(sw.Loads, Load{Name: "moderate-" + rateText(f), Kind: "moderate", LoadPoint: "moderate", Concurrency: c, Fraction: f, Validated: validated,
			why: "--rate-fraction " + rateText(f) + ": an open loop at " + rateText(f) + " x the saturation run's clean throughput, at most " + strconv.Itoa(c) + " outstanding"})
	}
	sw.ExpectedS = a.StartupS + a.WarmupS + float64(a.NumCleanSegments)*a.CleanSegmentS + a.DrainAllowanceS
	return nil
}

func (sw *Sweep) budget() error {
	a := sw.Args
	if !(a.CapGPUHours > 0) || math.IsInf(a.CapGPUHours, 0) {
		return flagErr("cap-gpu-hours", "required: the campaign's GPU-hour cap, a positive number (controller plan shows what the sweep would spend)")
	}
	if !(a.ConsumedGPUHours >= 0) || math.IsInf(a.ConsumedGPUHours, 0) {
		return flagErr("consumed-gpu-hours", "%v: want GPU-hours spent before, not negative", a.ConsumedGPUHours)
	}
	if strings.TrimSpace(a.BudgetUnit) == "" {
		return flagErr("budget-unit", "empty: say what a GPU-hour is here, such as H200-hours")
	}
	return nil
}

func (sw *Sweep) rest() error {
	a := sw.Args
	lg := a.Loadgen
	if lg == "" {
		lg = filepath.Join(filepath.Dir(sw.Env.Controller), "loadgen")
	} else if !filepath.IsAbs(lg) {
		lg = filepath.Join(sw.Env.Workdir, lg)
	}
	if fi, err := os.Stat(lg); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		why := "not an executable file"
		if err != nil {
			why = err.Error()
		}
		return flagErr("loadgen", "the load client %s: %s (make build puts loadgen beside the controller; name another with --loadgen)", lg, why)
	}
	if strings.Contains(lg, "$") {
		return flagErr("loadgen", "%s: a path holding '$' cannot be named in a protocol's commands", lg)
	}
	sw.Loadgen = lg
	for _, l := range a.Ledger {
		argv, err := SplitWords(l)
		if err != nil || len(argv) == 0 {
			return flagErr("ledger", "%q: want a command line (%v)", l, err)
		}
		sw.Ledger = append(sw.Ledger, argv)
	}
	return nil
}
