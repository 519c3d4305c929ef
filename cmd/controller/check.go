package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/campaigndir"
	"warden/pkg/dirlayout"
	"warden/pkg/launch"
	"warden/pkg/lockfile"
	"warden/pkg/notify"
	"warden/pkg/state"
	"warden/pkg/views"
)

// checkResult is controller check's -o json document.
type checkResult struct {
	Schema int    `json:"schema"`
	Action string `json:"action"` // check
	Dir    string `json:"dir"`
	State  string `json:"state"`
	// Dead: no controller runs the unfinished campaign (exit 4).
	Dead          bool      `json:"dead"`
	ControllerPID int       `json:"controller_pid"`
	Heartbeat     time.Time `json:"heartbeat,omitzero"`
	// Notified: this check ran the notification command for the death;
	// NotifiedBefore is when an earlier one did (then none ran);
	// NotifyExitCode is the command's exit code (-1: it could not run or
	// was ended).
	Notified       bool       `json:"notified"`
	NotifiedBefore *time.Time `json:"notified_before,omitempty"`
	NotifyExitCode *int       `json:"notify_exit_code,omitempty"`
	Note           string     `json:"note,omitempty"`
	Hint           string     `json:"hint,omitempty"`
}

func newCheckCmd() *cobra.Command {
	var dir, output string
	cmd := &cobra.Command{
		Use:   "check -d DIR",
		Short: "Whether the campaign's controller died; notify each death once, without a resume",
		Long: `check looks at the campaign without resuming it, for an orchestrator's poll
or a systemd timer (docs/systemd/warden-check@.timer): when no controller
runs the unfinished campaign (it runs without one, or stopped with attempts
still live), the controller died, and check runs the campaign's --notify
command with a controller-dead event, once per death: the death (the
controller's pid, boot id and last heartbeat) is recorded in
DIR/notified-death.json before the command runs, so that a second check,
and the resume that follows, do not notify it again. It then prints the
resume. A campaign that runs with a live controller, or is complete,
frozen or stopped with nothing live, has nothing to notify. check starts no
controller and changes nothing else; the command's result is a campaign
event (reason notify), as the controller's notifications are.

Exit status: 0 nothing to notify (a live controller runs the campaign, or
it is finished or stopped); 4 the controller is dead while the campaign is
unfinished (notified now, before, or with no --notify command to run); 1
the records could not be read or the death not recorded; 2 usage or not a
campaign directory; 7 the campaign directory (its settings, which hold the
command) is another user's or writable by others.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := campaignDirArg("check", dir, output)
			if err != nil {
				return err
			}
			if err := notOwnedExit(campaigndir.CheckOwned(abs, os.Geteuid())); isNotOwned(err) {
				return err // the command it would run is another user's to choose
			}
			res, err := checkDeath(abs)
			if err != nil {
				return &cli.ExitError{Code: 1, Err: err}
			}
			if output == "json" {
				writeJSON(cmd.OutOrStdout(), res)
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), res.Note)
				if res.Hint != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "hint       %s\n", res.Hint)
				}
			}
			if res.Dead {
				return &cli.ExitError{Code: exitDied, Err: nil}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "campaign directory")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output: table or json")
	return cmd
}

// checkDeath is controller check on the campaign in dir.
func checkDeath(dir string) (checkResult, error) {
	res := checkResult{Schema: 1, Action: "check", Dir: dir}
	lock := dirlayout.Lock(dir)
	if lockfile.Held(lock) {
		res.Note = fmt.Sprintf("controller pid %d runs the campaign: nothing to notify", lockfile.Owner(lock))
		res.State = string(state.CampaignRunning)
		return res, nil
	}
	s, err := dirlayout.OpenStoreReadOnly(dir, 2*time.Second)
	if err != nil {
		if errors.Is(err, state.ErrLocked) { // a controller took it meanwhile
			res.Note = "a controller holds the campaign: nothing to notify"
			return res, nil
		}
		return res, err
	}
	cp, err := s.Campaign()
	var live []state.Attempt
	if err == nil {
		live, err = s.LiveAttempts()
	}
	s.Close()
	if err != nil {
		return res, err
	}
	res.State, res.ControllerPID, res.Heartbeat = string(cp.State), cp.ControllerPID, cp.Heartbeat
	d, dead := notify.DeathOf(cp, len(live), lockfile.Held(lock))
	if !dead {
		res.Note = fmt.Sprintf("campaign %s, no controller needed: nothing to notify", cp.State)
		return res, nil
	}
	res.Dead = true
	res.Hint = "the controller is dead and the campaign is unfinished (its servers and clients may still hold GPUs and ports); resume it: " + views.ResumeCommand(dir)
	what := fmt.Sprintf("controller pid %d is dead (its last heartbeat %s) and campaign %s is unfinished", cp.ControllerPID, cp.Heartbeat.UTC().Format(time.RFC3339), cp.ID)
	set, err := campaigndir.ReadSettings(dir)
	if err != nil {
		return res, err
	}
	n, stop, err := checkNotifier(dir, set, cp)
	if err != nil {
		return res, err
	}
	defer stop()
	c, err := n.CheckDeath(dir, cp, d, what+"; found by controller check; resume it: "+views.ResumeCommand(dir), time.Now())
	if err != nil {
		return res, err
	}
	switch {
	case c.Notified != nil:
		at := c.Notified.At
		res.NotifiedBefore = &at
		res.Note = fmt.Sprintf("%s; notified already, at %s by %s", what, at.Format(time.RFC3339), c.Notified.By)
	case c.Fired:
		code := c.Result.Code
		res.Notified, res.NotifyExitCode = true, &code
		res.Note = fmt.Sprintf("%s; notified: the command exited %d after %.1f s (DIR/%s)", what, code, c.Result.Seconds, notify.LogFile)
		if c.Result.Err != nil {
			res.Note = fmt.Sprintf("%s; the notification failed: %v", what, c.Result.Err)
		}
	default:
		res.Note = what + "; the campaign has no --notify command to run"
	}
	return res, nil
}

// checkNotifier is the campaign's notifier for controller check, its
// command run under this binary's notify-run supervisor, and what ends
// its reaper; a nil notifier when the campaign has no command.
func checkNotifier(dir string, set campaigndir.Settings, cp state.Campaign) (*notify.Notifier, func(), error) {
	ns := set.Notify
	if ns == nil {
		return nil, func() {}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	reaper, err := startReaper(ctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	logf, err := os.OpenFile(dirlayout.Log(dir), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		reaper.Close()
		cancel()
		return nil, nil, err
	}
	stop := func() {
		reaper.Close()
		cancel()
		logf.Close()
	}
	n, err := notify.New(notify.Config{Command: ns.Command, TimeoutS: ns.TimeoutS, Dir: dir, Store: checkStore{dir, cp},
		Log:      zerolog.New(logf).With().Timestamp().Str("by", "controller check").Logger(),
		Launcher: &launch.Launcher{Reaper: reaper}, Supervisor: []string{self, "notify-run"}})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("%s: notify: %w", dirlayout.Settings(dir), err)
	}
	return n, stop, nil
}

// checkStore is the campaign's record as controller check has read it,
// and the state database opened for writing only to record the
// notification's result (refused while a controller holds it).
type checkStore struct {
	dir string
	cp  state.Campaign
}

func (s checkStore) Campaign() (state.Campaign, error) { return s.cp, nil }

func (s checkStore) AppendEvent(e state.Event) (state.Event, error) {
	st, err := dirlayout.OpenStore(s.dir, state.Options{Timeout: 2 * time.Second})
	if err != nil {
		return e, err
	}
	defer st.Close()
	return st.AppendEvent(e)
}

// campaignDirArg checks the -d DIR and -o arguments of command name,
// which acts on an existing campaign: DIR given and holding a state
// database, the output table or json. It returns DIR made absolute; a
// refusal is exit 2.
func campaignDirArg(name, dir, output string) (string, error) {
	if dir == "" {
		return "", &cli.ExitError{Code: 2, Err: errors.New(name + ": -d DIR is required")}
	}
	if err := checkTableOrJSON(output); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", &cli.ExitError{Code: 2, Err: err}
	}
	if _, err := os.Stat(dirlayout.State(abs)); err != nil {
		return "", &cli.ExitError{Code: 2, Err: fmt.Errorf("%s: %s is not a campaign directory (no %s)", name, abs, dirlayout.StateFile)}
	}
	return abs, nil
}
