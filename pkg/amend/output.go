package amend

import (
	"fmt"
	"io"
)

// WriteText writes the result for a person: the protocol's hashes, each
// change once, down to the field that changed (path: old -> new), with
// the runs it touches (Diff.Changes), and the status.
func (r Result) WriteText(w io.Writer) {
	d, id, status := r.Diff, r.Amendment, r.Status
	fmt.Fprintf(w, "amendment %s: protocol %s -> %s\n", id, short(d.Before), short(d.After))
	changes := d.Changes()
	for _, c := range changes {
		fmt.Fprintf(w, "  %s: %s -> %s", c.Field, clip(string(c.Old)), clip(string(c.New)))
		if len(c.Runs) > 0 {
			fmt.Fprintf(w, " (%s)", runsNamed(c.Runs))
		}
		fmt.Fprintln(w)
	}
	if len(changes) == 0 {
		fmt.Fprintln(w, "  no change to the plan")
	}
	fmt.Fprintln(w, status)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func clip(s string) string {
	if len(s) > 70 {
		return s[:67] + "..."
	}
	return s
}

// WriteReadjudicated writes, for a person, each verdict readjudicate
// changed under amendment, or that none changed.
func WriteReadjudicated(w io.Writer, amendment string, changes []Readjudicated) {
	for _, c := range changes {
		fmt.Fprintf(w, "%s attempt %d: %s %s -> %s (%s)\n", c.Run, c.Attempt, c.Old, c.OldReason, c.New, c.Detail)
	}
	if len(changes) == 0 {
		fmt.Fprintln(w, "no recorded verdict changes under amendment", amendment)
	}
}
