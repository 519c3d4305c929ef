package loadgen

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
)

// summarize computes result.json from the frozen records.
func (r *run) summarize(segs []segment, windows []ProfileWindow, slots []*slot, drain DrainInfo, need int64) *Result {
	res := r.header(windows, slots, drain, need)
	attribute(res, segs, slots)
	for _, sg := range segs {
		res.Segments = append(res.Segments, r.segmentSummary(sg, slots))
		res.Files.Requests = append(res.Files.Requests, "requests/"+sg.name+".jsonl")
	}
	r.clean(res, slots)
	return res
}

// header is result.json without its per-record figures: the load, the
// manifest, the clock and the timeline of the run.
func (r *run) header(windows []ProfileWindow, slots []*slot, drain DrainInfo, need int64) *Result {
	cfg := r.cfg
	wall, mono := r.clock.Anchor()
	res := &Result{
		Schema:     ResultSchema,
		LoadPoint:  cfg.LoadPoint,
		Endpoint:   string(cfg.Endpoint),
		Model:      cfg.Model,
		ServerKind: cfg.ServerKind,
		Load: LoadInfo{ClosedLoop: cfg.Rate == 0, RequestRate: "inf", LambdaRPS: cfg.Rate, MaxConcurrency: cfg.MaxConcurrency,
			Arrival: "closed", Seed: cfg.Seed, RateFraction: cfg.RateFraction, SaturationCompletedRPS: cfg.SaturationCompletedRPS,
			SaturationResultSHA256: cfg.SaturationResultSHA256, IgnoreEOS: cfg.IgnoreEOS, Temperature: cfg.Temperature,
			Dispatchers: r.dispatchers},
		Manifest: ManifestInfo{SHA256: r.m.SHA256, Rows: r.m.Len(), Used: len(slots), Arrival: r.m.Arrival.String(),
			PromptFormat: "text", RowsNeeded: need},
		Clock: ClockInfo{AnchorWall: wall.UTC().Format("2006-01-02T15:04:05.000000000Z07:00"), AnchorMonoNS: mono, T0MonoNS: r.t0},
		Timeline: TimelineInfo{WarmupS: cfg.Warmup.Seconds(), CleanSegmentS: cfg.CleanSegment.Seconds(), NumCleanSegments: cfg.NumClean,
			ProfileWindows: cfg.ProfileWindows, ProfileHoldS: cfg.ProfileHold.Seconds(), ProfileWarmupIterations: cfg.ProfileWarmupIterations,
			ProfileActiveIterations: cfg.ProfileActiveIterations, RecoveryS: cfg.Recovery.Seconds(), DrainTimeoutS: cfg.DrainTimeout.Seconds(),
			RequestDeadlineS: cfg.RequestDeadline.Seconds()},
		ProfileWindows: windows,
		Drain:          drain,
		Totals:         Totals{Admitted: len(slots), ByClass: map[Class]int{}},
		Files:          Files{Segments: "segments.jsonl"},
	}
	if res.ProfileWindows == nil {
		res.ProfileWindows = []ProfileWindow{}
	}
	if res.ServerKind == "" {
		res.ServerKind = ServerAuto
	}
	if r.m.TokenIDs {
		res.Manifest.PromptFormat = "token-ids"
	}
	if cfg.Rate > 0 {
		res.Load.RequestRate = strconv.FormatFloat(cfg.Rate, 'g', -1, 64)
		res.Load.Arrival = cfg.Arrival.String()
	}
	return res
}

// attribute gives every record its segments and counts the records by
// class.
func attribute(res *Result, segs []segment, slots []*slot) {
	for _, s := range slots {
		rec := &s.rec
		rec.AdmitSegment = segmentOf(segs, rec.SentNS)
		if s.done {
			rec.Segment = segmentOf(segs, rec.EndNS)
		} else {
			rec.Segment = PhaseDrain
		}
		res.Totals.ByClass[rec.Class]++
		switch {
		case rec.UsageSource == UsageClient:
			res.Totals.ClientCounted++
		case rec.HTTPStatus == 200 && (rec.Class == Success || rec.Class == InvalidOutput):
			if rec.OutputTokens != rec.RequestedOutputTokens {
				res.Totals.OutputMismatches++
			}
			if rec.PromptTokens != rec.ExpectedInputTokens {
				res.Totals.InputMismatches++
			}
		}
	}
	for _, c := range Classes {
		if _, ok := res.Totals.ByClass[c]; !ok {
			res.Totals.ByClass[c] = 0
		}
	}
}

// clean summarizes the clean interval and the lag of the requests.
func (r *run) clean(res *Result, slots []*slot) {
	cfg := r.cfg
	c := &res.Clean
	c.StartMonoNS, c.EndMonoNS = r.cleanStart, r.cleanEnd
	c.Seconds = float64(r.cleanEnd-r.cleanStart) / 1e9
	var ttft, tpot, e2e, lagAll, lagClean []int64
	in := func(t int64) bool { return t >= r.cleanStart && t < r.cleanEnd }
	for _, s := range slots {
		rec := &s.rec
		lag := rec.SentNS - rec.PlannedNS
		lagAll = append(lagAll, lag)
		if float64(lag)/1e9 > LagThresholdS {
			res.Lag.OverThreshold++
		}
		if in(rec.PlannedNS) {
			c.Planned++
			lagClean = append(lagClean, lag)
		}
		if in(rec.SentNS) {
			c.Admitted++
			if rec.Class != Success {
				c.AdmittedNotSuccess++
			}
		}
		if !s.done || !in(rec.EndNS) {
			continue
		}
		if rec.Class != Success {
			c.Failed++
			continue
		}
		c.Completed++
		c.InputTokens += rec.PromptTokens
		c.OutputTokens += rec.OutputTokens
		e2e = append(e2e, rec.EndNS-rec.SentNS)
		if rec.FirstTokenNS > 0 {
			ttft = append(ttft, rec.FirstTokenNS-rec.SentNS)
			if rec.OutputTokens > 1 {
				tpot = append(tpot, (rec.EndNS-rec.FirstTokenNS)/int64(rec.OutputTokens-1))
			}
		}
	}
	if c.Seconds > 0 {
		c.CompletedRPS = float64(c.Completed) / c.Seconds
		c.OfferedRPS = float64(c.Admitted) / c.Seconds
		c.PlannedRPS = float64(c.Planned) / c.Seconds
		c.InputTokensPerS = float64(c.InputTokens) / c.Seconds
		c.OutputTokensPerS = float64(c.OutputTokens) / c.Seconds
		if cfg.Rate > 0 {
			c.OfferedOverLambda = c.OfferedRPS / cfg.Rate
		}
	}
	r.itlMu.Lock()
	itl := r.itl.dist()
	r.itlMu.Unlock()
	c.Latency = Latency{TTFT: distNS(ttft), TPOT: distNS(tpot), ITL: itl, E2E: distNS(e2e)}
	res.Lag.All, res.Lag.Clean = distNS(lagAll), distNS(lagClean)
	res.Lag.ThresholdS = LagThresholdS
	res.Lag.Sustained = res.Lag.OverThreshold > 0
	r.summarizeAudio(res, slots)
}

// segmentSummary counts and summarizes one segment.
func (r *run) segmentSummary(sg segment, slots []*slot) SegmentSummary {
	ss := SegmentSummary{Schema: SegmentSchema, Name: sg.name, Kind: sg.kind, Index: sg.index,
		StartMonoNS: sg.start, EndMonoNS: sg.end, Seconds: float64(sg.end-sg.start) / 1e9,
		ByClass: map[Class]int{}, File: "requests/" + sg.name + ".jsonl"}
	in := func(t int64) bool { return t >= sg.start && t < sg.end }
	var ttft, e2e []int64
	for _, s := range slots {
		rec := &s.rec
		if in(rec.PlannedNS) {
			ss.Planned++
		}
		if in(rec.SentNS) {
			ss.Admitted++
		}
		if rec.Segment != sg.name {
			continue
		}
		ss.Ended++
		ss.ByClass[rec.Class]++
		if rec.Class != Success {
			ss.Failed++
			continue
		}
		ss.Succeeded++
		ss.OutputTokens += rec.OutputTokens
		e2e = append(e2e, rec.EndNS-rec.SentNS)
		if rec.FirstTokenNS > 0 {
			ttft = append(ttft, rec.FirstTokenNS-rec.SentNS)
		}
	}
	if ss.Seconds > 0 {
		ss.CompletedRPS = float64(ss.Succeeded) / ss.Seconds
		ss.OfferedRPS = float64(ss.Admitted) / ss.Seconds
	}
	ss.Latency = SegmentLatency{TTFT: distNS(ttft), E2E: distNS(e2e)}
	return ss
}

// write stores the records (one file per segment, by where each request
// ended), segments.jsonl, and result.json last.
func (r *run) write(res *Result, segs []segment, slots []*slot) error {
	bySeg := map[string][]Record{}
	for _, s := range slots {
		bySeg[s.rec.Segment] = append(bySeg[s.rec.Segment], s.rec)
	}
	for _, sg := range segs {
		recs := bySeg[sg.name]
		if err := writeJSONLines(filepath.Join(r.cfg.ResultDir, "requests", sg.name+".jsonl"), recs); err != nil {
			return err
		}
	}
	if err := writeJSONLines(filepath.Join(r.cfg.ResultDir, "segments.jsonl"), res.Segments); err != nil {
		return err
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	return writeFileAtomic(filepath.Join(r.cfg.ResultDir, "result.json"), append(data, '\n'))
}
