package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/pkg/notify"
	"warden/pkg/state"
)

// notifyEvents returns the campaign's notify events.
func (c *campaign) notifyEvents() []state.Event {
	c.t.Helper()
	s := c.store()
	defer s.Close()
	evs, err := s.Events(0, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []state.Event
	for _, e := range evs {
		if e.Run == "" && e.Reason == "notify" {
			out = append(out, e)
		}
	}
	return out
}

// TestNotifyStopForReview: a campaign that stops for review runs the
// notification command with the stop as JSON on its standard input, and
// records that it did.
func TestNotifyStopForReview(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	got := filepath.Join(t.TempDir(), "event.json")
	proto := writeProtocol(t, scenario{serverArgs: `, --crash-after, "0.6"`, measureS: "3"})
	out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground", "--notify", "cat > "+got)
	if code != 0 {
		t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatalf("the notification command got nothing: %v", err)
	}
	var ev notify.Event
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("the event is not JSON: %v\n%s", err, b)
	}
	s := c.store()
	cp, _ := s.Campaign()
	s.Close()
	if ev.Schema != 1 || ev.Event != "stopped" || ev.State != "stopped" || ev.Reason != string(cp.StopReason) || ev.Campaign != cp.ID || ev.Dir != c.dir || ev.Reason == "" {
		t.Fatalf("event %+v, want the stop for review (%s) of campaign %s", ev, cp.StopReason, cp.ID)
	}
	ns := c.notifyEvents()
	if len(ns) != 1 || ns[0].Figures["exit_code"] != 0 || ns[0].Figures["timed_out"] != 0 || !strings.Contains(ns[0].Message, "notified stopped") {
		t.Fatalf("notify records %+v", ns)
	}
	c.assertNoProcesses()
}

// TestNotifyHangEndedAtItsBound: a command that never ends is ended at its
// bound, the campaign ends all the same, and the record says so.
func TestNotifyHangEndedAtItsBound(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	out, code := c.controller("start", "-f", writeProtocol(t, scenario{}), "-d", c.dir, "--gpu-backend", "fake", "--foreground",
		"--notify", "echo $$ > "+pidFile+"; exec sleep 600", "--notify-timeout-s", "0.5")
	if code != 0 {
		t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	ns := c.notifyEvents()
	if len(ns) != 1 || ns[0].Figures["timed_out"] != 1 || !strings.Contains(ns[0].Message, "ended at its bound of 0.5 s") {
		t.Fatalf("notify records %+v", ns)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitFor(t, "the hanging command to be gone", 30*time.Second, func() bool { return !running(pid) })
	s := c.store()
	cp, _ := s.Campaign()
	s.Close()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s", cp.State)
	}
}

func TestNotifyFlagsRefused(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{})
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--notify-timeout-s", "3"); code != 2 || !strings.Contains(out, "--notify-timeout-s goes with --notify") {
		t.Fatalf("a timeout without a command: exit %d\n%s", code, out)
	}
	// 1e300 s overflowed a Duration to a negative one: the command was
	// ended at once
	for _, bound := range []string{"0", "-1", "86400.5", "1e300", "+Inf", "NaN"} {
		if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--notify", "true", "--notify-timeout-s", bound); code != 2 || !strings.Contains(out, "must be positive and at most 86400 s (a day)") {
			t.Fatalf("--notify-timeout-s %s: exit %d\n%s", bound, code, out)
		}
		if _, err := os.Stat(c.dir); err == nil {
			t.Fatalf("--notify-timeout-s %s: the refused start made %s", bound, c.dir)
		}
	}
}

// TestNotifyControllerDeadAtResume: the resume that finds the controller
// dead says so, beside the campaign, and the end follows.
func TestNotifyControllerDeadAtResume(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	got := filepath.Join(t.TempDir(), "events.jsonl")
	proto := writeProtocol(t, scenario{patterns: 3, measureS: "1.5"})
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--notify", "cat >> "+got); code != 0 {
		t.Fatalf("start exited %d:\n%s", code, out)
	}
	c.waitMeasuring()
	c.killController()
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev notify.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		events = append(events, ev.Event)
		if ev.Event == "controller-dead" && (ev.Reason != state.EventControllerDead || !strings.Contains(ev.Detail, "found dead at resume")) {
			t.Fatalf("controller-dead event %+v", ev)
		}
	}
	// the resume's notification runs beside the campaign; both are done
	// before the controller exits
	if len(events) != 2 || !(events[0] == "controller-dead" && events[1] == "complete" || events[0] == "complete" && events[1] == "controller-dead") {
		t.Fatalf("events %v, want controller-dead and complete", events)
	}
	c.assertNoProcesses()
}

// TestNotifyCommandFails: a command that fails is recorded with its exit
// code and changes nothing of the campaign.
func TestNotifyCommandFails(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	out, code := c.controller("start", "-f", writeProtocol(t, scenario{}), "-d", c.dir, "--gpu-backend", "fake", "--foreground", "--notify", "exit 3")
	if code != 0 {
		t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	ns := c.notifyEvents()
	if len(ns) != 1 || ns[0].Figures["exit_code"] != 3 || ns[0].Figures["timed_out"] != 0 || !strings.Contains(ns[0].Message, "the command exited 3") {
		t.Fatalf("notify records %+v", ns)
	}
	s := c.store()
	cp, _ := s.Campaign()
	s.Close()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s", cp.State)
	}
}
