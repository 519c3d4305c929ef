package views

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"warden/pkg/state"
)

// Layer-2 windows as a person reads them: the layer2 validator's figures
// wW.rR.* (docs/validators.md) regrouped into one row per window and rank:
// family shares (largest first), other + graph_replay_opaque, the join's
// placements and the largest |SMD|.

// WindowRow is one window and rank of a layer2 verdict's figures.
type WindowRow struct {
	Window, Rank int                // Window counts from 0, as the figures do
	Shares       map[string]float64 // by family
	Other        float64            // other + graph_replay_opaque
	Join         float64            // the join's placements (HasJoin)
	SMD          float64            // the largest |SMD| (HasSMD)
	HasJoin      bool
	HasSMD       bool
}

// Layer2Windows parses a gate's figures; nil when it has no windows.
func Layer2Windows(figs map[string]float64) []WindowRow {
	rows := map[[2]int]*WindowRow{}
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
			row = &WindowRow{Window: w, Rank: r, Shares: map[string]float64{}}
			rows[[2]int{w, r}] = row
		}
		switch name := parts[2]; {
		case strings.HasPrefix(name, "share."):
			row.Shares[strings.TrimPrefix(name, "share.")] = v
		case name == "other_opaque":
			row.Other = v
		}
	}
	var out []WindowRow
	for _, row := range rows {
		if pw := perWindow[row.Window]; pw != nil {
			row.Join, row.HasJoin = pw["join_placements"]
			row.SMD, row.HasSMD = pw["smd_max"]
		}
		out = append(out, *row)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Window < out[j].Window || out[i].Window == out[j].Window && out[i].Rank < out[j].Rank
	})
	return out
}

// printWindows writes the windows of an attempt's layer2 gate.
func printWindows(w io.Writer, n int, g state.GateVerdict) {
	rows := Layer2Windows(g.Figures)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nattempt %d Layer-2 windows (%s):\n", n, g.Gate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  WINDOW\tRANK\tFAMILY SHARES\tOTHER+OPAQUE\tJOIN\tMAX |SMD|")
	for _, r := range rows {
		join, smd := "-", "-"
		if r.HasJoin {
			join = "joined"
		}
		if r.HasSMD {
			smd = strconv.FormatFloat(r.SMD, 'f', 3, 64)
		}
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%.1f%%\t%s\t%s\n", r.Window+1, r.Rank, SharesText(r.Shares), 100*r.Other, join, smd)
	}
	tw.Flush()
}

// SharesText is the families, largest first, without other, opaque and the
// attention subfamilies.
func SharesText(s map[string]float64) string {
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
