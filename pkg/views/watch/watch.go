// Package watch is ctlq watch: a live view of a campaign, polled through a
// Source the caller opens for each look (the controller's socket or the
// database), drawn as one plain line per change or, on a terminal, full
// screen with Bubble Tea and Lip Gloss. The caller maps the last Snapshot
// to an exit status.
package watch

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/gpu"
	"warden/pkg/gpu/sample"
	"warden/pkg/state"
	"warden/pkg/views"
	"warden/protocols"
)

// Source is one look at a campaign, through the controller's socket or
// its database: what a Watcher polls. Close ends the look.
type Source interface {
	Status() (api.Status, error)
	Runs(ctx context.Context) ([]api.RunBrief, error)
	Events(ctx context.Context, after uint64, limit int) ([]state.Event, error)
	Close()
}

// NewWatcher watches the campaign in dir, opening a Source for each look;
// plan is the campaign's (nil when plan.json cannot be read: one lane per
// live attempt then, and no measured runs).
func NewWatcher(dir string, plan *protocols.Plan, open func() (Source, error)) *Watcher {
	return &Watcher{open: open, dir: dir, plan: plan, started: map[string]time.Time{}}
}

// Watcher polls a campaign: it keeps the event cursor and what the ETA
// is re-estimated from. It is ctlq watch's view: one plain line per change
// (Plain), or a full-screen view (Full).
type Watcher struct {
	open func() (Source, error)
	dir  string
	plan *protocols.Plan // nil when plan.json cannot be read

	after  uint64
	recent []state.Event
	// started is when each attempt ("run aN") was created; durations of
	// attempts that completed, with their runs' expected seconds, scale
	// the ETA.
	started                map[string]time.Time
	actualS, expectedDoneS float64
}

// Snapshot is one look at the campaign: what a frame draws. Status is
// the campaign's; Ended says that no controller runs it.
type Snapshot struct {
	at       time.Time
	Status   api.Status
	done     int // runs in a terminal state
	measured [2]int
	ratio    float64 // actual / expected duration of the attempts completed so far
	etaS     float64
	inFlight float64 // GPU-hours held by live attempts, not yet charged (the status's)
	lanes    []lane
	events   []state.Event
	Ended    bool // no controller runs the campaign
}

type lane struct {
	slot string
	cur  *api.Current
	gpus []gpu.Reading
}

func (w *Watcher) planRun(id string) (protocols.Run, bool) {
	if w.plan == nil {
		return protocols.Run{}, false
	}
	for _, r := range w.plan.Runs {
		if r.ID == id {
			return r, true
		}
	}
	return protocols.Run{}, false
}

// poll takes one Snapshot. While a controller exits there is a moment
// when it no longer answers on its socket but still holds the database:
// poll tries again for a few seconds before it gives up.
func (w *Watcher) poll() (Snapshot, error) {
	var err error
	for try := 0; try < 30; try++ {
		var sn Snapshot
		if sn, err = w.pollOnce(); err == nil {
			return sn, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return Snapshot{}, err
}

// pollOnce takes one Snapshot, through the socket or the database.
func (w *Watcher) pollOnce() (Snapshot, error) {
	var sn Snapshot
	src, err := w.open()
	if err != nil {
		return sn, err
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sn.at = time.Now()
	if sn.Status, err = src.Status(); err != nil {
		return sn, err
	}
	sn.Status = views.Escaped(sn.Status) // what the records say, never a terminal's command
	var runs []api.RunBrief
	runs, err = src.Runs(ctx)
	if err != nil {
		return sn, err
	}
	for {
		evs, err := src.Events(ctx, w.after, 1000)
		if err != nil {
			return sn, err
		}
		for _, e := range evs {
			w.see(e)
		}
		if len(evs) < 1000 {
			break
		}
	}
	sn.events = append([]state.Event(nil), w.recent...)

	measured := map[string]bool{}
	if w.plan != nil {
		for _, r := range w.plan.Runs {
			measured[r.ID] = r.Measured
		}
	}
	for _, r := range runs {
		terminal := r.State == "complete" || r.State == "quarantined" || r.State == "failed"
		if terminal {
			sn.done++
		}
		if measured[r.ID] {
			sn.measured[1]++
			if terminal {
				sn.measured[0]++
			}
		}
	}
	sn.ratio = 1
	if w.expectedDoneS > 0 {
		sn.ratio = w.actualS / w.expectedDoneS
	}
	sn.inFlight = sn.Status.Budget.InFlightGPUHours
	if sn.Status.ETAS != nil {
		// the status's ETA already counts down while attempts run; the
		// pace so far scales it
		sn.etaS = max(0, *sn.Status.ETAS*sn.ratio)
	}
	sn.lanes = w.lanes(sn.Status.Current)
	sn.Ended = !sn.Status.Controller.Alive
	return sn, nil
}

// see takes one event into the ETA's durations and the recent list.
func (w *Watcher) see(e state.Event) {
	w.after = e.Seq
	w.recent = append(w.recent, e)
	if len(w.recent) > 6 {
		w.recent = w.recent[len(w.recent)-6:]
	}
	if e.Run == "" || e.Attempt == 0 {
		return
	}
	key := e.Run + " a" + strconv.Itoa(e.Attempt)
	if e.From == "" {
		w.started[key] = e.Wall
	}
	if e.To == string(state.Complete) {
		if t0, ok := w.started[key]; ok {
			if r, ok := w.planRun(e.Run); ok && r.ExpectedS > 0 {
				w.actualS += e.Wall.Sub(t0).Seconds()
				w.expectedDoneS += r.ExpectedS
			}
		}
	}
}

// lanes is one lane per slot of the plan (or per live attempt when the
// plan cannot be read), with the latest GPU sample of its attempt.
func (w *Watcher) lanes(cur []api.Current) []lane {
	var names []string
	if w.plan != nil {
		for _, s := range w.plan.Slots {
			names = append(names, s.Name)
		}
	}
	var out []lane
	used := map[int]bool{}
	for _, name := range names {
		l := lane{slot: name}
		for i := range cur {
			for _, s := range strings.Split(cur[i].Slot, "+") {
				if s == name {
					l.cur = &cur[i]
					used[i] = true
				}
			}
		}
		out = append(out, l)
	}
	for i := range cur {
		if !used[i] {
			out = append(out, lane{slot: cur[i].Slot, cur: &cur[i]})
		}
	}
	for i := range out {
		if c := out[i].cur; c != nil {
			out[i].gpus, _ = sample.Last(dirlayout.GPUSamples(dirlayout.AttemptDir(w.dir, c.Run, c.Attempt)))
		}
	}
	return out
}

// Plain prints one line whenever the campaign's picture changes, until no
// controller runs it, and returns the last snapshot (Ended), or the error
// of a look that failed.
func (w *Watcher) Plain(out io.Writer, interval time.Duration) (Snapshot, error) {
	last := ""
	for {
		sn, err := w.poll()
		if err != nil {
			return Snapshot{}, err
		}
		line := plainLine(sn)
		if line != last {
			fmt.Fprintf(out, "%s %s\n", sn.at.Local().Format("15:04:05"), line)
			last = line
		}
		if sn.Ended {
			return sn, nil
		}
		time.Sleep(interval)
	}
}

func plainLine(sn Snapshot) string {
	st := sn.Status
	var b strings.Builder
	fmt.Fprintf(&b, "%s", st.Campaign.State)
	if st.Campaign.StopReason != "" {
		fmt.Fprintf(&b, " (%s)", st.Campaign.StopReason)
	}
	fmt.Fprintf(&b, "; runs %d/%d done, measured %d/%d; budget %.3f charged + %.3f reserved of %.3f",
		sn.done, st.Runs.Total, sn.measured[0], sn.measured[1], st.Budget.ChargedGPUHours, st.Budget.ReservedGPUHours, st.Budget.CapGPUHours)
	if st.Campaign.State == string(state.CampaignRunning) && !sn.Ended {
		fmt.Fprintf(&b, "; eta %s", views.FmtDur(sn.etaS))
	}
	for _, l := range sn.lanes {
		if l.cur != nil {
			fmt.Fprintf(&b, "; %s: %s a%d %s", l.slot, l.cur.Run, l.cur.Attempt, l.cur.State)
		}
	}
	if sn.Ended {
		b.WriteString("; controller not running")
	}
	return b.String()
}

// Full-screen view, drawn with Bubble Tea and Lip Gloss.

type snapMsg struct {
	sn  Snapshot
	err error
}

type model struct {
	w        *Watcher
	interval time.Duration
	sn       Snapshot
	have     bool
	err      error
	width    int
}

func (m model) pollCmd(delay time.Duration) tea.Cmd {
	return tea.Tick(delay, func(time.Time) tea.Msg {
		sn, err := m.w.poll()
		return snapMsg{sn, err}
	})
}

func (m model) Init() tea.Cmd { return m.pollCmd(0) }

func (m model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case snapMsg:
		if msg.err != nil {
			m.err = msg.err
			return m, tea.Quit
		}
		m.sn, m.have = msg.sn, true
		if m.sn.Ended {
			return m, tea.Quit
		}
		return m, m.pollCmd(m.interval)
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			return m, tea.Quit
		}
	}
	return m, nil
}

func (m model) View() string {
	if !m.have {
		return "reading " + m.w.dir + " ..."
	}
	return render(m.sn, m.width)
}

// Full shows the full-screen view on the terminal f until no controller
// runs the campaign or the operator quits (q), then prints the last frame.
// It returns the last snapshot: Ended is false when the operator quit (or
// no look succeeded before).
func (w *Watcher) Full(f *os.File, interval time.Duration) (Snapshot, error) {
	// The view uses no adaptive colours: saying so spares the terminal a
	// background-colour query, which a terminal that does not answer
	// (a pseudo-terminal under test, some multiplexers) makes wait.
	lipgloss.SetHasDarkBackground(true)
	p := tea.NewProgram(model{w: w, interval: interval, width: 100}, tea.WithAltScreen(), tea.WithOutput(f))
	end, err := p.Run()
	if err != nil {
		return Snapshot{}, err
	}
	m := end.(model)
	if m.err != nil {
		return Snapshot{}, m.err
	}
	if m.have {
		fmt.Fprintln(f, render(m.sn, m.width))
	}
	return m.sn, nil
}

var (
	styTitle = lipgloss.NewStyle().Bold(true)
	styDim   = lipgloss.NewStyle().Faint(true)
	styBox   = lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1)
	styState = map[string]lipgloss.Style{
		"running":  lipgloss.NewStyle().Foreground(lipgloss.Color("2")).Bold(true),
		"complete": lipgloss.NewStyle().Foreground(lipgloss.Color("4")).Bold(true),
		"stopped":  lipgloss.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
	}
	styCharged  = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	styInFlight = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	styReserved = lipgloss.NewStyle().Foreground(lipgloss.Color("6"))
	styDone     = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
)

// bar draws parts of a whole as a bar of width cells; each part is a
// fraction of total with its style and fill rune.
func bar(width int, total float64, parts ...barPart) string {
	var b strings.Builder
	used := 0
	for _, p := range parts {
		if total <= 0 {
			break
		}
		n := int(p.value / total * float64(width))
		n = min(max(0, n), width-used)
		b.WriteString(p.style.Render(strings.Repeat(p.fill, n)))
		used += n
	}
	b.WriteString(styDim.Render(strings.Repeat("·", width-used)))
	return b.String()
}

type barPart struct {
	value float64
	fill  string
	style lipgloss.Style
}

// render draws a Snapshot as the full-screen view.
func render(sn Snapshot, width int) string {
	st := sn.Status
	c := st.Campaign
	barW := max(20, min(60, width-40))
	var b strings.Builder
	stSty, ok := styState[c.State]
	if !ok {
		stSty = styTitle
	}
	fmt.Fprintf(&b, "%s  %s  %s\n", styTitle.Render("campaign "+c.ID), styDim.Render(fmt.Sprintf("protocol %s %.12s", c.Protocol, c.SHA256)), stSty.Render(c.State))
	if c.StopReason != "" {
		fmt.Fprintf(&b, "stop reason %s: %s\n", c.StopReason, c.StopDetail)
	}
	fmt.Fprintf(&b, "controller %s\n\n", views.ControllerLine(st))

	fmt.Fprintf(&b, "runs      %s %d/%d done\n", bar(barW, float64(max(1, st.Runs.Total)), barPart{float64(sn.done), "█", styDone}), sn.done, st.Runs.Total)
	fmt.Fprintf(&b, "measured  %s %d/%d done\n", bar(barW, float64(max(1, sn.measured[1])), barPart{float64(sn.measured[0]), "█", styDone}), sn.measured[0], sn.measured[1])
	bu := st.Budget
	reservedRest := max(0, bu.ReservedGPUHours-sn.inFlight)
	unit := bu.Unit
	if unit == "" {
		unit = "GPU-hours"
	}
	fmt.Fprintf(&b, "budget    %s %.3f/%.3f %s\n", bar(barW, bu.CapGPUHours,
		barPart{bu.ChargedGPUHours, "█", styCharged}, barPart{sn.inFlight, "▓", styInFlight}, barPart{reservedRest, "░", styReserved}),
		bu.ChargedGPUHours+sn.inFlight, bu.CapGPUHours, unit)
	fmt.Fprintf(&b, "          %s charged %.3f  %s in flight %.3f  %s reserved %.3f  cap %.3f\n",
		styCharged.Render("█"), bu.ChargedGPUHours, styInFlight.Render("▓"), sn.inFlight, styReserved.Render("░"), bu.ReservedGPUHours, bu.CapGPUHours)
	if c.State == string(state.CampaignRunning) && !sn.Ended {
		fmt.Fprintf(&b, "eta       %s (expected durations x %.2f, the pace so far)\n", views.FmtDur(sn.etaS), sn.ratio)
	}

	var lanes strings.Builder
	fmt.Fprintln(&lanes, styTitle.Render("slots"))
	slotW, runW := 4, 8
	for _, l := range sn.lanes {
		slotW = max(slotW, len(l.slot))
		if l.cur != nil {
			runW = max(runW, len(l.cur.Run)+len(strconv.Itoa(l.cur.Attempt))+2)
		}
	}
	for _, l := range sn.lanes {
		if l.cur == nil {
			fmt.Fprintf(&lanes, "%-*s  %s\n", slotW, l.slot, styDim.Render("idle"))
			continue
		}
		fmt.Fprintf(&lanes, "%-*s  %-*s  %-10s %6s", slotW, l.slot, runW, l.cur.Run+" a"+strconv.Itoa(l.cur.Attempt), l.cur.State, views.FmtDur(l.cur.InStateS))
		for _, g := range l.gpus {
			fmt.Fprintf(&lanes, "  GPU%d", g.Index)
			if g.MemoryUsedMiB != nil {
				fmt.Fprintf(&lanes, " %d MiB", *g.MemoryUsedMiB)
			}
			if g.PowerW != nil {
				fmt.Fprintf(&lanes, " %.0f W", *g.PowerW)
			}
		}
		lanes.WriteString("\n")
	}
	b.WriteString("\n" + styBox.Render(strings.TrimRight(lanes.String(), "\n")) + "\n")

	var evs strings.Builder
	fmt.Fprintln(&evs, styTitle.Render("last events"))
	for _, e := range sn.events {
		views.PrintEvent(&evs, e)
	}
	b.WriteString(styBox.Render(strings.TrimRight(evs.String(), "\n")) + "\n")
	if sn.Ended {
		b.WriteString(styDim.Render("controller not running; watch ended") + "\n")
	} else {
		b.WriteString(styDim.Render(fmt.Sprintf("updated %s  q quits", sn.at.Local().Format("15:04:05"))) + "\n")
	}
	return b.String()
}
