package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"warden/pkg/api"
	"warden/pkg/state"
)

// Layer-2 windows as a person reads them: the layer2 validator's figures
// wW.rR.* (docs/validators.md) regrouped into one row per window and rank:
// family shares (largest first), other + graph_replay_opaque, the join's
// placements and the largest |SMD|.

type windowRow struct {
	w, r   int
	shares map[string]float64
	other  float64
	join   float64
	smd    float64
	hasJ   bool
	hasS   bool
}

// layer2Windows parses a gate's figures; nil when it has no windows.
func layer2Windows(figs map[string]float64) []windowRow {
	rows := map[[2]int]*windowRow{}
	perWindow := map[int]map[string]float64{}
	for k, v := range figs {
		parts := strings.SplitN(k, ".", 3)
		if len(parts) < 2 || !strings.HasPrefix(parts[0], "w") {
			continue
		}
		w, err := strconv.Atoi(parts[0][1:])
		if err != nil {
			continue
		}
		if !strings.HasPrefix(parts[1], "r") || len(parts) < 3 {
			if perWindow[w] == nil {
				perWindow[w] = map[string]float64{}
			}
			perWindow[w][strings.Join(parts[1:], ".")] = v
			continue
		}
		r, err := strconv.Atoi(parts[1][1:])
		if err != nil {
			continue
		}
		row := rows[[2]int{w, r}]
		if row == nil {
			row = &windowRow{w: w, r: r, shares: map[string]float64{}}
			rows[[2]int{w, r}] = row
		}
		switch name := parts[2]; {
		case strings.HasPrefix(name, "share."):
			row.shares[strings.TrimPrefix(name, "share.")] = v
		case name == "other_opaque":
			row.other = v
		}
	}
	var out []windowRow
	for _, row := range rows {
		if pw := perWindow[row.w]; pw != nil {
			row.join, row.hasJ = pw["join_placements"]
			row.smd, row.hasS = pw["smd_max"]
		}
		out = append(out, *row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].w < out[j].w || out[i].w == out[j].w && out[i].r < out[j].r })
	return out
}

// printWindows writes the windows of an attempt's layer2 gate.
func printWindows(w io.Writer, n int, g state.GateVerdict) {
	rows := layer2Windows(g.Figures)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nattempt %d Layer-2 windows (%s):\n", n, g.Gate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  WINDOW\tRANK\tFAMILY SHARES\tOTHER+OPAQUE\tJOIN\tMAX |SMD|")
	for _, r := range rows {
		join, smd := "-", "-"
		if r.hasJ {
			join = "joined"
		}
		if r.hasS {
			smd = strconv.FormatFloat(r.smd, 'f', 3, 64)
		}
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%.1f%%\t%s\t%s\n", r.w+1, r.r, sharesText(r.shares), 100*r.other, join, smd)
	}
	tw.Flush()
}

// reportWindow is one Layer-2 window in the HTML report.
type reportWindow struct {
	Run, Gate             string
	Attempt, Window, Rank int
	Shares                string
	OtherOpaque           string
	Join, SMD             string
	Bad                   bool // not classifiable (other + opaque above 30%)
}

// reportWindows lists the windows of every run's validator verdicts.
func reportWindows(rep api.Report) []reportWindow {
	var out []reportWindow
	for _, rd := range rep.Runs {
		for _, g := range rd.Gates {
			if !strings.HasPrefix(g.Gate, "validator:") {
				continue
			}
			for _, r := range layer2Windows(g.Figures) {
				row := reportWindow{Run: rd.Run.ID, Gate: g.Gate, Attempt: g.Attempt, Window: r.w + 1, Rank: r.r,
					OtherOpaque: fmt.Sprintf("%.1f%%", 100*r.other), Join: "-", SMD: "-", Bad: r.other > 0.30}
				row.Shares = sharesText(r.shares)
				if r.hasJ {
					row.Join = "joined"
				}
				if r.hasS {
					row.SMD = strconv.FormatFloat(r.smd, 'f', 3, 64)
				}
				out = append(out, row)
			}
		}
	}
	return out
}

// sharesText: the families, largest first, without other, opaque and the
// attention subfamilies.
func sharesText(s map[string]float64) string {
	var fams []string
	for f := range s {
		if !strings.HasPrefix(f, "attention_") && f != "other" && f != "graph_replay_opaque" {
			fams = append(fams, f)
		}
	}
	sort.Slice(fams, func(i, j int) bool { return s[fams[i]] > s[fams[j]] || s[fams[i]] == s[fams[j]] && fams[i] < fams[j] })
	var parts []string
	for _, f := range fams {
		parts = append(parts, fmt.Sprintf("%s %.1f%%", f, 100*s[f]))
	}
	return strings.Join(parts, ", ")
}
