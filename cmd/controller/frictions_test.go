package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/state"
)

// Issue 39, "every stop says what to do": what needs the binary (its
// flags, its output, its exit codes). The rules are tested where they
// live (pkg/outcome, pkg/schedule, pkg/runner, pkg/views, ...).

// firstDocument decodes the indented JSON document out holds (a
// foreground controller's log lines beside it) into v.
func firstDocument(out string, v any) error {
	i := strings.Index(out, "{\n  \"schema\"")
	if i < 0 {
		return errors.New("no document")
	}
	return json.NewDecoder(strings.NewReader(out[i:])).Decode(v)
}

// TestResumeSaysWhatItHolds: a stop on one bad server flag shared by
// every run. Both spellings of a resume take the same flags (-o json
// among them: friction 8); a resume with nothing fixed names the run it
// holds for the shared cause and launches nothing (friction 1); ctlq
// status then gives the amendment as its hint, and the flag that tries
// the held runs; --retry-shared-cause tries them.
func TestResumeSaysWhatItHolds(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{patterns: 3, serverArgs: `, "--no-such-flag"`}))
	s := c.store()
	c.stoppedFor(s, state.ReasonServerExit)
	s.Close()

	out, code := c.controller("--resume", "-d", c.dir, "--foreground", "-o", "json")
	var doc struct {
		Schema   int `json:"schema"`
		Awaiting []struct {
			Run string `json:"run"`
		} `json:"awaiting_amendment"`
		Held []struct {
			Run    string `json:"run"`
			Cause  string `json:"cause_run"`
			Reason string `json:"reason"`
		} `json:"held_shared_cause"`
	}
	if err := firstDocument(out, &doc); err != nil || code != 0 || len(doc.Held) != 1 ||
		doc.Held[0].Run != "p3.saturation" || doc.Held[0].Cause != "p1.saturation" || doc.Held[0].Reason != "server-exit" || len(doc.Awaiting) != 2 {
		t.Fatalf("controller --resume -o json: exit %d, %v:\n%s", code, err, out)
	}
	out, code = c.controller("resume", "-d", c.dir, "--foreground")
	if code != 0 || !strings.Contains(out, "held, not launched without an amendment that covers the failed run or --retry-shared-cause: p3.saturation share the cause of p1.saturation attempt 1 (server-exit, server standin)") {
		t.Fatalf("controller resume: exit %d:\n%s", code, out)
	}
	s = c.store()
	if as := c.attempts(s, "p3.saturation"); len(as) != 0 {
		t.Fatalf("p3.saturation was launched: %v", attemptStates(as))
	}
	s.Close()
	st, _ := exec.Command(ctlqBin, "status", "-d", c.dir).Output()
	if !strings.Contains(string(st), "hint       fix the protocol and register the fix (ctlq show RUN shows the failure): controller amend -d "+c.dir+" -f NEW_PROTOCOL --id ID --reason TEXT --yes, then controller resume -d "+c.dir+"; to try the runs that share its cause unchanged: controller resume -d "+c.dir+" --retry-shared-cause") {
		t.Fatalf("ctlq status:\n%s", st)
	}
	if !strings.Contains(string(st), "held       p3.saturation: shares the cause of p1.saturation attempt 1 (server-exit, server standin); not launched without an amendment or --retry-shared-cause") {
		t.Fatalf("ctlq status does not list the held run:\n%s", st)
	}
	js, _ := exec.Command(ctlqBin, "status", "-d", c.dir, "-o", "json").Output()
	var sdoc struct {
		Held []struct {
			Run string `json:"run"`
		} `json:"held_shared_cause"`
		Hint string `json:"hint"`
	}
	if err := json.Unmarshal(js, &sdoc); err != nil || len(sdoc.Held) != 1 || sdoc.Held[0].Run != "p3.saturation" || !strings.Contains(sdoc.Hint, "--retry-shared-cause") {
		t.Fatalf("ctlq status -o json (%v):\n%s", err, js)
	}

	if out, code = c.controller("resume", "-d", c.dir, "--foreground", "--retry-shared-cause"); code != 0 {
		t.Fatalf("resume --retry-shared-cause: exit %d:\n%s", code, out)
	}
	s = c.store()
	defer s.Close()
	c.soleAttempt(s, "p3.saturation", state.Failed, state.ReasonServerExit)
}

// TestPlanAwayFromTheInputsNamesTheFlag (friction 6): plan of a shipped
// protocol on a machine without its inputs names --check-inputs=false, in
// its message and in -o json's hint; with it the plan goes through.
func TestPlanAwayFromTheInputsNamesTheFlag(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := filepath.Join("..", "..", "protocols", "opprof-phase3.yaml")
	out, code := c.controller("plan", "-f", proto)
	if code != exitInvalid || !strings.Contains(out, "does not exist") ||
		!strings.HasSuffix(strings.TrimSpace(out), "every one of these problems is an input this machine lacks (a file, a manifest, an executable): to plan the protocol away from the machine it is frozen for, run controller plan --check-inputs=false (controller start always looks for them)") {
		t.Fatalf("plan without the inputs: exit %d:\n%s", code, tail(out, 2000))
	}
	out, _ = c.controller("plan", "-f", proto, "-o", "json")
	var doc struct {
		Hint     string `json:"hint"`
		Problems []struct {
			Input bool `json:"input"`
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || !strings.Contains(doc.Hint, "--check-inputs=false") || len(doc.Problems) == 0 || !doc.Problems[0].Input {
		t.Fatalf("plan -o json without the inputs (%v):\n%s", err, tail(out, 2000))
	}
	if out, code := c.controller("plan", "-f", proto, "--check-inputs=false"); code != 0 && code != exitOverBudget {
		t.Fatalf("plan --check-inputs=false: exit %d:\n%s", code, tail(out, 2000))
	}
}

// TestCheckNotifiesADeathOnce (friction 9): a controller killed while a
// run measures. controller check, as a timer runs it, notifies the death
// once (exit 4, the resume as its hint); a second check does not notify
// it again; nor does the resume that follows, which completes the
// campaign. A check of the finished campaign has nothing to notify.
func TestCheckNotifiesADeathOnce(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.start(writeProtocol(t, scenario{measureS: "2"}), "--notify", "cat >> notified.jsonl")
	c.waitMeasuring()
	c.killController()

	out, code := c.controller("check", "-d", c.dir)
	if code != exitDied || !strings.Contains(out, "is dead (its last heartbeat ") || !strings.Contains(out, "; notified: the command exited 0") ||
		!strings.Contains(out, "hint       the controller is dead and the campaign is unfinished") || !strings.HasSuffix(strings.TrimSpace(out), "resume it: controller resume -d "+c.dir) {
		t.Fatalf("first check: exit %d:\n%s", code, out)
	}
	out, code = c.controller("check", "-d", c.dir, "-o", "json")
	var doc struct {
		Dead           bool    `json:"dead"`
		Notified       bool    `json:"notified"`
		NotifiedBefore *string `json:"notified_before"`
		Hint           string  `json:"hint"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitDied || !doc.Dead || doc.Notified || doc.NotifiedBefore == nil || !strings.Contains(doc.Hint, "controller resume -d") {
		t.Fatalf("second check: exit %d, %v:\n%s", code, err, out)
	}
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume: exit %d:\n%s", code, tail(out, 3000))
	}
	b, _ := os.ReadFile(filepath.Join(c.dir, "notified.jsonl"))
	if n := strings.Count(string(b), `"event":"controller-dead"`); n != 1 || !strings.Contains(string(b), `"event":"complete"`) {
		t.Fatalf("controller-dead notified %d times:\n%s", n, b)
	}
	if out, code := c.controller("check", "-d", c.dir); code != 0 || !strings.Contains(out, "campaign complete, no controller needed: nothing to notify") {
		t.Fatalf("check of the complete campaign: exit %d:\n%s", code, out)
	}
}
