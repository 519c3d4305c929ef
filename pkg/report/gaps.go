package report

import (
	"fmt"
	"strings"
	"time"

	"warden/pkg/api"
)

// deadBands marks on a chart's plot area (left, top, w wide, h high,
// from t0 to t1) each interval no controller ran the campaign: from a dead
// controller's last heartbeat to the resume that found it dead. Nothing
// was supervised or sampled there, so a line drawn across it would claim
// what no one saw.
func deadBands(b *strings.Builder, gaps []api.ControllerGap, t0, t1 time.Time, left, w, top, h float64) {
	total := t1.Sub(t0).Seconds()
	if total <= 0 {
		return
	}
	for _, g := range gaps {
		from, until := clampTime(g.From, t0, t1), clampTime(g.Until, t0, t1)
		if !until.After(from) {
			continue
		}
		x1 := left + from.Sub(t0).Seconds()/total*w
		x2 := left + until.Sub(t0).Seconds()/total*w
		fmt.Fprintf(b, `<g class="dead"><title>%s</title><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#8a8f98" fill-opacity="0.22" stroke="#8a8f98" stroke-dasharray="3,3"/></g>`,
			esc(gapText(g)), x1, top, max(1.5, x2-x1), h)
	}
}

// gapText says what a band stands for.
func gapText(g api.ControllerGap) string {
	who := "the controller"
	if g.ControllerPID > 0 {
		who = fmt.Sprintf("controller pid %d", g.ControllerPID)
	}
	return fmt.Sprintf("no controller for %.1f s: %s died after its heartbeat at %s; resumed at %s",
		g.Seconds, who, g.From.UTC().Format("15:04:05"), g.Until.UTC().Format("15:04:05"))
}

// gapNotes are the report's notes on the intervals without a controller.
func gapNotes(gaps []api.ControllerGap) []string {
	var out []string
	for _, g := range gaps {
		out = append(out, gapText(g)+" (shaded in the charts; the GPU traces are not drawn across it)")
	}
	return out
}

// inGap says whether the line from a to b would cross an interval without
// a controller.
func inGap(gaps []api.ControllerGap, a, b time.Time) bool {
	for _, g := range gaps {
		if a.Before(g.Until) && b.After(g.From) {
			return true
		}
	}
	return false
}

func clampTime(t, lo, hi time.Time) time.Time {
	if t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}
