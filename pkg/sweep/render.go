package sweep

import (
	"fmt"
	"strconv"
	"strings"
)

// ManifestInfo is what the protocol's comments say of the manifest: its
// rows and SHA-256, as materialized or read.
type ManifestInfo struct {
	Rows   int
	SHA256 string
}

// yq is s as a YAML double-quoted scalar: Go's quoting uses only escapes
// YAML's double-quoted style has (\", \\, \n, \t, \xXX, \uXXXX, ...).
func yq(s string) string { return strconv.Quote(s) }

// yflow is a list of strings as a YAML flow sequence.
func yflow(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = yq(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// writer writes the protocol's lines, a comment beside each where there
// is one, aligned.
type writer struct {
	b strings.Builder
}

const commentColumn = 48

func (w *writer) line(text, comment string) {
	w.b.WriteString(text)
	if comment != "" {
		pad := commentColumn - len(text)
		if pad < 2 {
			pad = 2
		}
		w.b.WriteString(strings.Repeat(" ", pad))
		w.b.WriteString("# ")
		w.b.WriteString(comment)
	}
	w.b.WriteString("\n")
}

// wrapWidth is the width a long flow sequence wraps at.
const wrapWidth = 110

// wrapped writes a flow sequence after head, wrapped at wrapWidth, its
// continuation lines indented under its first item.
func (w *writer) wrapped(head string, ss []string) {
	line := head + "["
	indent := strings.Repeat(" ", len(head)+1)
	for i, s := range ss {
		item := yq(s)
		if i < len(ss)-1 {
			item += ","
		} else {
			item += "]"
		}
		if i > 0 && len(line)+1+len(item) > wrapWidth {
			w.b.WriteString(line + "\n")
			line = indent + item
			continue
		}
		if i > 0 {
			line += " "
		}
		line += item
	}
	w.b.WriteString(line + "\n")
}

// comment writes a comment block, each line prefixed with indent and "# ".
func (w *writer) comment(indent string, lines ...string) {
	for _, l := range lines {
		if l == "" {
			w.b.WriteString(indent + "#\n")
			continue
		}
		w.b.WriteString(indent + "# " + l + "\n")
	}
}

// Protocol renders the sweep's protocol. m is the manifest's rows and
// hash, for the comments.
func (sw *Sweep) Protocol(m ManifestInfo) []byte {
	a, env := sw.Args, sw.Env
	w := &writer{}
	date := env.Now.UTC().Format("2006-01-02")
	w.comment("",
		"A config sweep, written by controller sweep on "+date+" (UTC). It is a normal",
		"Warden protocol: controller sweep starts it as `controller start -f THIS -d DIR`",
		"does, `controller plan -f THIS` plans it, and it changes only by an amendment",
		"(controller amend). The comment beside a line names the flag it came from.",
		"",
		"The command that wrote it:")
	if len(env.CommandLine) > 0 {
		w.comment("", wrapCommand(env.CommandLine)...)
	}
	w.line("warden: 1", "")
	w.line("name: "+yq(a.Name), "--name")
	w.line("title: "+yq(sw.title()), "")
	w.line("frozen: "+yq(date), "the day controller sweep wrote it")
	w.line("workdir: "+yq(env.Workdir), "where controller sweep ran: --serve-cmd's relative paths start here")
	w.line(fmt.Sprintf("host: {gpus: %d, cpus: %d}", sw.HostGPUs, sw.HostCPUs), "--gpus (the highest index + 1); this host's CPUs")
	w.line("budget:", "")
	w.line("  cap_gpu_hours: "+num(a.CapGPUHours), "--cap-gpu-hours")
	if a.ConsumedGPUHours > 0 {
		w.line("  consumed_gpu_hours: "+num(a.ConsumedGPUHours), "--consumed-gpu-hours")
	}
	w.line("  unit: "+yq(a.BudgetUnit), "--budget-unit")
	w.line("vars:", "")
	w.line("  LOADGEN: "+yq(sw.Loadgen), "--loadgen: the load client")
	if sw.validated() {
		w.line("  CONTROLLER: "+yq(env.Controller), "the controller that wrote this: its client validator")
	}
	w.line("provenance:", "hashed at start, checked before every wave and at resume")
	w.line("  - {path: "+yq(sw.Loadgen)+", role: client}", "")
	pc := "--manifest"
	if sw.Pattern.Materialize != nil {
		pc = "materialized by controller sweep"
	}
	pc += fmt.Sprintf(": %d rows, sha256 %s", m.Rows, m.SHA256)
	if sw.Pattern.Private {
		w.line("  - {path: "+yq(sw.Pattern.Path)+", role: manifest, private: true}", pc+"; --manifest-private: hashed only, never copied")
	} else {
		w.line("  - {path: "+yq(sw.Pattern.Path)+", role: manifest}", pc)
	}
	if sw.Pattern.Materialize != nil {
		w.comment("    ", append([]string{"the same bytes as:"}, wrapCommand(sw.Pattern.MaterializeArgs)...)...)
	}
	if len(sw.Ledger) > 0 {
		w.line("ledger:", "--ledger: output recorded at start under DIR/provenance/ledger")
		for _, l := range sw.Ledger {
			w.line("  - "+yflow(l), "")
		}
	}
	w.line("slots:", "--gpus, one slot each; --cpus shared out; --ports ("+portsWord(a)+")")
	for _, s := range sw.Slots {
		port := "auto"
		if s.Port > 0 {
			port = strconv.Itoa(s.Port)
		}
		w.line(fmt.Sprintf("  - {name: %s, gpus: [%s], cpus: %s, port: %s}", s.Name, intList(s.GPUs), yq(s.CPUs), port), "")
	}
	var slotNames []string
	for _, s := range sw.Slots[:sw.Concurrency] {
		slotNames = append(slotNames, s.Name)
	}
	w.line("regimes:", "")
	rc := "--parallel"
	if a.Parallel == 0 {
		rc += " (the widest configuration's GPUs)"
	}
	if sw.Concurrency == 1 {
		rc += ": one run at a time"
	} else {
		rc += fmt.Sprintf(": %d slots in use at once, narrower runs side by side without a co-location check", sw.Concurrency)
	}
	w.line(fmt.Sprintf("  - {name: sweep, concurrency: %d, slots: [%s]}", sw.Concurrency, strings.Join(slotNames, ", ")), rc)
	w.line("classes:", "")
	w.line(fmt.Sprintf("  - {name: sweep, drain_allowance_s: %s, watchdog_s: %s}", num(a.DrainAllowanceS), num(a.WatchdogS)), "--drain-allowance-s, --watchdog-s")
	w.line("retries: {infrastructure: 1}", "one exact rerun of an infrastructure failure")
	sw.renderServer(w)
	sw.renderLoads(w)
	sw.renderValidators(w)
	sw.renderAxes(w)
	return []byte(w.b.String())
}

// wrapCommand is argv as shell command lines of about 90 columns, each
// but the last ending in a backslash, a flag beside its value.
func wrapCommand(argv []string) []string {
	var lines []string
	line := " "
	for i := 0; i < len(argv); i++ {
		word := shellQuote(argv[i : i+1])
		if strings.HasPrefix(argv[i], "-") && i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
			// a flag and its value stay on one line
			i++
			word += " " + shellQuote(argv[i:i+1])
		}
		if len(line) > 2 && len(line)+1+len(word) > 90 {
			lines = append(lines, line+" \\")
			line = "   "
		}
		line += " " + word
	}
	return append(lines, line)
}

func portsWord(a Args) string {
	if len(a.Ports) == 0 {
		return "auto: chosen free at start"
	}
	return strings.Join(a.Ports, ",")
}

func intList(is []int) string {
	s := make([]string, len(is))
	for i, v := range is {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ", ")
}

func (sw *Sweep) title() string {
	var keys []string
	seen := map[string]bool{}
	for _, c := range sw.Configs {
		for _, p := range c.Params {
			k, _, _ := strings.Cut(p, "=")
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	t := fmt.Sprintf("Sweep of %s: %d configuration(s) x %d load(s)", sw.Server[0], len(sw.Configs), len(sw.Loads))
	if len(keys) > 0 {
		t += " over " + strings.Join(keys, ", ")
	}
	return t
}

func (sw *Sweep) validated() bool {
	for _, l := range sw.Loads {
		if l.Validated {
			return true
		}
	}
	return false
}

func (sw *Sweep) renderServer(w *writer) {
	w.line("servers:", "")
	w.line("  - name: server", "")
	w.line("    kind: "+sw.Kind, sw.kindWhy)
	w.line("    command: "+yflow(sw.Server), "--serve-cmd; "+sw.portWhy)
	w.line("    ready_timeout_s: "+num(sw.Args.ReadyTimeoutS), "--server-ready-timeout")
}

// client is the load's loadgen run command line.
func (sw *Sweep) client(l Load) []string {
	a := sw.Args
	c := []string{"${LOADGEN}", "run", "--manifest", "${MANIFEST}", "--base-url", "http://127.0.0.1:${PORT}", "--model", a.Model,
		"--load-point", l.LoadPoint}
	if l.Kind == "moderate" {
		c = append(c, "--saturation-result", "${NEED_SATURATION_DIR}/client/result.json", "--rate-fraction", num(l.Fraction))
	} else {
		c = append(c, "--request-rate", l.Rate)
	}
	return append(c, "--max-concurrency", strconv.Itoa(l.Concurrency), "--ignore-eos", "--temperature", "0",
		"--warmup-seconds", num(a.WarmupS), "--clean-segment-seconds", num(a.CleanSegmentS),
		"--num-clean-segments", strconv.Itoa(a.NumCleanSegments), "--drain-timeout-seconds", "${DRAIN_WATCHDOG_S}",
		"--workload-seed", strconv.FormatUint(a.WorkloadSeed, 10), "--result-dir", "${ATTEMPT_DIR}/client")
}

func (sw *Sweep) renderLoads(w *writer) {
	a := sw.Args
	w.comment("", fmt.Sprintf("Each load runs against a fresh server. expected_s is --startup-s %s + --warmup-seconds %s",
		num(a.StartupS), num(a.WarmupS)),
		fmt.Sprintf("+ --num-clean-segments %d x --clean-segment-seconds %s + --drain-allowance-s %s;",
			a.NumCleanSegments, num(a.CleanSegmentS), num(a.DrainAllowanceS)),
		"the client is --model, --warmup-seconds, --clean-segment-seconds, --num-clean-segments,",
		"--workload-seed, and the load's own rate and concurrency.")
	w.line("loads:", "--request-rate x --max-concurrency, then --rate-fraction")
	for _, l := range sw.Loads {
		w.line("  - name: "+l.Name, l.why)
		w.line("    kind: "+l.Kind, "")
		if l.Kind == "moderate" {
			w.line("    needs: [saturation]", "the saturation run of the same configuration runs first")
		}
		w.line("    expected_s: "+num(sw.ExpectedS), "")
		w.line("    manifest: \"${MANIFEST}\"", "the client's manifest hash is checked against the campaign's")
		w.wrapped("    client: ", sw.client(l))
	}
}

func (sw *Sweep) renderValidators(w *writer) {
	a := sw.Args
	if a.Validate == "none" {
		w.comment("", "No validators: --validate none.")
		return
	}
	var closed, open []string
	for _, l := range sw.Loads {
		switch {
		case l.Validated && l.Kind != "moderate":
			closed = append(closed, l.Name)
		case !l.Validated:
			open = append(open, l.Name)
		}
	}
	if len(open) > 0 {
		w.comment("", "--validate client: Warden's client validator judges the closed loops and the",
			"moderate loads; it judges an open loop's rate only against a saturation result, so the",
			"fixed-rate loads ("+strings.Join(open, ", ")+") have no validator.")
	}
	if !sw.validated() {
		return
	}
	w.line("validators:", "--validate client")
	base := []string{"${CONTROLLER}", "validate", "client", "--result-dir", "${ATTEMPT_DIR}/client",
		"--segments", strconv.Itoa(a.NumCleanSegments), "--segment-seconds", num(a.CleanSegmentS)}
	if len(closed) > 0 {
		w.line("  - name: client", "")
		w.line("    loads: ["+strings.Join(closed, ", ")+"]", "")
		w.wrapped("    command: ", append(append([]string(nil), base...), "-o", "json"))
	}
	for _, l := range sw.Loads {
		if l.Kind != "moderate" || !l.Validated {
			continue
		}
		w.line("  - name: client-"+l.Name, "")
		w.line("    loads: ["+l.Name+"]", "")
		cmd := append(append([]string(nil), base...), "--saturation-result", "${NEED_SATURATION_DIR}/client/result.json", "--rate-fraction", num(l.Fraction), "--rate-tolerance", num(a.RateTolerance), "-o", "json")
		w.wrapped("    command: ", cmd)
	}
}

func (sw *Sweep) renderAxes(w *writer) {
	a := sw.Args
	src := "--grid: one configuration per combination, in the product's order"
	switch {
	case a.ServeParams != "":
		src = "--serve-params " + a.ServeParams + ": one configuration per combination"
	case len(a.Grid) == 0:
		src = "no --grid: the server command as given"
	}
	w.line("axes:", "")
	w.line("  - name: config", src+"; its arguments are appended to the server command")
	w.line("    values:", "")
	var ids []string
	for _, c := range sw.Configs {
		ids = append(ids, c.ID)
		v := "      - {id: " + yq(c.ID)
		if c.GPUs > 1 {
			v += fmt.Sprintf(", gpus: %d", c.GPUs)
		}
		if len(c.Args) > 0 {
			v += ", server_args: " + yflow(c.Args)
		}
		v += "}"
		comment := strings.Join(c.Params, " ")
		switch {
		case c.gpuWhy != "" && c.GPUs == 1:
			comment += " (1 GPU: " + c.gpuWhy + ")"
		case c.gpuWhy != "":
			comment += fmt.Sprintf(" (%d GPUs: %s)", c.GPUs, c.gpuWhy)
		}
		w.line(v, comment)
	}
	w.line("  - name: pattern", "")
	w.line("    values:", "")
	w.line("      - {id: "+yq(sw.Pattern.ID)+", class: sweep, vars: {MANIFEST: "+yq(sw.Pattern.Path)+"}}", "--pattern-id")
	w.line("phases:", "")
	w.line("  - name: sweep", "")
	w.line("    kind: primary", "")
	qids := make([]string, len(ids))
	for i, id := range ids {
		qids[i] = yq(id)
	}
	w.line("    matrix: {config: ["+strings.Join(qids, ", ")+"], pattern: "+yq(sw.Pattern.ID)+"}", "")
	var loads []string
	for _, l := range sw.Loads {
		loads = append(loads, l.Name)
	}
	w.line("    loads: ["+strings.Join(loads, ", ")+"]", "a configuration's loads run back to back, on one slot")
	id := "${CONFIG}.${LOAD}"
	if a.NumRuns > 1 {
		w.line("    repeats: "+strconv.Itoa(a.NumRuns), "--num-runs: process-level repeats, the outer loop")
		id += ".r${REPEAT}"
	}
	w.line("    id: "+yq(id), "run ids: the configuration, then the load")
}
