package contract

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"warden/pkg/gates"
)

// The client's files are loadgen's (Warden's load client; schemas
// warden.loadgen.result/1, .segment/1, .request/1): DIR/result.json,
// DIR/segments.jsonl and DIR/requests/<segment>.jsonl. Only the fields
// below are read; docs/validators.md lists them.

// clientResultSchema is loadgen's result.json schema, the one read.
const clientResultSchema = "warden.loadgen.result/1"

// ClientResult is the part of result.json the client check reads.
type ClientResult struct {
	Schema      string `json:"schema"`
	Complete    bool   `json:"complete"`
	Interrupted bool   `json:"interrupted"`
	LoadPoint   string `json:"load_point"`
	Load        struct {
		ClosedLoop             bool    `json:"closed_loop"`
		LambdaRPS              float64 `json:"lambda_rps"`
		RateFraction           float64 `json:"rate_fraction"`
		SaturationCompletedRPS float64 `json:"saturation_completed_rps"`
		SaturationResultSHA256 string  `json:"saturation_result_sha256"`
	} `json:"load"`
	Manifest struct {
		Rows      int  `json:"rows"`
		Used      int  `json:"used"`
		Exhausted bool `json:"exhausted"`
	} `json:"manifest"`
	Timeline struct {
		CleanSegmentS    float64 `json:"clean_segment_s"`
		NumCleanSegments int     `json:"num_clean_segments"`
		ProfileWindows   int     `json:"profile_windows"`
		RecoveryS        float64 `json:"recovery_s"`
	} `json:"timeline"`
	ProfileWindows []struct {
		Index           int    `json:"index"`
		StartCallMonoNS int64  `json:"start_call_mono_ns"`
		StartStatus     int    `json:"start_status"`
		StartError      string `json:"start_error"`
		StopStatus      int    `json:"stop_status"`
		StopError       string `json:"stop_error"`
	} `json:"profile_windows"`
	Segments []struct {
		Name         string  `json:"name"`
		Kind         string  `json:"kind"`
		Seconds      float64 `json:"seconds"`
		Failed       int     `json:"failed"`
		Succeeded    int     `json:"succeeded"`
		CompletedRPS float64 `json:"completed_rps"`
	} `json:"segments"`
	Clean struct {
		Seconds            float64 `json:"seconds"`
		EndMonoNS          int64   `json:"end_mono_ns"`
		Completed          int     `json:"completed"`
		Failed             int     `json:"failed"`
		AdmittedNotSuccess int     `json:"admitted_not_success"`
		CompletedRPS       float64 `json:"completed_rps"`
		OfferedRPS         float64 `json:"offered_rps"`
	} `json:"clean"`
	Lag struct {
		ThresholdS    float64 `json:"threshold_s"`
		OverThreshold int     `json:"over_threshold"`
		Sustained     bool    `json:"sustained"`
	} `json:"lag"`
	// Drain and its Abandoned are pointers: a result without them (an
	// older client) cannot tell whether a request was abandoned.
	Drain *struct {
		TimedOut  bool `json:"timed_out"`
		Abandoned *int `json:"abandoned"`
	} `json:"drain"`
	Totals struct {
		ByClass          map[string]int `json:"by_class"`
		OutputMismatches int            `json:"output_mismatches"`
	} `json:"totals"`
	Files struct {
		Segments string   `json:"segments"`
		Requests []string `json:"requests"`
	} `json:"files"`
}

// clientRecord is the part of a request record the check reads.
type clientRecord struct {
	Row                   int    `json:"row"`
	Segment               string `json:"segment"`
	PlannedNS             int64  `json:"planned_mono_ns"`
	SentNS                int64  `json:"sent_mono_ns"`
	RequestedOutputTokens int    `json:"requested_output_tokens"`
	OutputTokens          int    `json:"output_tokens"`
	HTTPStatus            int    `json:"http_status"`
	Class                 string `json:"class"`
}

// ClientOptions are the knobs of the client check.
type ClientOptions struct {
	Segments        int     // clean segments declared (seed: 3)
	SegmentSeconds  float64 // each (seed: 80)
	SegmentTolS     float64 // how far a segment's length may be from SegmentSeconds
	RateFraction    float64 // moderate λ = RateFraction × T_sat (seed: 0.60)
	RateTolerance   float64 // relative (seed: 0.05)
	LagThresholdS   float64 // seed: 1 s
	ForbiddenFields []string
	// SaturationResult is the saturation run's result.json; required for
	// a run that is not a closed loop (a moderate run).
	SaturationResult string
}

// DefaultClient is the seed's contract.
func DefaultClient() ClientOptions {
	return ClientOptions{Segments: 3, SegmentSeconds: 80, SegmentTolS: 0.01, RateFraction: 0.60, RateTolerance: 0.05,
		LagThresholdS: 1, ForbiddenFields: []string{"prompt", "messages", "content", "generated_text", "text", "prompt_text", "output_text"}}
}

// ClientDir checks the client's result directory.
//
// Figures: clean_segments, clean_seconds, clean_failures, admitted_not_success,
// clean_completed, records, output_mismatches, invalid_output, abandoned,
// drain_timed_out, repeated_rows, profile_windows, profile_call_failures,
// lag_over_threshold, forbidden_fields, and for an open loop lambda_rps,
// expected_lambda_rps, offered_rps, offered_over_expected. A failure of
// the profile calls alone carries class profile-artifact.
func ClientDir(dir string, opts ClientOptions) Result {
	f := newFindings()
	resPath := filepath.Join(dir, "result.json")
	raw, err := os.ReadFile(resPath)
	if err != nil {
		f.errorf("read result: %v", err)
		return f.result("")
	}
	var res ClientResult
	if err := json.Unmarshal(raw, &res); err != nil {
		f.errorf("decode %s: %v", resPath, err)
		return f.result("")
	}
	if res.Schema != clientResultSchema {
		f.errorf("%s: schema %q, want %q", resPath, res.Schema, clientResultSchema)
		return f.result("")
	}
	if !res.Complete || res.Interrupted {
		f.failf("the client's timeline did not complete (complete %v, interrupted %v)", res.Complete, res.Interrupted)
	}
	checkSegments(f, res, opts)
	checkCleanFailures(f, res)
	forbidden := scanForbidden(raw, opts.ForbiddenFields)
	files := []string{}
	if res.Files.Segments != "" {
		files = append(files, res.Files.Segments)
	}
	var recs []clientRecord
	for _, rel := range res.Files.Requests {
		files = append(files, rel)
	}
	for _, rel := range files {
		p, err := inside(dir, rel)
		if err != nil {
			f.errorf("%v", err)
			continue
		}
		n, got, err := readJSONLines(p, opts.ForbiddenFields, strings.HasPrefix(rel, "requests/"))
		if err != nil {
			f.errorf("%v", err)
			continue
		}
		forbidden += n
		recs = append(recs, got...)
	}
	f.fig("records", float64(len(recs)))
	f.fig("forbidden_fields", float64(forbidden))
	if forbidden > 0 {
		f.failf("%d prompt or generated-text field(s) (%s) in the client's files", forbidden, strings.Join(opts.ForbiddenFields, ", "))
	}
	checkTokens(f, res, recs)
	checkOutcomes(f, res, recs)
	checkCleanSegments(f, res, recs)
	checkManifest(f, res, recs)
	checkLag(f, res, recs, opts)
	checkRate(f, res, opts)
	checkRecovery(f, res, opts)
	profileFails := checkProfile(f, res)
	r := f.result(fmt.Sprintf("%d clean segments of %g s with completions, no failures, exact output, every request ended, "+
		"profile calls answered 200, no lag over %g s, no text fields", opts.Segments, opts.SegmentSeconds, opts.LagThresholdS))
	if profileFails > 0 && len(f.fails) == profileFails && len(f.errs) == 0 {
		// Only the profiler failed: the seed's one exact rerun applies.
		r.Class = gates.ClassProfileArtifact
	}
	return r
}

// checkOutcomes: the clean interval holds completions (a server that
// never finishes a request must not give a passing run), no request
// anywhere in the run was invalid output (the seed's request/output
// correctness), and the drain ended every request: "the client ... drains
// outstanding requests ...; it never cancels" (client contract, item 3),
// so a run that abandoned any request at the drain bound is never
// complete.
func checkOutcomes(f *findings, res ClientResult, recs []clientRecord) {
	f.fig("clean_completed", float64(res.Clean.Completed))
	if res.Clean.Completed <= 0 {
		f.failf("no completion in the clean interval")
	}
	invalid, abandoned := 0, 0
	for _, r := range recs {
		switch r.Class {
		case "invalid-output":
			invalid++
		case "deadline-exceeded":
			abandoned++
		}
	}
	invalid = max(invalid, res.Totals.ByClass["invalid-output"])
	abandoned = max(abandoned, res.Totals.ByClass["deadline-exceeded"])
	f.fig("invalid_output", float64(invalid))
	if invalid > 0 {
		f.failf("%d request(s) anywhere in the run were invalid output", invalid)
	}
	switch {
	case res.Drain == nil:
		f.errorf("result.json has no drain block: cannot tell whether a request was abandoned")
	case res.Drain.Abandoned == nil:
		f.errorf("result.json has no drain.abandoned: cannot tell whether a request was abandoned")
	default:
		abandoned = max(abandoned, *res.Drain.Abandoned)
		f.fig("drain_timed_out", b2f(res.Drain.TimedOut))
		if res.Drain.TimedOut {
			f.failf("the drain reached its bound (drain.timed_out)")
		}
	}
	f.fig("abandoned", float64(abandoned))
	if abandoned > 0 {
		f.failf("%d request(s) abandoned at the drain bound: a run that abandoned any request is never complete", abandoned)
	}
}

// checkCleanSegments: every clean segment holds completions, and its
// figures are reported apart (seed 002: "For each clean segment and their
// 240-second union, report: completed and failed requests; achieved
// offered and completed requests/s"; the client "emits one result file
// per segment"). A stall that empties one segment of three leaves the
// union's completions positive: the rule is per segment. A segment's
// completions are the larger of its succeeded count and its records'
// successes (records name the segment a request ended in). Figures
// cleanK_completed and cleanK_completed_rps, K the clean segment's place
// from 1.
func checkCleanSegments(f *findings, res ClientResult, recs []clientRecord) {
	ok := map[string]int{}
	for _, r := range recs {
		if r.Class == "success" {
			ok[r.Segment]++
		}
	}
	k := 0
	for _, s := range res.Segments {
		if s.Kind != "clean" {
			continue
		}
		k++
		done := max(s.Succeeded, ok[s.Name])
		f.fig(fmt.Sprintf("clean%d_completed", k), float64(done))
		f.fig(fmt.Sprintf("clean%d_completed_rps", k), s.CompletedRPS)
		if done <= 0 {
			f.failf("clean segment %s (%d of the clean segments) holds no completion: each clean segment must", s.Name, k)
		}
	}
}

// checkManifest: the manifest never ran out or wrapped: no row past the
// last, none sent twice.
func checkManifest(f *findings, res ClientResult, recs []clientRecord) {
	if res.Manifest.Exhausted {
		f.failf("the manifest ran out during the run")
	}
	if res.Manifest.Used > res.Manifest.Rows {
		f.failf("%d manifest rows used of %d", res.Manifest.Used, res.Manifest.Rows)
	}
	seen := make(map[int]bool, len(recs))
	dup := 0
	for _, r := range recs {
		if seen[r.Row] {
			dup++
		}
		seen[r.Row] = true
	}
	f.fig("repeated_rows", float64(dup))
	if dup > 0 {
		f.failf("%d request(s) repeat a manifest row (the manifest wrapped)", dup)
	}
}

// checkRecovery: every recovery lasted the fixed recovery the client was
// given, never extended (the seed: "recovery is not silently extended").
func checkRecovery(f *findings, res ClientResult, opts ClientOptions) {
	for _, s := range res.Segments {
		if s.Kind == "recovery" && math.Abs(s.Seconds-res.Timeline.RecoveryS) > opts.SegmentTolS {
			f.failf("recovery %s lasted %.3f s, the client was given %g s", s.Name, s.Seconds, res.Timeline.RecoveryS)
		}
	}
}

// checkProfile: the windows the client was given all ran after the clean
// interval, and both synchronous calls of each answered 200. It returns
// how many failures were the profiler's answers (class profile-artifact
// when they are the only ones).
func checkProfile(f *findings, res ClientResult) int {
	f.fig("profile_windows", float64(len(res.ProfileWindows)))
	if len(res.ProfileWindows) != res.Timeline.ProfileWindows {
		f.failf("%d profile window(s) recorded, the client was given %d", len(res.ProfileWindows), res.Timeline.ProfileWindows)
	}
	bad := 0
	for _, w := range res.ProfileWindows {
		if w.StartCallMonoNS < res.Clean.EndMonoNS {
			f.failf("profile window %d began before the end of the clean interval", w.Index)
		}
		for _, c := range []struct {
			path   string
			status int
			err    string
		}{{"/start_profile", w.StartStatus, w.StartError}, {"/stop_profile", w.StopStatus, w.StopError}} {
			if c.status != 200 || c.err != "" {
				bad++
				f.failf("profile window %d: %s answered %d (%s)", w.Index, c.path, c.status, c.err)
			}
		}
	}
	f.fig("profile_call_failures", float64(bad))
	return bad
}

// inside joins a relative path from result.json to dir, refusing one
// that leaves it.
func inside(dir, rel string) (string, error) {
	if filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("result.json names %q outside its directory", rel)
	}
	return filepath.Join(dir, rel), nil
}

// checkSegments: exactly the declared clean segments, each of the declared
// length, and the timeline says the same.
func checkSegments(f *findings, res ClientResult, opts ClientOptions) {
	n := 0
	for _, s := range res.Segments {
		if s.Kind != "clean" {
			continue
		}
		n++
		if math.Abs(s.Seconds-opts.SegmentSeconds) > opts.SegmentTolS {
			f.failf("clean segment %s lasted %.3f s, want %g s", s.Name, s.Seconds, opts.SegmentSeconds)
		}
	}
	f.fig("clean_segments", float64(n))
	f.fig("clean_seconds", res.Clean.Seconds)
	if n != opts.Segments {
		f.failf("%d clean segments, want %d", n, opts.Segments)
	}
	if res.Timeline.NumCleanSegments != opts.Segments || math.Abs(res.Timeline.CleanSegmentS-opts.SegmentSeconds) > 1e-9 {
		f.failf("the client's timeline asked for %d x %g s, the protocol declares %d x %g s",
			res.Timeline.NumCleanSegments, res.Timeline.CleanSegmentS, opts.Segments, opts.SegmentSeconds)
	}
	want := float64(opts.Segments) * opts.SegmentSeconds
	if math.Abs(res.Clean.Seconds-want) > opts.SegmentTolS*float64(max(opts.Segments, 1)) {
		f.failf("clean interval %.3f s, want %g s", res.Clean.Seconds, want)
	}
}

// checkCleanFailures: no request failed in the clean interval, nor did any
// request admitted in it.
func checkCleanFailures(f *findings, res ClientResult) {
	segFailed := 0
	for _, s := range res.Segments {
		if s.Kind == "clean" {
			segFailed += s.Failed
		}
	}
	failed := max(res.Clean.Failed, segFailed)
	f.fig("clean_failures", float64(failed))
	f.fig("admitted_not_success", float64(res.Clean.AdmittedNotSuccess))
	if failed > 0 {
		f.failf("%d clean-segment request(s) failed", failed)
	}
	if res.Clean.AdmittedNotSuccess > 0 {
		f.failf("%d request(s) admitted in the clean interval did not succeed", res.Clean.AdmittedNotSuccess)
	}
}

// checkTokens: every request that completed (HTTP 200) produced exactly
// the output tokens it requested.
func checkTokens(f *findings, res ClientResult, recs []clientRecord) {
	n := 0
	for _, r := range recs {
		if r.HTTPStatus == 200 && (r.Class == "success" || r.Class == "invalid-output") && r.OutputTokens != r.RequestedOutputTokens {
			n++
		}
	}
	n = max(n, res.Totals.OutputMismatches)
	f.fig("output_mismatches", float64(n))
	if n > 0 {
		f.failf("%d request(s) with other than the requested output tokens", n)
	}
}

// checkLag: no request was sent more than the threshold after its planned
// time (the seed's "no sustained client lag exceeds one second").
func checkLag(f *findings, res ClientResult, recs []clientRecord, opts ClientOptions) {
	n := 0
	thr := int64(opts.LagThresholdS * 1e9)
	for _, r := range recs {
		if r.SentNS > 0 && r.PlannedNS > 0 && r.SentNS-r.PlannedNS > thr {
			n++
		}
	}
	n = max(n, res.Lag.OverThreshold)
	f.fig("lag_over_threshold", float64(n))
	if n > 0 || res.Lag.Sustained {
		f.failf("generator lag over %g s for %d request(s)", opts.LagThresholdS, n)
	}
}

// checkRate: an open-loop (moderate) run's λ is RateFraction × the
// saturation run's clean completed throughput, and its achieved offered
// rate is within RateTolerance of it.
func checkRate(f *findings, res ClientResult, opts ClientOptions) {
	if res.Load.ClosedLoop && opts.SaturationResult == "" {
		return // saturation: nothing to match
	}
	if opts.SaturationResult == "" {
		f.errorf("an open-loop (%s) run needs the saturation result it was given (--saturation-result) to judge its rate", res.LoadPoint)
		return
	}
	raw, err := os.ReadFile(opts.SaturationResult)
	if err != nil {
		f.errorf("read saturation result: %v", err)
		return
	}
	var sat ClientResult
	if err := json.Unmarshal(raw, &sat); err != nil {
		f.errorf("decode saturation result %s: %v", opts.SaturationResult, err)
		return
	}
	if sat.Clean.CompletedRPS <= 0 || math.IsNaN(sat.Clean.CompletedRPS) {
		f.errorf("saturation result has no positive clean completed_rps")
		return
	}
	if res.Load.ClosedLoop {
		f.failf("a saturation result was given but the run is a closed loop")
		return
	}
	want := opts.RateFraction * sat.Clean.CompletedRPS
	f.fig("expected_lambda_rps", want)
	f.fig("lambda_rps", res.Load.LambdaRPS)
	f.fig("offered_rps", res.Clean.OfferedRPS)
	ratio := res.Clean.OfferedRPS / want
	f.fig("offered_over_expected", ratio)
	if sum := sha256.Sum256(raw); res.Load.SaturationResultSHA256 != "" && res.Load.SaturationResultSHA256 != hex.EncodeToString(sum[:]) {
		f.failf("the client derived its rate from another saturation result (sha256 %s)", res.Load.SaturationResultSHA256)
	}
	if math.Abs(res.Load.LambdaRPS/want-1) > 1e-6 {
		f.failf("client λ %.6g req/s, want %.2f x T_sat %.6g = %.6g", res.Load.LambdaRPS, opts.RateFraction, sat.Clean.CompletedRPS, want)
	}
	if math.Abs(ratio-1) > opts.RateTolerance {
		f.failf("offered rate %.4g req/s is %.1f%% off λ %.4g (tolerance %.0f%%)", res.Clean.OfferedRPS, (ratio-1)*100, want, opts.RateTolerance*100)
	}
}

// readJSONLines reads a JSON-lines file: it counts forbidden keys in every
// line and, when records is set, decodes each line as a request record.
func readJSONLines(path string, forbidden []string, records bool) (int, []clientRecord, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, nil, fmt.Errorf("open %s: %w", filepath.Base(path), err)
	}
	defer fh.Close()
	br := bufio.NewReaderSize(fh, 1<<20)
	n := 0
	var recs []clientRecord
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(b); len(t) > 0 {
			n += scanForbidden(t, forbidden)
			if records {
				var r clientRecord
				if err := json.Unmarshal(t, &r); err != nil {
					return n, recs, fmt.Errorf("%s line %d: %w", filepath.Base(path), line, err)
				}
				recs = append(recs, r)
			}
		}
		if errors.Is(err, io.EOF) {
			return n, recs, nil
		}
		if err != nil {
			return n, recs, fmt.Errorf("read %s: %w", filepath.Base(path), err)
		}
	}
}

// scanForbidden counts object keys, at any depth, named in forbidden.
// Undecodable JSON counts as nothing here; its reader reports it.
func scanForbidden(b []byte, forbidden []string) int {
	if len(forbidden) == 0 {
		return 0
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	n := 0
	// A string token directly inside an object at a key position is a key.
	type frame struct {
		object bool
		key    bool // next string token is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		top := len(stack) - 1
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if top >= 0 && stack[top].object {
					stack[top].key = true
				}
				stack = append(stack, frame{object: true, key: true})
			case '[':
				if top >= 0 && stack[top].object {
					stack[top].key = true
				}
				stack = append(stack, frame{})
			default:
				stack = stack[:top]
			}
		case string:
			if top >= 0 && stack[top].object {
				if stack[top].key {
					if slices.Contains(forbidden, strings.ToLower(v)) {
						n++
					}
					stack[top].key = false
				} else {
					stack[top].key = true
				}
			}
		default:
			if top >= 0 && stack[top].object {
				stack[top].key = true
			}
		}
	}
}
