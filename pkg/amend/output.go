package amend

import (
	"fmt"
	"io"
)

// WriteText writes the result for a person: the protocol's hashes, each
// changed field of a run, of the protocol and of the totals, and the
// status.
func (r Result) WriteText(w io.Writer) {
	d, id, status := r.Diff, r.Amendment, r.Status
	fmt.Fprintf(w, "amendment %s: protocol %s -> %s\n", id, short(d.Before), short(d.After))
	for _, c := range d.Changed {
		for _, f := range c.Fields {
			fmt.Fprintf(w, "  run %-40s %-20s %s -> %s\n", c.Run, f.Field, f.Old, f.New)
		}
	}
	for _, f := range append(append([]FieldDiff{}, d.Fields...), d.Totals...) {
		fmt.Fprintf(w, "  %-46s %s -> %s\n", f.Field, clip(string(f.Old)), clip(string(f.New)))
	}
	if len(d.Changed)+len(d.Fields)+len(d.Totals) == 0 {
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
