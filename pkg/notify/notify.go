// Package notify runs a campaign's notification command, for someone who
// walked away: when the campaign needs a person (stopped for review or at
// the budget, complete, or its controller found dead at a resume) the
// command runs with the event as JSON on its standard input and a bounded
// time. Its output is appended to DIR/notify.log, at most OutputCap bytes a
// run, and its result is recorded as a campaign event.
//
// Nothing a hook does may hold the controller beyond the hook's bound:
//
//   - The event is handed over in memory (a memfd, or an unlinked file
//     where there is none), never written into a pipe the hook may not
//     read: a write into a full pipe would block the controller. Its
//     reason and detail are cut to DetailCap bytes each.
//   - The hook's output goes through a pipe the controller drains into the
//     log, OutputCap bytes kept, the rest counted and dropped; the drain
//     ends at the hook's end, however many of its descendants still hold
//     the pipe.
//   - When the hook exits, or at its bound, its whole process group and,
//     where cgroups are on, its leaf cgroup are ended (SIGTERM, then
//     SIGKILL), and so is every process still carrying the hook's marker
//     among the controller's children: a setsid daemon the hook left is
//     reparented to the controller, its subreaper. (A daemon that also
//     clears its environment escapes where cgroups are off.)
//   - Each run has a supervisor process of its own (Config.Supervisor,
//     Supervise: controller notify-run), which does all of the above
//     and reports the result: a controller killed while a hook runs
//     leaves it bounded all the same. The controller ends the supervisor
//     and its leaf cgroup once it reported, or past the bound.
//   - A hook the controller could not end, because it died first, is
//     ended by the next controller of the campaign before it runs one
//     (EndLeftovers, by the campaign directory in its environment).
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"warden/pkg/launch"
	"warden/pkg/state"
)

// LogFile is where the command's output goes, in the campaign directory.
const LogFile = "notify.log"

// Schema is the version of the event document.
const Schema = 1

// MaxTimeout is the longest bound a command may be given: a day.
const MaxTimeout = 24 * time.Hour

// DetailCap is how many bytes of an event's reason and of its detail the
// command is given; the rest is cut, and the cut says how much (the
// whole text stays in the campaign's record: ctlq status, ctlq events).
const DetailCap = 4 << 10

// OutputCap is how many bytes of the command's output, stdout and stderr
// together, one run appends to notify.log (after its RunHeader line); the
// rest is counted and dropped, and a DroppedNote line says how much.
const OutputCap = 1 << 20

// RunHeader begins the line notify.log holds before each run's output;
// DroppedNote the line after it when output passed OutputCap.
const (
	RunHeader   = "[warden] notification "
	DroppedNote = "[warden] notify: "
)

// MarkerEnv names the environment variable each run of the command is
// started with, set to a value of its own: what the run left behind is
// found by it.
const MarkerEnv = "WARDEN_NOTIFY_RUN"

// DirEnv names the environment variable every run of the command is
// started with, set to the campaign directory: what a controller that
// died left running of its notifications is found by it (EndLeftovers).
const DirEnv = "WARDEN_NOTIFY_DIR"

// Event is what the command reads on its standard input.
type Event struct {
	Schema   int       `json:"schema"`
	Event    string    `json:"event"` // stopped, complete, controller-dead
	Campaign string    `json:"campaign_id"`
	Protocol string    `json:"protocol"`
	Dir      string    `json:"dir"`
	State    string    `json:"state"`
	Reason   string    `json:"reason,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	At       time.Time `json:"at"`
}

// Store is where the notifier reads the campaign and records the
// command's results.
type Store interface {
	Campaign() (state.Campaign, error)
	AppendEvent(state.Event) (state.Event, error)
}

// Config is a notifier's command and where it runs.
type Config struct {
	Command  string  // a shell command line, run as /bin/sh -c Command
	TimeoutS float64 // its bound in seconds: positive, at most MaxTimeout
	Dir      string  // the campaign directory: where it runs, where notify.log is
	// Launcher starts it; with Cgroups on the launcher, in a leaf of its
	// own.
	Launcher *launch.Launcher
	Store    Store
	Log      zerolog.Logger
	// Supervisor, when set, is the program and arguments of a process
	// that runs one notification to its end on its own (Supervise), so
	// that a controller killed meanwhile leaves nothing unbounded: the
	// supervisor still ends the hook at its bound, and what the hook left.
	// It gets the flags --dir, --timeout-s and --command, the event on
	// its standard input, and writes its Result as JSON on its standard
	// output. nil: the controller's own process runs it.
	Supervisor []string
}

// Notifier runs the campaign's notification command.
type Notifier struct {
	cfg     Config
	timeout time.Duration
	runs    atomic.Int64 // numbers each run: its marker and leaf
	wg      sync.WaitGroup
}

// CheckTimeout refuses a bound that is not a positive number of seconds
// no longer than MaxTimeout (a float64 past it would overflow a
// Duration, negative: the command would be ended at once).
func CheckTimeout(s float64) (time.Duration, error) {
	if !(s > 0) || math.IsInf(s, 0) || s > MaxTimeout.Seconds() {
		return 0, fmt.Errorf("the notify timeout must be positive and at most %g s (a day), not %g", MaxTimeout.Seconds(), s)
	}
	return time.Duration(s * float64(time.Second)), nil
}

// New checks cfg and returns its notifier.
func New(cfg Config) (*Notifier, error) {
	if cfg.Command == "" {
		return nil, errors.New("notify: no command")
	}
	d, err := CheckTimeout(cfg.TimeoutS)
	if err != nil {
		return nil, err
	}
	return &Notifier{cfg: cfg, timeout: d}, nil
}

// EventOf builds the event document from the campaign's record.
func (n *Notifier) EventOf(event string, cp state.Campaign) Event {
	ev := Event{Schema: Schema, Event: event, Campaign: cp.ID, Protocol: cp.ProtocolName, Dir: n.cfg.Dir,
		State: string(cp.State), At: time.Now().UTC()}
	if event == "stopped" {
		ev.Reason, ev.Detail = string(cp.StopReason), cp.StopDetail
	}
	return ev
}

// AtEnd notifies the campaign's final state, when it needs a person: an
// operator's own stop does not. A nil Notifier does nothing.
func (n *Notifier) AtEnd() {
	if n == nil {
		return
	}
	cp, err := n.cfg.Store.Campaign()
	if err != nil {
		n.cfg.Log.Warn().Err(err).Msg("notify: read the campaign")
		return
	}
	switch {
	case cp.State == state.CampaignComplete:
		n.Run(n.EventOf("complete", cp))
	case cp.State == state.CampaignStopped && cp.StopReason != state.StopOperator:
		n.Run(n.EventOf("stopped", cp))
	}
}

// DeadAtResume notifies, beside the campaign, that this resume found the
// controller before it dead; Wait waits for it.
func (n *Notifier) DeadAtResume(cp state.Campaign, detail string) {
	if n == nil {
		return
	}
	ev := n.EventOf("controller-dead", cp)
	ev.Reason, ev.Detail = state.EventControllerDead, detail
	n.wg.Go(func() { n.Run(ev) })
}

// Wait waits for the notifications running beside the campaign.
func (n *Notifier) Wait() {
	if n != nil {
		n.wg.Wait()
	}
}

// Result is what one run of the command came to.
type Result struct {
	Code     int  // its exit code; -1 when it never ran, or ended by a signal
	TimedOut bool // ended at its bound
	Seconds  float64
	// Output is the bytes of output kept in notify.log, Dropped those past
	// OutputCap.
	Output, Dropped int64
	// LeftBehind is how many processes the command left running when it
	// exited (its group, its cgroup, its marked orphans): all ended.
	LeftBehind int
	Err        error // it could not be run, or what it left could not be ended
}

// Run runs the command once with ev on its standard input, ends it at its
// bound and whatever it left when it ends, and records what came of it.
func (n *Notifier) Run(ev Event) Result {
	start := time.Now()
	res := n.exec(ev)
	res.Seconds = time.Since(start).Seconds()
	msg := fmt.Sprintf("notified %s: the command exited %d after %.1f s", ev.Event, res.Code, res.Seconds)
	switch {
	case res.Err != nil:
		msg = fmt.Sprintf("notify %s: %v", ev.Event, res.Err)
	case res.TimedOut:
		msg = fmt.Sprintf("notify %s: the command was ended at its bound of %g s", ev.Event, n.cfg.TimeoutS)
	}
	if res.LeftBehind > 0 {
		msg += fmt.Sprintf("; %d processes it left behind were ended", res.LeftBehind)
	}
	if res.Dropped > 0 {
		msg += fmt.Sprintf("; %d bytes of its output past the %d-byte cap were dropped", res.Dropped, OutputCap)
	}
	lvl := n.cfg.Log.Info()
	if res.Err != nil || res.TimedOut || res.Code != 0 || res.LeftBehind > 0 || res.Dropped > 0 {
		lvl = n.cfg.Log.Warn()
	}
	lvl.Str("event", ev.Event).Int("exit_code", res.Code).Bool("timed_out", res.TimedOut).Msg(msg)
	figures := map[string]float64{"exit_code": float64(res.Code), "seconds": res.Seconds, "timed_out": b2f(res.TimedOut),
		"output_bytes": float64(res.Output), "output_dropped_bytes": float64(res.Dropped), "left_behind": float64(res.LeftBehind)}
	if _, err := n.cfg.Store.AppendEvent(state.Event{Reason: "notify", Message: msg, Figures: figures}); err != nil {
		n.cfg.Log.Warn().Err(err).Msg("notify: record the result")
	}
	return res
}

// Cut returns s cut to at most limit bytes, at a rune boundary, with a
// note of how many bytes were cut; s itself when it fits.
func Cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const note = "... (%d bytes more)"
	keep := max(0, limit-len(fmt.Sprintf(note, len(s))))
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(note, len(s)-keep)
}

// document is the event's JSON line, its reason and detail cut to
// DetailCap.
func document(ev Event) ([]byte, error) {
	ev.Reason, ev.Detail = Cut(ev.Reason, DetailCap), Cut(ev.Detail, DetailCap)
	doc, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return append(doc, '\n'), nil
}

// exec runs one notification: through the supervisor when there is one,
// here otherwise.
func (n *Notifier) exec(ev Event) Result {
	if n.cfg.Supervisor != nil {
		return n.supervised(ev)
	}
	return n.execHere(ev)
}

// eventFile is ev's document in an in-memory file, the hook's standard
// input: however large, handing it over never blocks.
func eventFile(ev Event) (*os.File, error) {
	doc, err := document(ev)
	if err != nil {
		return nil, err
	}
	f, err := memFile(doc)
	if err != nil {
		return nil, fmt.Errorf("hand over the event: %w", err)
	}
	return f, nil
}

// execHere starts /bin/sh -c COMMAND in a process group (and cgroup) of
// its own, the event in memory as its standard input, its output drained
// into notify.log, waits for it up to the bound, and then ends its group,
// its cgroup and its marked orphans.
func (n *Notifier) execHere(ev Event) Result {
	res := Result{Code: -1}
	stdin, err := eventFile(ev)
	if err != nil {
		res.Err = err
		return res
	}
	defer stdin.Close()
	logf, err := os.OpenFile(filepath.Join(n.cfg.Dir, LogFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		res.Err = err
		return res
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		res.Err = err
		return res
	}
	defer r.Close()
	// each run's output follows a line of its own, so that one run's can be
	// told from the next's
	fmt.Fprintf(logf, "%s%s at %s\n", RunHeader, ev.Event, time.Now().UTC().Format(time.RFC3339Nano))
	run := n.runs.Add(1)
	marker := fmt.Sprintf("%s=%d.%d.%d", MarkerEnv, os.Getpid(), time.Now().UnixNano(), run)
	p, err := n.cfg.Launcher.Start(launch.Spec{Role: "notify", Argv: []string{"/bin/sh", "-c", n.cfg.Command}, Dir: n.cfg.Dir,
		Env: append(os.Environ(), marker, DirEnv+"="+n.cfg.Dir), Stdin: stdin, Stdout: w, Stderr: w,
		Cgroup: "notify-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(run, 10),
		Stop:   launch.StopOptions{Grace: time.Second, GroupGrace: time.Second}})
	w.Close() // the hook's copies are its own
	if err != nil {
		res.Err = err
		return res
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		res.Output, res.Dropped = drain(logf, r, OutputCap)
	}()

	bound := time.NewTimer(n.timeout)
	defer bound.Stop()
	select {
	case <-p.Done():
	case <-bound.C:
		res.TimedOut = true
	}
	// the hook's group and cgroup, then its marked orphans: ended either
	// way, bounded
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, serr := p.Shutdown(ctx)
	left, oerr := endMarked(ctx, p.Boot(), marker)
	if !res.TimedOut {
		res.LeftBehind = groupSignalled(recs) + left
	}
	if err := p.Leaf().Remove(ctx); err != nil && serr == nil {
		serr = err
	}
	res.Err = errors.Join(serr, oerr)
	select {
	case <-p.Done():
		res.Code = p.Exit().Code
	default:
	}
	// whatever still holds the pipe escaped every containment: the drain
	// ends all the same
	_ = r.SetReadDeadline(time.Now().Add(time.Second))
	<-drained
	if res.Dropped > 0 {
		fmt.Fprintf(logf, "%s%d bytes of output past the %d-byte cap were dropped\n", DroppedNote, res.Dropped, OutputCap)
	}
	return res
}

// EndLeftovers kills what notifications of the campaign in dir a
// controller that died left running (every process of the host carrying
// DirEnv=dir: one controller runs a campaign at a time, so none is this
// one's) and waits until they are gone; it returns how many there were.
// Call it once the campaign's lock is held, before any notification runs.
func EndLeftovers(dir string, boot launch.BootIDSource) (int, error) {
	ids, err := launch.Marked(boot, DirEnv+"="+dir, launch.AllProcesses)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	var errs []error
	for _, id := range ids {
		if _, err := launch.Signal(boot, id, "notify (left over)", syscall.SIGKILL); err != nil && !errors.Is(err, launch.ErrGone) && !errors.Is(err, launch.ErrNotOurs) {
			errs = append(errs, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs = append(errs, launch.WaitGone(ctx, boot, ids, 30*time.Second))
	return len(ids), errors.Join(errs...)
}

// groupSignalled counts the processes the group and cgroup signals of a
// stop reached (once each, whatever signals they got): those a hook that
// had exited left behind.
func groupSignalled(recs []launch.SignalRecord) int {
	pids, calls := map[int]bool{}, 0
	for _, r := range recs {
		if r.Target == launch.TargetPID {
			continue
		}
		calls++
		for _, pid := range r.Members {
			pids[pid] = true
		}
	}
	if len(pids) == 0 && calls > 0 {
		return 1 // kill(-pgid) in one call: at least one was there
	}
	return len(pids)
}

// endMarked kills the controller's children that carry marker (orphans
// of the hook, reparented to the controller as their subreaper) and waits
// until they are gone; it returns how many there were.
func endMarked(ctx context.Context, boot launch.BootIDSource, marker string) (int, error) {
	ids, err := launch.Marked(boot, marker, launch.Children)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	var errs []error
	for _, id := range ids {
		if _, err := launch.Signal(boot, id, "notify", syscall.SIGKILL); err != nil && !errors.Is(err, launch.ErrGone) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, launch.WaitGone(ctx, boot, ids, 10*time.Second))
	return len(ids), errors.Join(errs...)
}

// drain copies r to w, at most limit bytes, and reads and counts the rest
// until r ends (or its read deadline passes).
func drain(w io.Writer, r io.Reader, limit int64) (kept, dropped int64) {
	kept, _ = io.Copy(w, io.LimitReader(r, limit))
	dropped, _ = io.Copy(io.Discard, r)
	return kept, dropped
}

// memFile is a file holding b, read from its start: a memfd, or an
// unlinked temporary file where memfd_create is missing.
func memFile(b []byte) (*os.File, error) {
	var f *os.File
	if fd, err := unix.MemfdCreate("warden-notify-event", unix.MFD_CLOEXEC); err == nil {
		f = os.NewFile(uintptr(fd), "warden-notify-event")
	} else {
		tf, err := os.CreateTemp("", "warden-notify-event-")
		if err != nil {
			return nil, err
		}
		if err := os.Remove(tf.Name()); err != nil {
			tf.Close()
			return nil, err
		}
		f = tf
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// supervisorSlack is how long past the command's bound the supervisor has
// to end the command and what it left (Stop's 30 s, the orphans' 10 s)
// and to report, before the controller ends the supervisor itself.
const supervisorSlack = 60 * time.Second

// resultDoc is a Result as the supervisor reports it.
type resultDoc struct {
	Code       int     `json:"exit_code"`
	TimedOut   bool    `json:"timed_out"`
	Seconds    float64 `json:"seconds"`
	Output     int64   `json:"output_bytes"`
	Dropped    int64   `json:"output_dropped_bytes"`
	LeftBehind int     `json:"left_behind"`
	Err        string  `json:"error,omitempty"`
}

// supervised runs the notification through the supervisor process, in
// the notification's leaf cgroup where cgroups are on (what escapes the
// supervisor's cleanup there is ended with the leaf), and reads its
// report; the supervisor gets the command's bound and supervisorSlack.
func (n *Notifier) supervised(ev Event) Result {
	res := Result{Code: -1}
	stdin, err := eventFile(ev)
	if err != nil {
		res.Err = err
		return res
	}
	defer stdin.Close()
	r, w, err := os.Pipe()
	if err != nil {
		res.Err = err
		return res
	}
	defer r.Close()
	run := n.runs.Add(1)
	argv := append(append([]string(nil), n.cfg.Supervisor...), "--dir", n.cfg.Dir,
		"--timeout-s", strconv.FormatFloat(n.cfg.TimeoutS, 'g', -1, 64), "--command", n.cfg.Command)
	p, err := n.cfg.Launcher.Start(launch.Spec{Role: "notify-supervisor", Argv: argv, Dir: n.cfg.Dir,
		Env: append(os.Environ(), DirEnv+"="+n.cfg.Dir), Stdin: stdin, Stdout: w,
		Cgroup: "notify-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(run, 10),
		Stop:   launch.StopOptions{Grace: time.Second, GroupGrace: time.Second}})
	w.Close()
	if err != nil {
		res.Err = err
		return res
	}
	report := make(chan resultDoc, 1)
	go func() {
		var d resultDoc
		if err := json.NewDecoder(io.LimitReader(r, 64<<10)).Decode(&d); err != nil {
			d = resultDoc{Code: -1, Err: "the supervisor reported nothing: " + err.Error()}
		}
		report <- d
	}()
	bound := time.NewTimer(n.timeout + supervisorSlack)
	defer bound.Stop()
	select {
	case <-p.Done():
	case <-bound.C:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, serr := p.Shutdown(ctx) // the supervisor, and its leaf: all the notification left
	if err := p.Leaf().Remove(ctx); err != nil && serr == nil {
		serr = err
	}
	_ = r.SetReadDeadline(time.Now().Add(time.Second))
	d := <-report
	res = Result{Code: d.Code, TimedOut: d.TimedOut, Seconds: d.Seconds, Output: d.Output, Dropped: d.Dropped, LeftBehind: d.LeftBehind}
	if d.Err != "" {
		res.Err = errors.New(d.Err)
	}
	res.Err = errors.Join(res.Err, serr)
	return res
}

// Supervise is the supervisor's work (Config.Supervisor): it runs the
// notification whose event it reads from in as this process would
// (cfg's Launcher is this process's, its reaper running, the process a
// subreaper), and writes its Result to out as one JSON line.
func Supervise(cfg Config, in io.Reader, out io.Writer) error {
	n, err := New(cfg)
	if err != nil {
		return err
	}
	var ev Event
	if err := json.NewDecoder(io.LimitReader(in, 64<<10)).Decode(&ev); err != nil {
		return fmt.Errorf("notify: read the event: %w", err)
	}
	start := time.Now()
	res := n.execHere(ev)
	d := resultDoc{Code: res.Code, TimedOut: res.TimedOut, Seconds: time.Since(start).Seconds(), Output: res.Output, Dropped: res.Dropped, LeftBehind: res.LeftBehind}
	if res.Err != nil {
		d.Err = res.Err.Error()
	}
	return json.NewEncoder(out).Encode(d)
}
