package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"warden/pkg/phasefile"

	"warden/pkg/atomicfile"
	"warden/pkg/loadgen"
)

// The stand-in client can also write its result in the format of Warden's
// load client loadgen (result.json, segments.jsonl, requests/<segment>.jsonl;
// see docs/validators.md), so that `controller validate client` and
// `controller validate sanity` can be tested end to end without loadgen.
// The files are SYNTHETIC: the clean interval is cut into --segments equal
// segments, the run's completed requests are spread evenly over them with
// nominal times, and a moderate run's λ is --rate-fraction x the
// saturation result's clean completed_rps with an offered rate equal to λ.
// They describe a well-behaved run unless --client-break breaks one rule.

// Client breaks, each a rule of the seed's client contract or sanity block.
const (
	cBreakFailures = "failures" // one clean-segment request failed
	cBreakTokens   = "tokens"   // one request produced one token less than requested
	cBreakRate     = "rate"     // the offered rate is 10% under λ
	cBreakLag      = "lag"      // one request was sent 1.5 s after its planned time
	cBreakText     = "text"     // one request record carries a generated_text field
	cBreakSegments = "segments" // one clean segment fewer than asked
	cBreakNegative = "negative" // a negative counter (clean.input_tokens), for the sanity block
)

var clientBreaks = []string{cBreakFailures, cBreakTokens, cBreakRate, cBreakLag, cBreakText, cBreakSegments, cBreakNegative}

type loadgenFmtConfig struct {
	dir          string
	segments     int
	satResult    string
	rateFraction float64
	brk          string
}

func (c loadgenFmtConfig) validate() error {
	if c.dir == "" {
		return nil
	}
	if c.segments < 1 || c.rateFraction <= 0 {
		return fmt.Errorf("--segments and --rate-fraction must be positive")
	}
	if c.brk != "" && !slices.Contains(clientBreaks, c.brk) {
		return fmt.Errorf("--client-break %q: want one of %v", c.brk, clientBreaks)
	}
	return nil
}

// lgRecord is loadgen's request record, with the one field a record must
// never have, which --client-break text plants.
type lgRecord struct {
	loadgen.Record
	GeneratedText string `json:"generated_text,omitempty"`
}

// writeLoadgenFiles writes the synthetic loadgen-format result of a run
// whose clean interval measured res.
func writeLoadgenFiles(cfg clientConfig, res result, windows []map[string]any) error {
	lc := cfg.loadgen
	if err := os.MkdirAll(filepath.Join(lc.dir, "requests"), 0o755); err != nil {
		return fmt.Errorf("loadgen files: %w", err)
	}
	nseg := lc.segments
	if lc.brk == cBreakSegments {
		nseg--
	}
	segS := cfg.measureS / float64(lc.segments)
	segNS := int64(segS * 1e9)
	t0 := cfg.seed.t0()
	cleanStart := t0 + int64(cfg.warmupS*1e9)
	completed := max(res.Completed, lc.segments) // at least one success per segment
	perSeg := cfg.seed.segmentCount(completed / lc.segments)
	var segs []loadgen.SegmentSummary
	var files []string
	row := 0
	outTok := 0
	for i := 1; i <= nseg; i++ {
		s := loadgen.SegmentSummary{Schema: loadgen.SegmentSchema, Name: fmt.Sprintf("clean-%d", i), Kind: "clean", Index: i,
			StartMonoNS: cleanStart + int64(i-1)*segNS, Seconds: segS, ByClass: map[loadgen.Class]int{}}
		s.EndMonoNS = s.StartMonoNS + segNS
		s.File = "requests/" + s.Name + ".jsonl"
		lines := segmentRecords(cfg, &s, perSeg, segNS, &row)
		s.CompletedRPS = float64(s.Succeeded) / segS
		s.OfferedRPS = float64(s.Admitted) / segS
		outTok += s.OutputTokens
		if err := atomicfile.WriteFile(filepath.Join(lc.dir, s.File), lines, 0o644); err != nil {
			return fmt.Errorf("loadgen files: %w", err)
		}
		segs = append(segs, s)
		files = append(files, s.File)
	}
	segs, err := withSeedSegments(cfg, segs, windows, segNS/int64(perSeg), &row)
	if err != nil {
		return err
	}
	files = files[:0]
	var segLines []byte
	succeeded, failed := 0, 0
	for _, s := range segs {
		b, _ := json.Marshal(s)
		segLines = append(append(segLines, b...), '\n')
		files = append(files, s.File)
		if s.Kind == "clean" {
			succeeded += s.Succeeded
			failed += s.Failed
		}
	}
	if err := atomicfile.WriteFile(filepath.Join(lc.dir, "segments.jsonl"), segLines, 0o644); err != nil {
		return fmt.Errorf("loadgen files: %w", err)
	}
	cleanS := segS * float64(nseg)
	load := map[string]any{"closed_loop": true, "request_rate": "inf", "lambda_rps": 0.0, "max_concurrency": cfg.concurrency, "arrival": "closed", "workload_seed": 0,
		"ignore_eos": true, "temperature": 0.0}
	loadPoint := "saturation"
	completedRPS := float64(succeeded) / cleanS
	offered := float64(succeeded+failed) / cleanS
	if lc.satResult != "" {
		lambda, err := moderateLoad(lc, load)
		if err != nil {
			return err
		}
		loadPoint = "moderate"
		offered = lambda
		if lc.brk == cBreakRate {
			offered = 0.9 * lambda
		}
	}
	inputTokens := succeeded * cfg.promptWords
	if lc.brk == cBreakNegative {
		inputTokens = -1
	}
	doc := map[string]any{
		"schema": loadgen.ResultSchema, "complete": true, "interrupted": false, "load_point": loadPoint,
		"endpoint": "completions", "model": cfg.model, "load": load,
		"manifest": map[string]any{"sha256": strings.Repeat("0", 64), "rows": row, "used": row, "exhausted": false, "arrival": load["arrival"], "prompt_format": "text", "rows_needed": 0},
		"clock":    map[string]any{"anchor_wall": time.Now().UTC().Format(time.RFC3339Nano), "anchor_mono_ns": t0, "t0_mono_ns": t0},
		"timeline": map[string]any{"warmup_s": cfg.warmupS, "clean_segment_s": segS, "num_clean_segments": lc.segments, "profile_windows": len(windows),
			"profile_hold_s": 0.0, "profile_warmup_iterations": 2, "profile_active_iterations": 8, "recovery_s": cfg.seed.recoveryS, "drain_timeout_s": cfg.drainS},
		"segments":        segs,
		"profile_windows": windows,
		"clean": map[string]any{"seconds": cleanS, "start_mono_ns": cleanStart, "end_mono_ns": cleanStart + int64(nseg)*segNS,
			"completed": succeeded, "failed": failed, "admitted": succeeded + failed, "planned": succeeded + failed, "admitted_not_success": failed,
			"completed_rps": completedRPS, "offered_rps": offered, "planned_rps": offered, "offered_over_lambda": 0.0,
			"input_tokens": inputTokens, "output_tokens": outTok, "input_tokens_per_s": float64(inputTokens) / cleanS, "output_tokens_per_s": float64(outTok) / cleanS},
		"lag":    map[string]any{"threshold_s": 1.0, "over_threshold": 0, "sustained": false},
		"drain":  map[string]any{"seconds": 0.0, "outstanding_at_start": 0, "unfinished": 0, "abandoned": 0, "timed_out": false},
		"totals": map[string]any{"admitted": row, "by_class": map[string]int{"success": succeeded}, "output_mismatches": 0, "input_mismatches": 0},
		"files":  map[string]any{"segments": "segments.jsonl", "requests": files},
	}
	if err := atomicfile.WriteJSON(filepath.Join(lc.dir, "result.json"), doc, 0o644); err != nil {
		return fmt.Errorf("loadgen files: %w", err)
	}
	return nil
}

// profileWindows calls /start_profile and /stop_profile n times, each a
// synchronous call timestamped like loadgen's profile_windows entries,
// and waits recovery after each.
func profileWindows(ctx context.Context, base string, n int, hold, recovery time.Duration, phases *phaseLog) ([]map[string]any, error) {
	var out []map[string]any
	c := &http.Client{Timeout: 30 * time.Second}
	// call posts to path of window i: its status, its call and return
	// times, and an error unless it answered 200
	call := func(i int, path string) (int, int64, int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, nil)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("profile window %d: %w", i, err)
		}
		t0 := time.Now().UnixNano()
		resp, err := c.Do(req)
		t1 := time.Now().UnixNano()
		if err != nil {
			return 0, t0, t1, fmt.Errorf("profile window %d: %w", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, t0, t1, fmt.Errorf("profile window %d: %s answered %d", i, path, resp.StatusCode)
		}
		return resp.StatusCode, t0, t1, nil
	}
	for i := 1; i <= n; i++ {
		if err := phases.markIndex(phasefile.Profile, i, nil); err != nil {
			return out, err
		}
		s1, a0, a1, err := call(i, "/start_profile")
		if err != nil {
			return out, err
		}
		if err := sleepCtx(ctx, hold); err != nil {
			return out, err
		}
		s2, b0, b1, err := call(i, "/stop_profile")
		if err != nil {
			return out, err
		}
		if err := phases.markIndex(phasefile.Recovery, i, nil); err != nil {
			return out, err
		}
		out = append(out, map[string]any{"index": i, "start_call_mono_ns": a0, "start_return_mono_ns": a1, "start_status": s1,
			"stop_call_mono_ns": b0, "stop_return_mono_ns": b1, "stop_status": s2})
		if err := sleepCtx(ctx, recovery); err != nil { // the fixed recovery
			return out, err
		}
	}
	return out, nil
}

// segmentRecords writes the request records of the clean segment s
// (perSeg of them, numbered from *row on) as JSON lines, counting them
// into s. The first record of the first segment carries a --client-break
// that asks for one.
func segmentRecords(cfg clientConfig, s *loadgen.SegmentSummary, perSeg int, segNS int64, row *int) []byte {
	lc, i := cfg.loadgen, s.Index
	var lines []byte
	for k := range perSeg {
		planned := s.StartMonoNS + int64(k)*segNS/int64(perSeg)
		rec := lgRecord{Record: loadgen.Record{Schema: loadgen.RecordSchema, ID: fmt.Sprintf("standin-%d", *row), Row: *row, Segment: s.Name, AdmitSegment: s.Name,
			PlannedNS: planned, SentNS: planned + 1000, FirstTokenNS: planned + 2000, EndNS: planned + 3000,
			ExpectedInputTokens: cfg.promptWords, PromptTokens: cfg.promptWords, RequestedOutputTokens: cfg.maxTokens, OutputTokens: cfg.maxTokens,
			HTTPStatus: 200, Class: loadgen.Success}}
		*row++
		switch {
		case lc.brk == cBreakFailures && i == 1 && k == 0:
			rec.HTTPStatus, rec.Class, rec.OutputTokens = 0, loadgen.TransportError, 0
		case lc.brk == cBreakTokens && i == 1 && k == 0:
			rec.OutputTokens--
		case lc.brk == cBreakLag && i == 1 && k == 0:
			rec.SentNS = planned + 1_500_000_000
		case lc.brk == cBreakText && i == 1 && k == 0:
			rec.GeneratedText = "placeholder"
		}
		s.Planned++
		s.Admitted++
		s.Ended++
		s.ByClass[rec.Class]++
		if rec.Class == loadgen.Success {
			s.Succeeded++
			s.OutputTokens += rec.OutputTokens
		} else {
			s.Failed++
		}
		b, _ := json.Marshal(rec)
		lines = append(append(lines, b...), '\n')
	}
	return lines
}

// moderateLoad makes load that of a moderate point: --rate-fraction of
// the saturation result's clean completed rate, which it returns.
func moderateLoad(lc loadgenFmtConfig, load map[string]any) (float64, error) {
	raw, err := os.ReadFile(lc.satResult)
	if err != nil {
		return 0, fmt.Errorf("saturation result: %w", err)
	}
	var sat struct {
		Clean struct {
			CompletedRPS float64 `json:"completed_rps"`
		} `json:"clean"`
	}
	if err := json.Unmarshal(raw, &sat); err != nil || sat.Clean.CompletedRPS <= 0 {
		return 0, fmt.Errorf("saturation result %s: no clean completed_rps (%v)", lc.satResult, err)
	}
	sum := sha256.Sum256(raw)
	lambda := lc.rateFraction * sat.Clean.CompletedRPS
	load["closed_loop"], load["request_rate"], load["lambda_rps"], load["arrival"] = false, fmt.Sprint(lambda), lambda, "steady"
	load["rate_fraction"], load["saturation_completed_rps"], load["saturation_result_sha256"] = lc.rateFraction, sat.Clean.CompletedRPS, hex.EncodeToString(sum[:])
	return lambda, nil
}
