package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"warden/pkg/gates"
)

// Layer-1 formats (seed 002, A-P3-5 and "Layer 1: always on").
//
// The stream is JSON lines. A data line is a schema-v1 record
// (layer1schema.go: Layer1Record, every field required). The in-stream
// footer, written once at a clean close, is the last line:
//
//	{"footer": true, "encoded_records": N, "written_records": N,
//	 "dropped_records": 0, "last_step_index": N, "step_count": N}
//
// The sidecar <stream>.footer.json is replaced atomically at every flush:
//
//	{"encoded_records": N, "written_records": N, "dropped_records": 0,
//	 "last_step_index": N, "wall_time_unix_ns": N, "flush_interval_s": 1.0,
//	 "final": false}
//
// The seed names written_records and last_step_index; the other names are
// Warden's reading of its prose ("balanced encoded, written, and dropped
// counters through the flush, the last written step index, its wall-clock
// timestamp, the configured flush interval, and a final flag").

// Sidecar is <stream>.footer.json. Every field is required.
type Sidecar struct {
	EncodedRecords *int64   `json:"encoded_records"`
	WrittenRecords *int64   `json:"written_records"`
	DroppedRecords *int64   `json:"dropped_records"`
	LastStepIndex  *int64   `json:"last_step_index"`
	WallTimeUnixNS *int64   `json:"wall_time_unix_ns"`
	FlushIntervalS *float64 `json:"flush_interval_s"`
	Final          *bool    `json:"final"`
}

// missing names the required fields that are absent.
func (s Sidecar) missing() []string {
	var m []string
	for _, f := range []struct {
		name string
		nil  bool
	}{
		{"encoded_records", s.EncodedRecords == nil}, {"written_records", s.WrittenRecords == nil},
		{"dropped_records", s.DroppedRecords == nil}, {"last_step_index", s.LastStepIndex == nil},
		{"wall_time_unix_ns", s.WallTimeUnixNS == nil}, {"flush_interval_s", s.FlushIntervalS == nil},
		{"final", s.Final == nil},
	} {
		if f.nil {
			m = append(m, f.name)
		}
	}
	return m
}

// Footer is the in-stream footer line.
type Footer struct {
	EncodedRecords *int64 `json:"encoded_records"`
	WrittenRecords *int64 `json:"written_records"`
	DroppedRecords *int64 `json:"dropped_records"`
	LastStepIndex  *int64 `json:"last_step_index"`
	StepCount      *int64 `json:"step_count"`
}

// Signal is one signal the controller recorded, as in signals.json (the
// JSON of pkg/state's Signal).
type Signal struct {
	At     time.Time `json:"at"`
	Role   string    `json:"role"`
	Target string    `json:"target"`
	PID    int       `json:"pid"`
	Signal string    `json:"signal"`
}

// ServerKillTime is the time of the controller's first SIGKILL to the
// server (role "server": its API parent, its process group or its
// cgroup): the hard kill after which the sidecar is authoritative and from
// which the checkpoint's age is measured (A-P3-5). ok is false when the
// server was never sent SIGKILL.
func ServerKillTime(sigs []Signal) (time.Time, bool) {
	var first time.Time
	for _, s := range sigs {
		if s.Role == "server" && s.Signal == "SIGKILL" && (first.IsZero() || s.At.Before(first)) {
			first = s.At
		}
	}
	return first, !first.IsZero()
}

// serverSignalled reports whether any signal to the server was recorded.
func serverSignalled(sigs []Signal) bool {
	for _, s := range sigs {
		if s.Role == "server" {
			return true
		}
	}
	return false
}

// Layer1Options are the knobs of the Layer-1 check.
type Layer1Options struct {
	// Tolerance is the timestamp/scheduling tolerance beyond the flush
	// interval, reported apart (seed: at most 100 ms).
	Tolerance time.Duration
	// FlushInterval, when positive, is the configured interval the
	// sidecar must declare.
	FlushInterval time.Duration
}

// DefaultLayer1 is the seed's rule: a 100 ms tolerance, any declared
// flush interval.
var DefaultLayer1 = Layer1Options{Tolerance: 100 * time.Millisecond}

// streamScan is what one pass over the stream found.
type streamScan struct {
	bytes        int64
	lines        int   // complete lines, data and footer
	data         int64 // data lines that decoded with a step
	badLines     int   // complete lines that did not decode as a data line or footer
	schemaErrs   int   // of those, JSON objects that are not schema-v1 data lines
	firstBad     int   // 1-based line number of the first bad line
	firstBadWhy  string
	partial      bool // the stream ends in a line without its newline
	footer       *Footer
	footerLine   int
	afterFooter  int // lines after the footer
	lastStep     int64
	steps        []int64
	negativeStep int
	waste        wasteTally // the data lines' padding and graph-mode violations (layer1waste.go)
}

func (s *streamScan) bad(n int, why string) {
	s.badLines++
	if s.firstBad == 0 {
		s.firstBad, s.firstBadWhy = n, why
	}
}

// lineResult is what one complete line is, read apart from the others
// (classify, on any goroutine); apply adds it to the scan in line order,
// where the footer's place matters.
type lineResult struct {
	kind lineKind
	step int64
	why  string  // bad and schema-error lines; a footer that does not decode
	ft   *Footer // a footer that decodes
	// waste holds a data line's violations of Layer1WasteRules, wasteWhy
	// what breaks each
	waste    uint8
	wasteWhy [3]string
}

type lineKind uint8

const (
	lineBad       lineKind = iota // not one JSON object
	lineFooter                    // "footer": true
	lineSchemaErr                 // a JSON object, not a schema-v1 data line
	lineData
)

// classify reads one complete line, trimmed of JSON whitespace.
func classify(line []byte, l *layer1Line, rec *Layer1Record) lineResult {
	if why := l.parse(line); why != "" {
		return lineResult{kind: lineBad, why: why}
	}
	if l.isFooter() {
		var ft Footer
		if err := json.Unmarshal(line, &ft); err != nil {
			return lineResult{kind: lineFooter, why: "footer does not decode: " + err.Error()}
		}
		return lineResult{kind: lineFooter, ft: &ft}
	}
	if why := l.record(rec, false); why != "" {
		return lineResult{kind: lineSchemaErr, why: "not a schema-v1 data line: " + why}
	}
	r := lineResult{kind: lineData, step: rec.Step}
	r.waste, r.wasteWhy = wasteViolations(wasteStep{executed: rec.ModelExecuted, hit: rec.CUDAGraphHit, mode: l.runtimeMode(),
		unpadded: rec.UnpaddedTokens, bucket: rec.BucketTokens, padded: rec.PaddingTokens})
	return r
}

// apply adds line n's result.
func (s *streamScan) apply(n int, r lineResult) {
	if r.kind == lineBad {
		s.bad(n, r.why)
		return
	}
	if s.footer != nil {
		s.afterFooter++
	}
	switch r.kind {
	case lineFooter:
		switch {
		case s.footer != nil:
			s.bad(n, "a second footer")
		case r.ft == nil:
			s.bad(n, r.why)
		default:
			s.footer, s.footerLine = r.ft, n
		}
	case lineSchemaErr:
		s.schemaErrs++
		s.bad(n, r.why)
	case lineData:
		if r.step < 0 {
			s.negativeStep++
		}
		s.data++
		s.lastStep = r.step
		s.steps = append(s.steps, r.step)
		if r.waste != 0 {
			s.waste.add(n, r.step, r.waste, r.wasteWhy)
		}
	}
}

// Layer1Dir checks the one Layer-1 stream (*.jsonl) in dir as
// Layer1Files does. A directory without a stream, or with more than one
// (the seed wants exactly one), fails; one that cannot be read is an
// error.
func Layer1Dir(dir, sidecarPath, signalsPath string, opts Layer1Options) Result {
	stream, r := Layer1Stream(dir)
	if stream == "" {
		return r
	}
	return Layer1Files(stream, sidecarPath, signalsPath, opts)
}

// Layer1Stream finds the one Layer-1 stream (*.jsonl) in dir. When there
// is not exactly one, path is "" and r says why: a fail for none or more
// than one, an error for a directory that cannot be read.
func Layer1Stream(dir string) (path string, r Result) {
	r = Result{Figures: map[string]float64{}}
	ms, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err == nil {
		if _, serr := os.Stat(dir); serr != nil {
			err = serr
		}
	}
	switch {
	case err != nil:
		r.Verdict, r.Detail = gates.Error, fmt.Sprintf("layer1 directory: %v", err)
	case len(ms) == 0:
		r.Verdict, r.Detail = gates.Fail, fmt.Sprintf("no Layer-1 stream (*.jsonl) in %s", dir)
	case len(ms) > 1:
		r.Verdict, r.Detail = gates.Fail, fmt.Sprintf("%d Layer-1 streams in %s, the seed wants exactly one", len(ms), dir)
		r.Figures["streams"] = float64(len(ms))
	default:
		return ms[0], r
	}
	return "", r
}

// Layer1Files checks a Layer-1 stream, its sidecar and the recorded
// signals. sidecarPath "" means stream + ".footer.json"; signalsPath ""
// means no signals were handed over (an error when the stream has no
// footer, since the checkpoint's age cannot be judged).
func Layer1Files(streamPath, sidecarPath, signalsPath string, opts Layer1Options) Result {
	f := newFindings()
	if sidecarPath == "" {
		sidecarPath = streamPath + ".footer.json"
	}
	st, err := os.Open(streamPath)
	if err != nil {
		f.errorf("open stream: %v", err)
		return f.result("")
	}
	defer st.Close()
	var side []byte
	side, err = os.ReadFile(sidecarPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		side = nil // missing: judged by Layer1
	case err != nil:
		f.errorf("read sidecar: %v", err)
		return f.result("")
	}
	var sigs []Signal
	sigsGiven := signalsPath != ""
	if sigsGiven {
		sigs, err = ReadSignals(signalsPath)
		if err != nil {
			f.errorf("%v", err)
			return f.result("")
		}
	}
	return Layer1(st, side, sigs, sigsGiven, opts)
}

// ReadSignals reads signals.json, a JSON array of recorded signals.
func ReadSignals(path string) ([]Signal, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read signals: %w", err)
	}
	var sigs []Signal
	if err := json.Unmarshal(b, &sigs); err != nil {
		return nil, fmt.Errorf("decode signals %s: %w", path, err)
	}
	return sigs, nil
}

// Layer1 applies the A-P3-5 rule. sidecar is the sidecar's bytes, nil when
// the file is missing (a fail: the seed's "missing/invalid sidecar").
// sigsGiven says whether a signals file was handed over at all.
//
// Figures: records, bytes, decode_errors (schema_errors of them: lines
// that are JSON objects but not schema-v1 data lines), partial_lines,
// first_step, last_step, duplicate_steps, missing_steps, footer (0/1), and
// from the sidecar encoded_records, written_records, dropped_records,
// last_step_index, final (0/1), flush_interval_s; without a footer also
// hard_kill (0/1), and after a hard kill checkpoint_age_s (SIGKILL time
// minus the checkpoint's wall time) and tolerance_used_ms (how much of the
// tolerance beyond the flush interval the age took, reported apart); and
// the waste rules' bucket_ge_unpadded_violations,
// padding_identity_violations, graph_mode_violations (layer1waste.go).
func Layer1(stream io.Reader, sidecar []byte, sigs []Signal, sigsGiven bool, opts Layer1Options) Result {
	f := newFindings()
	s, err := scanStream(stream)
	if err != nil {
		f.errorf("read stream: %v", err)
		return f.result("")
	}
	f.fig("records", float64(s.data))
	f.fig("bytes", float64(s.bytes))
	checkLines(f, s)
	checkSteps(f, s)
	checkWaste(f, s)
	side, ok := decodeSidecar(f, sidecar)
	if ok {
		checkSidecarCounters(f, s, side)
		if opts.FlushInterval > 0 && math.Abs(*side.FlushIntervalS-opts.FlushInterval.Seconds()) > 1e-9 {
			f.failf("sidecar declares a %.3f s flush interval, the configured one is %.3f s", *side.FlushIntervalS, opts.FlushInterval.Seconds())
		}
	}
	if s.footer != nil {
		f.fig("footer", 1)
		checkFooter(f, s, side, ok)
	} else {
		f.fig("footer", 0)
		if ok {
			checkCheckpointAge(f, side, sigs, sigsGiven, opts)
		}
	}
	return f.result(fmt.Sprintf("%d records, steps %d..%d contiguous, no drops", s.data, int64(f.figs["first_step"]), s.lastStep))
}

// checkLines: every complete line decodes; no partial last line.
func checkLines(f *findings, s streamScan) {
	f.fig("decode_errors", float64(s.badLines))
	f.fig("schema_errors", float64(s.schemaErrs))
	f.fig("partial_lines", b2f(s.partial))
	if s.badLines > 0 {
		f.failf("%d line(s) do not decode (first: line %d, %s)", s.badLines, s.firstBad, s.firstBadWhy)
	}
	if s.partial {
		f.failf("the stream ends in a partial JSON line")
	}
	if s.data == 0 {
		f.failf("the stream has no data lines")
	}
}

// checkSteps: step indices are unique and contiguous.
func checkSteps(f *findings, s streamScan) {
	if len(s.steps) == 0 {
		return
	}
	lo, hi := s.steps[0], s.steps[0]
	for _, v := range s.steps {
		lo, hi = min(lo, v), max(hi, v)
	}
	f.fig("first_step", float64(lo))
	f.fig("last_step", float64(s.lastStep))
	if s.negativeStep > 0 {
		f.failf("%d negative step index(es)", s.negativeStep)
		return
	}
	span := hi - lo + 1
	if span > int64(len(s.steps))*4+1024 {
		f.fig("missing_steps", float64(span-int64(len(s.steps))))
		f.failf("steps %d..%d are not contiguous: %d records over a span of %d", lo, hi, len(s.steps), span)
		return
	}
	seen := make([]bool, span)
	dups := 0
	firstDup := int64(-1)
	for _, v := range s.steps {
		i := v - lo
		if seen[i] {
			dups++
			if firstDup < 0 {
				firstDup = v
			}
		}
		seen[i] = true
	}
	var missing int64
	firstGap := int64(-1)
	for i, ok := range seen {
		if !ok {
			missing++
			if firstGap < 0 {
				firstGap = lo + int64(i)
			}
		}
	}
	f.fig("duplicate_steps", float64(dups))
	f.fig("missing_steps", float64(missing))
	if dups > 0 {
		f.failf("%d duplicate step index(es) (first: %d)", dups, firstDup)
	}
	if missing > 0 {
		f.failf("%d step index(es) missing between %d and %d (first: %d)", missing, lo, hi, firstGap)
	}
}

// decodeSidecar reads the sidecar; a missing or invalid one fails.
func decodeSidecar(f *findings, b []byte) (Sidecar, bool) {
	var side Sidecar
	if b == nil {
		f.failf("sidecar missing")
		return side, false
	}
	if err := json.Unmarshal(b, &side); err != nil {
		f.failf("sidecar does not decode: %v", err)
		return side, false
	}
	if m := side.missing(); len(m) > 0 {
		f.failf("sidecar lacks %v", m)
		return side, false
	}
	f.fig("encoded_records", float64(*side.EncodedRecords))
	f.fig("written_records", float64(*side.WrittenRecords))
	f.fig("dropped_records", float64(*side.DroppedRecords))
	f.fig("last_step_index", float64(*side.LastStepIndex))
	f.fig("final", b2f(*side.Final))
	f.fig("flush_interval_s", *side.FlushIntervalS)
	if *side.FlushIntervalS <= 0 || math.IsNaN(*side.FlushIntervalS) {
		f.failf("sidecar flush interval %v is not positive", *side.FlushIntervalS)
		return side, false
	}
	return side, true
}

// checkSidecarCounters: written = data lines; the last data line's step
// is last_step_index; encoded = written + dropped; dropped = 0.
func checkSidecarCounters(f *findings, s streamScan, side Sidecar) {
	enc, wr, dr := *side.EncodedRecords, *side.WrittenRecords, *side.DroppedRecords
	if wr != s.data {
		f.failf("%d data lines, sidecar written_records %d", s.data, wr)
	}
	if s.data > 0 && s.lastStep != *side.LastStepIndex {
		f.failf("last data line's step %d, sidecar last_step_index %d", s.lastStep, *side.LastStepIndex)
	}
	if enc != wr+dr {
		f.failf("sidecar unbalanced: encoded %d != written %d + dropped %d", enc, wr, dr)
	}
	if dr != 0 {
		f.failf("sidecar dropped_records %d, must be 0", dr)
	}
}

// checkFooter: a clean close. The footer is the last line, balanced, with
// no drops, a step count equal to the records, and a final sidecar that
// agrees with it.
func checkFooter(f *findings, s streamScan, side Sidecar, sideOK bool) {
	ft := s.footer
	if ft.EncodedRecords == nil || ft.WrittenRecords == nil || ft.DroppedRecords == nil || ft.StepCount == nil || ft.LastStepIndex == nil {
		f.failf("in-stream footer (line %d) lacks a counter", s.footerLine)
		return
	}
	if s.afterFooter > 0 {
		f.failf("%d line(s) after the in-stream footer", s.afterFooter)
	}
	enc, wr, dr := *ft.EncodedRecords, *ft.WrittenRecords, *ft.DroppedRecords
	if enc != wr+dr {
		f.failf("footer unbalanced: encoded %d != written %d + dropped %d", enc, wr, dr)
	}
	if dr != 0 {
		f.failf("footer dropped_records %d, must be 0", dr)
	}
	if *ft.StepCount != s.data || wr != s.data {
		f.failf("footer step_count %d and written_records %d, %d data lines", *ft.StepCount, wr, s.data)
	}
	if s.data > 0 && *ft.LastStepIndex != s.lastStep {
		f.failf("footer last_step_index %d, last data line's step %d", *ft.LastStepIndex, s.lastStep)
	}
	if !sideOK {
		return
	}
	if !*side.Final {
		f.failf("in-stream footer present but the sidecar is not final")
	}
	if *side.EncodedRecords != enc || *side.WrittenRecords != wr || *side.DroppedRecords != dr {
		f.failf("final sidecar (%d/%d/%d) disagrees with the footer (%d/%d/%d) on encoded/written/dropped",
			*side.EncodedRecords, *side.WrittenRecords, *side.DroppedRecords, enc, wr, dr)
	}
}

// checkCheckpointAge: without a footer the sidecar is authoritative only
// after a hard kill: the server (its API parent, group or cgroup) was sent
// SIGKILL. Its checkpoint is then at most one flush interval (plus the
// tolerance, reported apart) older than that kill. A footerless stream
// after a purely graceful stop fails: "A clean run must contain an
// in-stream footer" (A-P3-5).
func checkCheckpointAge(f *findings, side Sidecar, sigs []Signal, sigsGiven bool, opts Layer1Options) {
	if *side.Final {
		f.failf("sidecar is final but the stream has no in-stream footer")
	}
	if !sigsGiven {
		f.errorf("no in-stream footer and no recorded signal times (--signals or $WARDEN_SIGNALS_FILE): cannot tell a hard kill or judge the checkpoint's age")
		return
	}
	at, killed := ServerKillTime(sigs)
	f.fig("hard_kill", b2f(killed))
	switch {
	case !killed && serverSignalled(sigs):
		f.failf("no in-stream footer after a graceful stop (no SIGKILL to the server recorded): a clean run must contain an in-stream footer")
		return
	case !killed:
		f.errorf("no in-stream footer and no signal to the server recorded: an external kill cannot be timed, so the checkpoint's age cannot be judged")
		return
	}
	checkpoint := time.Unix(0, *side.WallTimeUnixNS)
	age := at.Sub(checkpoint)
	interval := time.Duration(*side.FlushIntervalS * float64(time.Second))
	f.fig("checkpoint_age_s", age.Seconds())
	used := max(0, age-interval)
	f.fig("tolerance_used_ms", float64(used)/float64(time.Millisecond))
	switch {
	case age > interval+opts.Tolerance:
		f.failf("checkpoint %.3f s older than the server's SIGKILL: more than the %.3f s flush interval + %.0f ms tolerance",
			age.Seconds(), interval.Seconds(), float64(opts.Tolerance)/float64(time.Millisecond))
	case used > 0:
		f.notef("checkpoint age %.3f s is within the flush interval only with %.0f ms of the tolerance", age.Seconds(), float64(used)/float64(time.Millisecond))
	}
}
