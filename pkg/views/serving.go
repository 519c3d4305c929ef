package views

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"strconv"
	"strings"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// LoadgenResultSchema is the schema of loadgen's result.json, the only
// client result the serving figures are read from (docs/loadgen.md).
const LoadgenResultSchema = "warden.loadgen.result/1"

// LatencyMetric is one of the four latencies loadgen summarizes over a
// run's clean interval (result.json clean.latency), with the names vLLM's
// benchmark prints it under (vllm/benchmarks/serve.py, docs/report.md).
type LatencyMetric struct {
	Key    string // prefix of the figures' keys: ttft, tpot, itl, e2e
	Field  string // its distribution in clean.latency
	Name   string // vLLM's short name: TTFT, TPOT, ITL, E2EL
	Header string // vLLM's section header
}

// LatencyMetrics are the four, in vLLM's order.
var LatencyMetrics = []LatencyMetric{
	{"ttft", "ttft_ms", "TTFT", "Time to First Token"},
	{"tpot", "tpot_ms", "TPOT", "Time per Output Token (excl. 1st token)"},
	{"itl", "itl_ms", "ITL", "Inter-token Latency"},
	{"e2e", "e2e_ms", "E2EL", "End-to-end Latency"},
}

// LatencyStats are the statistics of each distribution, in their keys'
// order: KEY_n, KEY_mean_ms, KEY_p50_ms, ... KEY_max_ms.
var LatencyStats = []string{"mean", "p50", "p90", "p95", "p99", "max"}

// Latency is a run's four latency distributions as flat figures, each
// nil when the result does not give it: never a 0 that was not measured.
// A distribution of no requests (loadgen writes n 0 and zeros) is
// missing too. Missing says, for each figure left out, why.
type Latency struct {
	TTFTN      *int     `json:"ttft_n"`
	TTFTMeanMS *float64 `json:"ttft_mean_ms"`
	TTFTP50MS  *float64 `json:"ttft_p50_ms"`
	TTFTP90MS  *float64 `json:"ttft_p90_ms"`
	TTFTP95MS  *float64 `json:"ttft_p95_ms"`
	TTFTP99MS  *float64 `json:"ttft_p99_ms"`
	TTFTMaxMS  *float64 `json:"ttft_max_ms"`
	TPOTN      *int     `json:"tpot_n"`
	TPOTMeanMS *float64 `json:"tpot_mean_ms"`
	TPOTP50MS  *float64 `json:"tpot_p50_ms"`
	TPOTP90MS  *float64 `json:"tpot_p90_ms"`
	TPOTP95MS  *float64 `json:"tpot_p95_ms"`
	TPOTP99MS  *float64 `json:"tpot_p99_ms"`
	TPOTMaxMS  *float64 `json:"tpot_max_ms"`
	ITLN       *int     `json:"itl_n"`
	ITLMeanMS  *float64 `json:"itl_mean_ms"`
	ITLP50MS   *float64 `json:"itl_p50_ms"`
	ITLP90MS   *float64 `json:"itl_p90_ms"`
	ITLP95MS   *float64 `json:"itl_p95_ms"`
	ITLP99MS   *float64 `json:"itl_p99_ms"`
	ITLMaxMS   *float64 `json:"itl_max_ms"`
	E2EN       *int     `json:"e2e_n"`
	E2EMeanMS  *float64 `json:"e2e_mean_ms"`
	E2EP50MS   *float64 `json:"e2e_p50_ms"`
	E2EP90MS   *float64 `json:"e2e_p90_ms"`
	E2EP95MS   *float64 `json:"e2e_p95_ms"`
	E2EP99MS   *float64 `json:"e2e_p99_ms"`
	E2EMaxMS   *float64 `json:"e2e_max_ms"`
	// Missing: one entry per distribution (or for the whole result) the
	// figures above leave out, saying why.
	Missing []string `json:"latency_missing"`
}

// latencyFields maps each figure key of Latency (ttft_p99_ms) to its
// field, from the struct's own tags, so that the keys have one spelling.
var latencyFields = func() map[string]int {
	m := map[string]int{}
	t := reflect.TypeOf(Latency{})
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Type == reflect.TypeOf((*float64)(nil)) {
			m[t.Field(i).Tag.Get("json")] = i
		}
	}
	return m
}()

// LatencyKey is the key of one statistic of a metric: ttft_p99_ms.
func LatencyKey(metric, stat string) string { return metric + "_" + stat + "_ms" }

// LatencyKeys are every figure key of Latency but the counts, metric by
// metric in LatencyMetrics' order, each in LatencyStats' order.
func LatencyKeys() []string {
	var out []string
	for _, m := range LatencyMetrics {
		for _, s := range LatencyStats {
			out = append(out, LatencyKey(m.Key, s))
		}
	}
	return out
}

// Figure is the figure of key (ttft_p99_ms); ok is false for a key
// Latency does not have.
func (l *Latency) Figure(key string) (v *float64, ok bool) {
	i, ok := latencyFields[key]
	if !ok {
		return nil, false
	}
	return reflect.ValueOf(l).Elem().Field(i).Interface().(*float64), true
}

func (l *Latency) set(key string, v float64) {
	reflect.ValueOf(l).Elem().Field(latencyFields[key]).Set(reflect.ValueOf(&v))
}

func (l *Latency) setN(metric string, n int) {
	reflect.ValueOf(l).Elem().FieldByNameFunc(func(name string) bool {
		return strings.EqualFold(name, metric+"N")
	}).Set(reflect.ValueOf(&n))
}

// Serving is the console summary of a run's client result: the figures
// of loadgen's result.json over its clean interval, as vLLM's benchmark
// prints its own (PrintServing). A figure the result does not give is
// nil; ResultMissing says why when the whole result is.
type Serving struct {
	Attempt       int    `json:"attempt"`
	File          string `json:"file"`
	ResultMissing string `json:"result_missing,omitempty"`
	// The clean interval's requests: successes and other endings inside it.
	SuccessfulRequests *int64 `json:"successful_requests"`
	FailedRequests     *int64 `json:"failed_requests"`
	MaxConcurrency     *int64 `json:"max_concurrency"`
	// RequestRateRPS is λ of an open loop; nil for a closed loop (inf).
	RequestRateRPS    *float64 `json:"request_rate_rps"`
	CleanS            *float64 `json:"clean_interval_s"`
	TotalInputTokens  *int64   `json:"total_input_tokens"`
	TotalOutputTokens *int64   `json:"total_output_tokens"`
	ThroughputRPS     *float64 `json:"throughput_rps"`
	OutputTokensPerS  *float64 `json:"output_tokens_per_s"`
	TotalTokensPerS   *float64 `json:"total_tokens_per_s"`
	// ThroughputMissing says why the throughputs are missing from a result
	// that has a clean interval.
	ThroughputMissing string `json:"throughput_missing,omitempty"`
	// ManifestSHA256 is the manifest the client read (manifest.sha256).
	ManifestSHA256 string `json:"manifest_sha256,omitempty"`
	Latency
}

// loadgenResult is the part of loadgen's result.json the serving figures
// read; a pointer is nil where the field is absent.
type loadgenResult struct {
	Manifest *struct {
		SHA256 string `json:"sha256"`
	} `json:"manifest"`
	Load *struct {
		ClosedLoop     *bool    `json:"closed_loop"`
		LambdaRPS      *float64 `json:"lambda_rps"`
		MaxConcurrency *int64   `json:"max_concurrency"`
	} `json:"load"`
	Clean *struct {
		Seconds          *float64                `json:"seconds"`
		Completed        *int64                  `json:"completed"`
		Failed           *int64                  `json:"failed"`
		InputTokens      *int64                  `json:"input_tokens"`
		OutputTokens     *int64                  `json:"output_tokens"`
		CompletedRPS     *float64                `json:"completed_rps"`
		OutputTokensPerS *float64                `json:"output_tokens_per_s"`
		Latency          map[string]*loadgenDist `json:"latency"`
	} `json:"clean"`
}

type loadgenDist struct {
	N    *int     `json:"n"`
	Mean *float64 `json:"mean"`
	P50  *float64 `json:"p50"`
	P90  *float64 `json:"p90"`
	P95  *float64 `json:"p95"`
	P99  *float64 `json:"p99"`
	Max  *float64 `json:"max"`
}

func (d *loadgenDist) stat(s string) *float64 {
	return map[string]*float64{"mean": d.Mean, "p50": d.P50, "p90": d.P90, "p95": d.P95, "p99": d.P99, "max": d.Max}[s]
}

// ReadServing reads attempt a's client result (ATTEMPT_DIR/client/
// result.json). A result that is absent, damaged (state.Attempt.
// CheckEvidence), not JSON or not loadgen's gives no figure, and says why.
func ReadServing(a state.Attempt) Serving {
	s := Serving{Attempt: a.N, File: dirlayout.ClientResult(a.Dir), Latency: Latency{Missing: []string{}}}
	miss := func(why string) Serving {
		s.ResultMissing = why
		s.Latency.Missing = append(s.Latency.Missing, why)
		return s
	}
	if err := a.CheckEvidence(dirlayout.ClientResultRel); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return miss(fmt.Sprintf("attempt %d has no %s", a.N, dirlayout.ClientResultRel))
		}
		return miss(err.Error())
	}
	b, err := os.ReadFile(s.File)
	if err != nil {
		return miss(fmt.Sprintf("attempt %d's %s cannot be read: %v", a.N, dirlayout.ClientResultRel, err))
	}
	if !json.Valid(b) {
		return miss(fmt.Sprintf("attempt %d's %s is not JSON", a.N, dirlayout.ClientResultRel))
	}
	if sc := schemaText(b); sc != strconv.Quote(LoadgenResultSchema) {
		return miss(fmt.Sprintf("attempt %d's %s is not loadgen's (schema %s, not %s): it gives no latency", a.N, dirlayout.ClientResultRel, sc, LoadgenResultSchema))
	}
	var r loadgenResult
	if err := json.Unmarshal(b, &r); err != nil {
		return miss(fmt.Sprintf("attempt %d's %s does not read as loadgen's result: %v", a.N, dirlayout.ClientResultRel, err))
	}
	if r.Manifest != nil {
		s.ManifestSHA256 = r.Manifest.SHA256
	}
	if l := r.Load; l != nil {
		s.MaxConcurrency = l.MaxConcurrency
		if l.ClosedLoop != nil && !*l.ClosedLoop && l.LambdaRPS != nil {
			s.RequestRateRPS = l.LambdaRPS
		}
	}
	c := r.Clean
	if c == nil {
		return miss(fmt.Sprintf("attempt %d's %s has no clean interval (clean)", a.N, dirlayout.ClientResultRel))
	}
	s.SuccessfulRequests, s.FailedRequests, s.CleanS = c.Completed, c.Failed, c.Seconds
	s.TotalInputTokens, s.TotalOutputTokens = c.InputTokens, c.OutputTokens
	s.ThroughputRPS, s.OutputTokensPerS = c.CompletedRPS, c.OutputTokensPerS
	if c.Seconds != nil && *c.Seconds <= 0 {
		// loadgen leaves the rates 0 over no time (a burn-in's clean interval)
		s.ThroughputRPS, s.OutputTokensPerS = nil, nil
		s.ThroughputMissing = "a clean interval of 0 s has no throughput"
	}
	if c.InputTokens != nil && c.OutputTokens != nil && c.Seconds != nil && *c.Seconds > 0 {
		v := float64(*c.InputTokens+*c.OutputTokens) / *c.Seconds
		s.TotalTokensPerS = &v
	}
	for _, m := range LatencyMetrics {
		field := "clean.latency." + m.Field
		d := c.Latency[m.Field]
		switch {
		case d == nil:
			s.Latency.Missing = append(s.Latency.Missing, field+": absent")
			continue
		case d.N == nil:
			s.Latency.Missing = append(s.Latency.Missing, field+": no n")
			continue
		case *d.N == 0:
			s.Latency.Missing = append(s.Latency.Missing, field+": of no requests (n 0)")
			continue
		}
		s.Latency.setN(m.Key, *d.N)
		var absent []string
		for _, st := range LatencyStats {
			if v := d.stat(st); v != nil {
				s.Latency.set(LatencyKey(m.Key, st), *v)
			} else {
				absent = append(absent, st)
			}
		}
		if len(absent) > 0 {
			s.Latency.Missing = append(s.Latency.Missing, field+": no "+strings.Join(absent, ", "))
		}
	}
	return s
}

// schemaText is a result's schema as written (a number or a string).
func schemaText(b []byte) string {
	var r struct {
		Schema json.RawMessage `json:"schema"`
	}
	if json.Unmarshal(b, &r) != nil || len(r.Schema) == 0 {
		return "none"
	}
	return string(r.Schema)
}

// PrintServing writes the serving summary in the layout of vLLM's `vllm
// bench serve` (its benchmark's result block: 40-column labels, the same
// rows and names), of the clean interval; a figure the result lacks reads
// "missing", never 0.
func PrintServing(w io.Writer, s Serving) {
	fmt.Fprintf(w, "\nserving benchmark result of attempt %d (%s, its clean interval):\n", s.Attempt, dirlayout.ClientResultRel)
	if s.ResultMissing != "" {
		fmt.Fprintf(w, "  missing: %s\n", s.ResultMissing)
		return
	}
	fmt.Fprintln(w, centre(" Serving Benchmark Result ", '='))
	row := func(label, value string) { fmt.Fprintf(w, "%-40s %s\n", label, value) }
	count := func(p *int64) string {
		if p == nil {
			return "missing"
		}
		return strconv.FormatInt(*p, 10)
	}
	row("Successful requests:", count(s.SuccessfulRequests))
	row("Failed requests:", count(s.FailedRequests))
	if s.MaxConcurrency != nil {
		row("Maximum request concurrency:", count(s.MaxConcurrency))
	}
	if s.RequestRateRPS != nil {
		row("Request rate configured (RPS):", fixed2(s.RequestRateRPS))
	}
	row("Benchmark duration (s):", fixed2(s.CleanS))
	row("Total input tokens:", count(s.TotalInputTokens))
	row("Total generated tokens:", count(s.TotalOutputTokens))
	row("Request throughput (req/s):", fixed2(s.ThroughputRPS))
	row("Output token throughput (tok/s):", fixed2(s.OutputTokensPerS))
	row("Total token throughput (tok/s):", fixed2(s.TotalTokensPerS))
	l := s.Latency
	for _, m := range LatencyMetrics {
		fmt.Fprintln(w, centre(m.Header, '-'))
		for _, st := range []struct{ label, stat string }{{"Mean", "mean"}, {"Median", "p50"}, {"P99", "p99"}} {
			v, _ := l.Figure(LatencyKey(m.Key, st.stat))
			row(fmt.Sprintf("%s %s (ms):", st.label, m.Name), fixed2(v))
		}
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
	if s.ThroughputMissing != "" {
		fmt.Fprintf(w, "  missing: %s\n", s.ThroughputMissing)
	}
	for _, why := range l.Missing {
		fmt.Fprintf(w, "  missing: %s\n", why)
	}
}

// centre is s centred in 50 columns of fill, the extra column on the
// right (Python's "{:=^50}", as vLLM writes its headers).
func centre(s string, fill byte) string {
	pad := 50 - len(s)
	if pad <= 0 {
		return s
	}
	return strings.Repeat(string(fill), pad/2) + s + strings.Repeat(string(fill), pad-pad/2)
}

func fixed2(p *float64) string {
	if p == nil {
		return "missing"
	}
	return strconv.FormatFloat(*p, 'f', 2, 64)
}

// CountingAttempt is the attempt whose figures a run reports: its result,
// else its last; nil when it has none.
func CountingAttempt(d api.RunDetail) *state.Attempt {
	for i := range d.Attempts {
		if d.Attempts[i].N == d.Run.Result {
			return &d.Attempts[i]
		}
	}
	if len(d.Attempts) > 0 {
		return &d.Attempts[len(d.Attempts)-1]
	}
	return nil
}

// ServingOf is the serving summary of a run's counting attempt, once that
// attempt has ended; nil before.
func ServingOf(d api.RunDetail) *Serving {
	a := CountingAttempt(d)
	if a == nil || !a.State.Terminal() {
		return nil
	}
	s := ReadServing(*a)
	return &s
}
