package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/campaigndir"
	"warden/pkg/launch"
	"warden/pkg/state"
)

// Notifications, for someone who walked away: the campaign's --notify
// command runs when the campaign needs a person (stopped for review or at
// the budget, complete, or its controller found dead at a resume), with
// the event as JSON on standard input and a bounded time. Its output is
// appended to DIR/notify.log and its result recorded as a campaign event;
// it never blocks the campaign: at a resume it runs beside it, at the end
// after it.

// notifyLog is where the command's output goes, in the campaign directory.
const notifyLog = "notify.log"

// notifySchema is the version of the event document.
const notifySchema = 1

// notifyEvent is what the command reads on its standard input.
type notifyEvent struct {
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

// notifier runs the campaign's notification command.
type notifier struct {
	set      *campaigndir.NotifySettings
	dir      string
	launcher *launch.Launcher
	store    *state.Store
	log      zerolog.Logger
	wg       sync.WaitGroup
}

// eventOf builds the event document from the campaign's record.
func (n *notifier) eventOf(event string, cp state.Campaign) notifyEvent {
	ev := notifyEvent{Schema: notifySchema, Event: event, Campaign: cp.ID, Protocol: cp.ProtocolName, Dir: n.dir,
		State: string(cp.State), At: time.Now().UTC()}
	if event == "stopped" {
		ev.Reason, ev.Detail = string(cp.StopReason), cp.StopDetail
	}
	return ev
}

// atEnd notifies the campaign's final state, when it needs a person: an
// operator's own stop does not.
func (n *notifier) atEnd() {
	if n == nil {
		return
	}
	cp, err := n.store.Campaign()
	if err != nil {
		n.log.Warn().Err(err).Msg("notify: read the campaign")
		return
	}
	switch {
	case cp.State == state.CampaignComplete:
		n.run(n.eventOf("complete", cp))
	case cp.State == state.CampaignStopped && cp.StopReason != state.StopOperator:
		n.run(n.eventOf("stopped", cp))
	}
}

// deadAtResume notifies, beside the campaign, that this resume found the
// controller before it dead; wait waits for it.
func (n *notifier) deadAtResume(cp state.Campaign, detail string) {
	if n == nil {
		return
	}
	ev := n.eventOf("controller-dead", cp)
	ev.Reason, ev.Detail = state.EventControllerDead, detail
	n.wg.Go(func() { n.run(ev) })
}

func (n *notifier) wait() {
	if n != nil {
		n.wg.Wait()
	}
}

// run runs the command once with ev on its standard input, ends it at its
// bound, and records what came of it.
func (n *notifier) run(ev notifyEvent) {
	start := time.Now()
	code, timedOut, err := n.exec(ev)
	took := time.Since(start).Seconds()
	msg := fmt.Sprintf("notified %s: the command exited %d after %.1f s", ev.Event, code, took)
	switch {
	case err != nil:
		msg = fmt.Sprintf("notify %s: %v", ev.Event, err)
	case timedOut:
		msg = fmt.Sprintf("notify %s: the command was ended at its bound of %g s", ev.Event, n.set.TimeoutS)
	}
	lvl := n.log.Info()
	if err != nil || timedOut || code != 0 {
		lvl = n.log.Warn()
	}
	lvl.Str("event", ev.Event).Int("exit_code", code).Bool("timed_out", timedOut).Msg(msg)
	figures := map[string]float64{"exit_code": float64(code), "seconds": took, "timed_out": b2f(timedOut)}
	if _, rerr := n.store.AppendEvent(state.Event{Reason: "notify", Message: msg, Figures: figures}); rerr != nil {
		n.log.Warn().Err(rerr).Msg("notify: record the result")
	}
}

// exec starts /bin/sh -c COMMAND in a process group of its own, the
// event on a pipe as its standard input, its output appended to
// DIR/notify.log, and waits for it up to the bound; past it the group is
// ended (SIGTERM, then SIGKILL) and waited for.
func (n *notifier) exec(ev notifyEvent) (code int, timedOut bool, err error) {
	doc, err := json.Marshal(ev)
	if err != nil {
		return -1, false, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, false, err
	}
	defer r.Close()
	_, werr := w.Write(append(doc, '\n')) // far below a pipe's buffer: never blocks
	w.Close()
	if werr != nil {
		return -1, false, werr
	}
	out := filepath.Join(n.dir, notifyLog)
	p, err := n.launcher.Start(launch.Spec{Role: "notify", Argv: []string{"/bin/sh", "-c", n.set.Command}, Dir: n.dir,
		Stdin: r, StdoutPath: out, StderrPath: out, Stop: launch.StopOptions{Grace: time.Second, GroupGrace: time.Second}})
	if err != nil {
		return -1, false, err
	}
	bound := time.NewTimer(time.Duration(n.set.TimeoutS * float64(time.Second)))
	defer bound.Stop()
	select {
	case <-p.Done():
	case <-bound.C:
		timedOut = true
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _ = p.Shutdown(ctx)
		cancel()
		<-p.Done()
	}
	return p.Exit().Code, timedOut, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
