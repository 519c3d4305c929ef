// Package capacity keeps the records of a campaign's capacity searches:
// each done point judged once against its search's SLO from its client's
// result (schedule.JudgePoint), the judgement recorded as the point's
// schedule.CapacityGate verdict with its rate, and where each search
// stands (with the event of a point that shows its verdicts not
// monotonic). The campaign loop reads the judged points back for
// schedule.Decide; a resumed controller reads the recorded verdicts.
package capacity

import (
	"fmt"
	"path/filepath"

	"github.com/rs/zerolog"

	"warden/pkg/dirlayout"
	"warden/pkg/gates"
	"warden/pkg/safefile"
	"warden/pkg/schedule"
	"warden/pkg/state"
	"warden/protocols"
)

// Records judges and records the capacity points of the campaign in Dir.
// Its zero value with Dir, Store and Log set is ready; it is used by one
// goroutine (the campaign loop).
type Records struct {
	Dir   string
	Store *state.Store
	Log   zerolog.Logger
	// judged caches the points judged, by run id and result attempt
	judged map[string]schedule.Point
}

// Points are the judged done points of the plan's capacity
// searches, by search in plan order: what schedule.Search decides the
// next point from. A point is judged once per result attempt and the
// judgement recorded as its schedule.CapacityGate verdict, which later decisions,
// and a controller resumed after a crash, read back.
func (c *Records) Points(p *protocols.Plan, runs []state.Run) map[string][]schedule.Point {
	if c.judged == nil {
		c.judged = map[string]schedule.Point{}
	}
	byID := make(map[string]state.Run, len(runs))
	for _, r := range runs {
		byID[r.ID] = r
	}
	out := map[string][]schedule.Point{}
	for _, r := range p.Runs {
		rec, ok := byID[r.ID]
		if r.Capacity == nil || !ok || !rec.Done {
			continue
		}
		key := fmt.Sprintf("%s/a%d", r.ID, rec.Result)
		pt, seen := c.judged[key]
		if !seen {
			pt = c.recordedPoint(p, r, rec, out[r.Capacity.Search])
			c.judged[key] = pt
		}
		out[r.Capacity.Search] = append(out[r.Capacity.Search], pt)
	}
	return out
}

// recordedPoint is a done point's recorded judgement, or, when none is
// recorded yet, its judgement now, recorded. before are the judged points
// of its search ahead of it, which give its rate.
func (c *Records) recordedPoint(p *protocols.Plan, r protocols.Run, rec state.Run, before []schedule.Point) schedule.Point {
	if vs, err := c.Store.GateVerdicts(r.ID); err == nil {
		for _, v := range vs {
			if v.Gate == schedule.CapacityGate && v.Attempt == rec.Result {
				return schedule.Point{Run: r.ID, Verdict: v.Verdict, Detail: v.Detail, Figures: v.Figures}
			}
		}
	}
	pt := c.judgePoint(p, r, rec)
	if spec, ok := p.CapacitySearch(r.Phase); ok {
		if s := schedule.Search(spec, before); r.Capacity.Point-1 < len(s.Rates) {
			pt.Figures["rate_rps"] = s.Rates[r.Capacity.Point-1]
		}
	}
	c.Log.Info().Str("run", r.ID).Str("search", r.Capacity.Search).Str("verdict", pt.Verdict).Str("detail", pt.Detail).Msg("capacity point judged")
	if _, err := c.Store.AddGateVerdict(state.GateVerdict{Gate: schedule.CapacityGate, Run: r.ID, Attempt: rec.Result, Verdict: pt.Verdict, Figures: pt.Figures, Detail: pt.Detail}); err != nil {
		c.Log.Error().Err(err).Str("run", r.ID).Msg("record the capacity point's verdict")
	}
	if spec, ok := p.CapacitySearch(r.Phase); ok {
		c.noteSearch(r.Capacity.Search, spec, append(append([]schedule.Point(nil), before...), pt))
	}
	return pt
}

// noteSearch records where a search stands now that the last of points
// is judged (schedule.Standing: ctlq status reads it), with the event of
// a point that shows its verdicts not monotonic.
func (c *Records) noteSearch(search string, spec *protocols.CapacitySpec, points []schedule.Point) {
	cs, ev := schedule.Standing(search, spec, points)
	err := c.Store.SetCapacitySearch(cs)
	if ev != nil && err == nil {
		c.Log.Warn().Str("search", search).Msg(ev.Message)
		_, err = c.Store.AppendEvent(*ev)
	}
	if err != nil {
		c.Log.Error().Err(err).Str("search", search).Msg("record where the capacity search stands")
	}
}

// judgePoint judges one done point from its result attempt's client
// result; a result that cannot be read is an error verdict.
func (c *Records) judgePoint(p *protocols.Plan, r protocols.Run, rec state.Run) schedule.Point {
	spec, ok := p.CapacitySearch(r.Phase)
	if !ok {
		return schedule.Point{Run: r.ID, Verdict: gates.Error, Detail: "phase " + r.Phase + " has no capacity search", Figures: map[string]float64{}}
	}
	path := filepath.Join(dirlayout.AttemptDir(c.Dir, r.ID, rec.Result), r.ResultFile)
	raw, err := safefile.ReadFile(path, safefile.ChildLimit)
	if err != nil {
		return schedule.Point{Run: r.ID, Verdict: gates.Error, Detail: "read the client result: " + err.Error(), Figures: map[string]float64{}}
	}
	return schedule.JudgePoint(r.ID, spec.SLO, raw)
}
