package runner

import (
	"fmt"
	"path/filepath"

	"warden/pkg/campaignfs"
	"warden/pkg/gates"
	"warden/pkg/safefile"
	"warden/pkg/schedule"
	"warden/pkg/state"
	"warden/protocols"
)

// capacityPoints judges the done points of the plan's capacity searches
// against their SLO, from each point's client result, by search in plan
// order: what schedule.Search decides the next point from. A point is
// judged once per result (a rerun after an amendment is judged again).
func (c *Runner) capacityPoints(p *protocols.Plan, runs []state.Run) map[string][]schedule.Point {
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
			pt = c.judgePoint(p, r, rec)
			c.judged[key] = pt
			c.log.Info().Str("run", r.ID).Str("search", r.Capacity.Search).Str("verdict", pt.Verdict).Str("detail", pt.Detail).Msg("capacity point judged")
		}
		out[r.Capacity.Search] = append(out[r.Capacity.Search], pt)
	}
	return out
}

// judgePoint judges one done point from its result attempt's client
// result; a result that cannot be read is an error verdict.
func (c *Runner) judgePoint(p *protocols.Plan, r protocols.Run, rec state.Run) schedule.Point {
	spec, ok := p.CapacitySearch(r.Phase)
	if !ok {
		return schedule.Point{Run: r.ID, Verdict: gates.Error, Detail: "phase " + r.Phase + " has no capacity search"}
	}
	path := filepath.Join(campaignfs.AttemptDir(c.dir, r.ID, rec.Result), r.ResultFile)
	raw, err := safefile.ReadFile(path, safefile.ChildLimit)
	if err != nil {
		return schedule.Point{Run: r.ID, Verdict: gates.Error, Detail: "read the client result: " + err.Error()}
	}
	return schedule.JudgePoint(r.ID, spec.SLO, raw)
}
