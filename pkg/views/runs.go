package views

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"warden/pkg/api"
	"warden/pkg/state"
)

// PrintRuns is ctlq runs' table: one line per run, its attempts with their
// states and reasons.
func PrintRuns(w io.Writer, runs []api.RunBrief) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tPHASE\tKIND\tSTATE\tATTEMPTS")
	for _, r := range Escaped(runs) {
		var as []string
		for _, a := range r.Attempts {
			s := fmt.Sprintf("a%d %s", a.N, a.State)
			if a.Reason != "" {
				s += " (" + a.Reason + ")"
			}
			as = append(as, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Phase, r.Kind, r.State, strings.Join(as, ", "))
	}
	return tw.Flush()
}

// PrintEvent is one event as a line of ctlq events (and of watch's last
// events).
func PrintEvent(w io.Writer, e state.Event) {
	e = Escaped(e)
	what := e.Run
	if e.Attempt > 0 {
		what = fmt.Sprintf("%s a%d", e.Run, e.Attempt)
	}
	if what == "" {
		what = "campaign"
	}
	fmt.Fprintf(w, "%6d %s %-28s %s -> %s", e.Seq, e.Wall.Local().Format("15:04:05"), what, e.From, e.To)
	if e.Reason != "" {
		fmt.Fprintf(w, " [%s]", e.Reason)
	}
	if e.Message != "" {
		fmt.Fprintf(w, " %s", e.Message)
	}
	fmt.Fprintln(w)
}
