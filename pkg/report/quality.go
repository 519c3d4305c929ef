package report

import (
	"fmt"
	"sort"
	"strings"

	"warden/pkg/api"
	"warden/pkg/state"
	"warden/pkg/views"
	"warden/protocols"
)

// Seed 000 §4: "质量等价门先于性能排名" (the quality gate comes before the
// performance ranking); "若候选系统未通过预设质量门，结果标记为 quality-failed，
// 仍报告延迟、失败与资源数据，但不得进入'更快'排名"; §14: "最终报告的第一张表应是
// 配置与质量门，第二张才是性能" (the report's first table is configuration and
// quality gates, the second performance).

// QualityRow is one run in the report's first table: its configuration
// and its quality gates (the validators' verdicts of the attempt that
// counts), and whether the second table ranks it.
type QualityRow struct {
	Run        string   `json:"run"`
	Phase      string   `json:"phase"`
	System     string   `json:"system"` // the run's server ("" without a plan)
	Cell       string   `json:"cell"`
	Load       string   `json:"load"`
	State      string   `json:"state"`
	Reason     string   `json:"reason"`
	Validators []string `json:"validators"` // "NAME: verdict", in the order they ran
	Ranked     bool     `json:"ranked"`
	Excluded   string   `json:"excluded,omitempty"` // why it is not ranked
}

// PerfRow is one ranked run in the report's second table. Rank is 1 for
// the best of its group by RankedBy; 0 when the run lacks that figure.
// RankedOver says what the rank is over: the configurations of the group
// (the values of the axes that choose the server), or why nothing.
type PerfRow struct {
	Group      string `json:"group"`
	Rank       int    `json:"rank"`
	RankedBy   string `json:"ranked_by"`
	RankedOver string `json:"ranked_over"`
	Run        string `json:"run"`
	System     string `json:"system"`
	// Config is the run's values of the axes that choose the server
	// ("config=C10"); its cell when no axis does.
	Config            string   `json:"config"`
	Cell              string   `json:"cell"`
	ThroughputRPS     *float64 `json:"throughput_rps"`
	TTFTP99MS         *float64 `json:"ttft_p99_ms"`
	TPOTP99MS         *float64 `json:"tpot_p99_ms"`
	ITLP99MS          *float64 `json:"itl_p99_ms"`
	E2EP99MS          *float64 `json:"e2e_p99_ms"`
	TTFAP99MS         *float64 `json:"ttfa_p99_ms"`
	RTFP99            *float64 `json:"rtf_p99"`
	ChunkGapP99MS     *float64 `json:"chunk_gap_p99_ms"`
	EnergyPerRequestJ *float64 `json:"energy_per_request_j"`
	Excluded          string   `json:"excluded,omitempty"` // in the not-ranked list: why

	over []string // the axes that choose the server, which Config gives
}

// rankMetric is a figure a group may be ranked by, in order of
// preference: the first that every run of the group has.
type rankMetric struct {
	name   string
	figure func(PerfRow) *float64
	lower  bool // lower is better
}

var rankMetrics = []rankMetric{
	{"ttfa_p99_ms", func(r PerfRow) *float64 { return r.TTFAP99MS }, true},
	{"ttft_p99_ms", func(r PerfRow) *float64 { return r.TTFTP99MS }, true},
	{"throughput_rps", func(r PerfRow) *float64 { return r.ThroughputRPS }, false},
}

// countingAttempt is the attempt whose figures a run reports: its result,
// else its last; nil when it has none.
func countingAttempt(rd api.RunDetail) *state.Attempt { return views.CountingAttempt(rd) }

// qualityAndPerformance builds the two tables, and the figures of the
// runs left out of the ranking that have an attempt (seed 000 §4: a
// quality-failed run "仍报告延迟、失败与资源数据", its latency, failures and
// resources are still reported). A run is ranked only when
// it is complete and its system (server) has no quality-failed run in the
// campaign: a system that failed its quality gate is never ranked; with a
// plan, it must also be a measured run (not a burn-in). Runs
// are ranked within a group: the same phase, load and axes other than
// the ones that choose the server (serverAxes), so the configurations of
// a cell or pattern are ranked against each other.
func qualityAndPerformance(rep api.Report, plan *protocols.Plan) (quality []QualityRow, ranked, notRanked []PerfRow) {
	runs := map[string]protocols.Run{}
	if plan != nil {
		for _, r := range plan.Runs {
			runs[r.ID] = r
		}
	}
	systemAxes := serverAxes(plan)
	failedSystems := map[string]string{} // system -> its first quality-failed run
	for _, rd := range rep.Runs {
		q := QualityRow{Run: rd.Run.ID, Phase: rd.Run.Phase, System: runs[rd.Run.ID].Server.Name, Cell: rd.Run.Cell,
			Load: rd.Run.Load, State: rd.State, Validators: []string{}}
		if a := countingAttempt(rd); a != nil {
			q.Reason = string(a.Reason)
			for _, g := range rd.Gates {
				if (g.Attempt == a.N || g.Attempt == 0) && strings.HasPrefix(g.Gate, "validator:") {
					v, _ := views.GateText(g)
					q.Validators = append(q.Validators, strings.TrimPrefix(g.Gate, "validator:")+": "+v)
				}
			}
		}
		if q.Reason == string(state.ReasonQualityFailed) && q.System != "" {
			if _, seen := failedSystems[q.System]; !seen {
				failedSystems[q.System] = q.Run
			}
		}
		quality = append(quality, q)
	}
	for i, rd := range rep.Runs {
		q := &quality[i]
		switch {
		case q.Reason == string(state.ReasonQualityFailed):
			q.Excluded = "quality-failed"
		case q.System != "" && failedSystems[q.System] != "":
			q.Excluded = fmt.Sprintf("system %s failed its quality gate (run %s)", q.System, failedSystems[q.System])
		case q.State != string(state.RunComplete):
			q.Excluded = "not complete (" + q.State + ")"
		case plan != nil && !runs[rd.Run.ID].Measured:
			q.Excluded = "not a measured run"
		default:
			q.Ranked = true
			ranked = append(ranked, perfRow(rd, runs[rd.Run.ID], systemAxes[rd.Run.Phase], q.System))
			continue
		}
		if countingAttempt(rd) != nil {
			r := perfRow(rd, runs[rd.Run.ID], systemAxes[rd.Run.Phase], q.System)
			r.Excluded = q.Excluded
			notRanked = append(notRanked, r)
		}
	}
	return quality, rankGroups(ranked), notRanked
}

// perfRow reads a ranked run's figures from its client's result.
func perfRow(rd api.RunDetail, r protocols.Run, systemAxes map[string]bool, system string) PerfRow {
	a := countingAttempt(rd)
	res := clientResult(a)
	group := []string{rd.Run.Phase, rd.Run.Load}
	var keys, over []string
	for k := range r.Axes {
		if !systemAxes[k] {
			keys = append(keys, k)
		} else {
			over = append(over, k)
		}
	}
	sort.Strings(keys)
	sort.Strings(over)
	for _, k := range keys {
		group = append(group, k+"="+r.Axes[k])
	}
	config := make([]string, len(over))
	for i, k := range over {
		config[i] = k + "=" + r.Axes[k]
	}
	cfg := strings.Join(config, " ")
	if cfg == "" {
		cfg = rd.Run.Cell
	}
	lat := views.ReadServing(*a).Latency
	return PerfRow{Group: strings.Join(group, " "), Run: rd.Run.ID, System: system, Config: cfg, Cell: rd.Run.Cell,
		ThroughputRPS: firstFigure(res, throughputKeys), TTFTP99MS: lat.TTFTP99MS, TPOTP99MS: lat.TPOTP99MS, ITLP99MS: lat.ITLP99MS, E2EP99MS: lat.E2EP99MS,
		TTFAP99MS: fptr(res, "audio.ttfa_ms.p99"), RTFP99: fptr(res, "audio.rtf.p99"), ChunkGapP99MS: fptr(res, "audio.gaps_ms.p99"),
		EnergyPerRequestJ: fptr(a.Figures, "energy_per_request_j"), over: over}
}

// rankGroups orders the rows by group and, within each, by the first
// metric of rankMetrics that every row of the group has (rank 1 the
// best; ties keep the campaign's order). A group without such a metric
// keeps the campaign's order, every rank 0 (not ranked).
func rankGroups(rows []PerfRow) []PerfRow {
	var order []string
	byGroup := map[string][]PerfRow{}
	for _, r := range rows {
		if _, ok := byGroup[r.Group]; !ok {
			order = append(order, r.Group)
		}
		byGroup[r.Group] = append(byGroup[r.Group], r)
	}
	sort.Strings(order)
	var out []PerfRow
	for _, g := range order {
		rs := byGroup[g]
		over := rankedOver(rs)
		for i := range rs {
			rs[i].RankedOver = over
		}
		if m, ok := groupMetric(rs); ok {
			sort.SliceStable(rs, func(i, j int) bool {
				x, y := *m.figure(rs[i]), *m.figure(rs[j])
				if m.lower {
					return x < y
				}
				return x > y
			})
			for i := range rs {
				rs[i].Rank, rs[i].RankedBy = i+1, m.name
			}
		}
		out = append(out, rs...)
	}
	return out
}

// rankedOver says what a group's ranks are over: the values of the axes
// that choose the server (its configurations), or why nothing is compared.
func rankedOver(rs []PerfRow) string {
	if len(rs) == 1 {
		return "nothing: the only ranked run of its group"
	}
	configs := map[string]bool{}
	for _, r := range rs {
		configs[r.Config] = true
	}
	if over := rs[0].over; len(over) > 0 {
		return fmt.Sprintf("its %d configurations (%s), %d runs", len(configs), strings.Join(over, ", "), len(rs))
	}
	return fmt.Sprintf("the group's %d runs (no axis of the plan chooses the server)", len(rs))
}

func groupMetric(rs []PerfRow) (rankMetric, bool) {
	for _, m := range rankMetrics {
		all := true
		for _, r := range rs {
			if m.figure(r) == nil {
				all = false
				break
			}
		}
		if all {
			return m, true
		}
	}
	return rankMetric{}, false
}

// serverAxes names the axes whose value chooses the run's server (the
// systems or server configurations compared): in the plan, every value of
// the axis has one server (name, kind, command and environment: a config
// axis's server_args change the command), and the axis has at least two.
// A workload's axis (a pattern: each of its values runs under every
// configuration) is not one.
func serverAxes(plan *protocols.Plan) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	if plan == nil {
		return out
	}
	var phases []string
	byPhase := map[string][]protocols.Run{}
	for _, r := range plan.Runs {
		if _, ok := byPhase[r.Phase]; !ok {
			phases = append(phases, r.Phase)
		}
		byPhase[r.Phase] = append(byPhase[r.Phase], r)
	}
	for _, ph := range phases {
		out[ph] = phaseServerAxes(byPhase[ph])
	}
	return out
}

// phaseServerAxes are serverAxes within one phase's runs: a phase runs
// its cells as it says, so an axis chooses the server phase by phase.
func phaseServerAxes(runs []protocols.Run) map[string]bool {
	out := map[string]bool{}
	servers := map[string]map[string]string{} // axis -> value -> server
	mixed := map[string]bool{}
	for _, r := range runs {
		id := serverIdentity(r.Server)
		for k, v := range r.Axes {
			if servers[k] == nil {
				servers[k] = map[string]string{}
			}
			if s, ok := servers[k][v]; ok && s != id {
				mixed[k] = true
			}
			servers[k][v] = id
		}
	}
	for k, vals := range servers {
		distinct := map[string]bool{}
		for _, s := range vals {
			distinct[s] = true
		}
		if !mixed[k] && len(distinct) > 1 {
			out[k] = true
		}
	}
	return out
}
