package views

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"warden/pkg/api"
	"warden/pkg/outcome"
	"warden/pkg/state"
)

// PrintAwaiting is ctlq status's lines for the runs that wait for an
// amendment (nil: not read, the controller's database).
func PrintAwaiting(w io.Writer, aw *[]outcome.Awaiting) {
	if aw == nil {
		return
	}
	for _, a := range Escaped(*aw) {
		fmt.Fprintf(w, "awaiting   %s: attempt %d failed (%s); no further attempt without an amendment\n", a.Run, a.Attempt, a.Reason)
	}
}

// PrintHeld is ctlq status's lines for the runs held for the cause they
// share with a failed run (nil: not read).
func PrintHeld(w io.Writer, hs *[]outcome.Held) {
	if hs == nil {
		return
	}
	for _, h := range Escaped(*hs) {
		fmt.Fprintf(w, "held       %s: shares the cause of %s attempt %d (%s, server %s); not launched without an amendment or --retry-shared-cause\n", h.Run, h.Cause, h.Attempt, h.Reason, h.Server)
	}
}

// backendLine says what the campaign's GPUs are; fake ones loudly.
func backendLine(backend string, fake bool) string {
	switch {
	case fake:
		return "FAKE (file-backed GPUs: no figure of this campaign is a GPU's)"
	case backend == "nvml":
		return "NVML"
	}
	return backend + " (not recorded: a campaign from before the record named its backend)"
}

// PrintStatus is ctlq status's text.
func PrintStatus(w io.Writer, st api.Status) {
	st = Escaped(st)
	c := st.Campaign
	fmt.Fprintf(w, "campaign   %s (protocol %s, sha256 %.12s)\n", c.ID, c.Protocol, c.SHA256)
	fmt.Fprintf(w, "state      %s", c.State)
	if c.StopReason != "" {
		fmt.Fprintf(w, " (%s: %s)", c.StopReason, c.StopDetail)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "controller %s (via %s)\n", ControllerLine(st), st.Source)
	fmt.Fprintf(w, "gpus       %s\n", backendLine(c.GPUBackend, c.FakeGPUs))
	for _, a := range st.Amendments {
		fmt.Fprintf(w, "amendment  %s (%s): %s\n", a.ID, a.Kind, a.Text)
	}
	for _, cs := range c.CapacitySearches {
		fmt.Fprintf(w, "capacity   %s\n", CapacityText(cs))
	}
	var states []string
	for k := range st.Runs.ByState {
		states = append(states, k)
	}
	sort.Strings(states)
	var parts []string
	for _, k := range states {
		parts = append(parts, fmt.Sprintf("%s %d", k, st.Runs.ByState[k]))
	}
	fmt.Fprintf(w, "runs       %d: %s\n", st.Runs.Total, strings.Join(parts, ", "))
	unit := st.Budget.Unit
	if unit == "" {
		unit = "GPU-hours"
	}
	fmt.Fprintf(w, "budget     cap %.3f, consumed %.3f (charged %.3f + in flight %.3f), reserved %.3f, remaining %.3f %s\n",
		st.Budget.CapGPUHours, st.Budget.ConsumedGPUHours, st.Budget.ChargedGPUHours, st.Budget.InFlightGPUHours,
		st.Budget.ReservedGPUHours, st.Budget.RemainingGPUHours, unit)
	for _, cur := range st.Current {
		fmt.Fprintf(w, "now        %s attempt %d %s for %.1f s (attempt age %.1f s) on %s%s\n", cur.Run, cur.Attempt, cur.State, cur.InStateS, cur.ElapsedS, cur.Slot, slurmWhere(cur.Slurm))
	}
	if st.ETAS != nil && c.State == string(state.CampaignRunning) && st.Controller.Alive {
		fmt.Fprintf(w, "eta        %s\n", (time.Duration(*st.ETAS) * time.Second).String())
	}
}

// CapacityText is what a capacity search has found, for a person: its
// found rate, NOT A CAPACITY and why when its verdicts are not monotonic.
func CapacityText(cs state.CapacitySearch) string {
	var what string
	switch {
	case cs.FoundRPS > 0:
		what = fmt.Sprintf("found %.4g requests/s", cs.FoundRPS)
	case cs.Stop != "":
		what = "ended " + cs.Stop + ", nothing found"
	default:
		what = "searching"
	}
	what = fmt.Sprintf("%s: %s (%d points judged", cs.Search, what, cs.Judged)
	if cs.Done {
		what += ", done"
	}
	what += ")"
	if cs.NotMonotonic != "" {
		what += "; NOT A CAPACITY: " + cs.NotMonotonic
	}
	return what
}

// ControllerLine is the controller's line of ctlq status: its liveness
// while the campaign needs one (Liveness), and once the campaign is
// complete, frozen or stopped with nothing live, that the controller
// exited and when the campaign came to that state, not an alarm.
func ControllerLine(st api.Status) string {
	c := st.Controller
	cs := state.CampaignState(st.Campaign.State)
	finished := cs == state.CampaignComplete || cs == state.CampaignFrozen || (cs == state.CampaignStopped && len(st.Current) == 0)
	if c.Alive || !finished {
		return Liveness(c)
	}
	what := "finished"
	switch cs {
	case state.CampaignStopped:
		what = "stopped"
	case state.CampaignFrozen:
		what = "frozen"
	}
	at := st.Campaign.StateAt
	if at.IsZero() {
		at = c.Heartbeat // a record from before the state's time was kept: its last heartbeat
	}
	if at.IsZero() {
		return fmt.Sprintf("pid %d, exited; campaign %s", c.PID, what)
	}
	return fmt.Sprintf("pid %d, exited; campaign %s at %s", c.PID, what, at.UTC().Format("2006-01-02 15:04:05 UTC"))
}

// Liveness is the controller's liveness: pid, healthy or not, and its
// heartbeat's age.
func Liveness(c api.Controller) string {
	hb := "no heartbeat yet"
	if !c.Heartbeat.IsZero() {
		hb = fmt.Sprintf("heartbeat %.1f s ago (every %.0f s)", c.HeartbeatAgeS, c.HeartbeatIntervalS)
	}
	switch {
	case c.Healthy:
		return fmt.Sprintf("pid %d, healthy: %s", c.PID, hb)
	case c.Alive:
		return fmt.Sprintf("pid %d, alive but its heartbeat is late: %s", c.PID, hb)
	}
	return fmt.Sprintf("pid %d, not running: last %s", c.PID, hb)
}

// slurmWhere says where an attempt runs on Slurm ("" on the controller's
// own host).
func slurmWhere(s *state.SlurmStep) string {
	switch {
	case s == nil:
		return ""
	case s.JobID == "":
		return " (Slurm job " + s.JobName + ", not started)"
	}
	return fmt.Sprintf(" (Slurm job %s.%s on node %s, GPUs %s)", s.JobID, orDash(s.StepID), orDash(s.Node), orDash(s.StepGPUs))
}

// FmtDur is a duration of s seconds as the views write it: 45s, 3m05s,
// 2h07m.
func FmtDur(s float64) string {
	d := time.Duration(s) * time.Second
	if d >= time.Hour {
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	if d >= time.Minute {
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}
