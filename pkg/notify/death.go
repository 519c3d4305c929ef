package notify

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// Nothing alerted when a controller died until someone resumed the
// campaign. controller check (an orchestrator's poll, a systemd timer)
// looks without resuming: a death it finds fires the notification once,
// remembered in DeathFile, so that a second check, and the resume that
// follows, do not fire it again.

// DeathFile is where the last controller death notified is recorded, in
// the campaign directory; CheckLockFile serializes the checks.
const (
	DeathFile     = "notified-death.json"
	CheckLockFile = "notify-check.lock"
)

// Death is one death of a campaign's controller: its pid, its boot and
// its last heartbeat tell it from any other.
type Death struct {
	PID       int       `json:"controller_pid"`
	BootID    string    `json:"controller_boot_id"`
	Heartbeat time.Time `json:"heartbeat"`
}

// Notified is a death as DeathFile records it: when it was notified and
// by whom ("controller check", or "resume").
type Notified struct {
	Death
	At time.Time `json:"notified_at"`
	By string    `json:"by"`
}

// DeathOf says whether the campaign's record shows its controller dead:
// no controller holds the campaign (held false) while it runs, or while
// it is stopped with attempts still live (live), the controller having
// died during the stop. It returns the death.
func DeathOf(cp state.Campaign, live int, held bool) (Death, bool) {
	d := Death{PID: cp.ControllerPID, BootID: cp.ControllerBootID, Heartbeat: cp.Heartbeat.UTC()}
	switch {
	case held:
		return d, false
	case cp.State == state.CampaignRunning:
		return d, true
	case cp.State == state.CampaignStopped:
		return d, live > 0
	}
	return d, false
}

// Same says whether two deaths are one.
func (d Death) Same(o Death) bool {
	return d.PID == o.PID && d.BootID == o.BootID && d.Heartbeat.Equal(o.Heartbeat)
}

// ReadNotified reads the death last notified in the campaign in dir; ok
// false when none was.
func ReadNotified(dir string) (n Notified, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, DeathFile))
	if errors.Is(err, fs.ErrNotExist) {
		return n, false, nil
	} else if err != nil {
		return n, false, err
	}
	if err := json.Unmarshal(b, &n); err != nil {
		return n, false, fmt.Errorf("read %s: %w", filepath.Join(dir, DeathFile), err)
	}
	return n, true, nil
}

// RecordNotified records d as notified in the campaign in dir, by by, at:
// written, renamed into place and the directory synced.
func RecordNotified(dir string, d Death, by string, at time.Time) error {
	return atomicfile.WriteJSON(filepath.Join(dir, DeathFile), Notified{Death: d, At: at.UTC(), By: by}, 0o600)
}

// Checked is what CheckDeath found and did.
type Checked struct {
	Death Death
	// Notified is the death's earlier notification, when it had one: then
	// nothing was fired.
	Notified *Notified
	// Fired: the command ran for this death now, and Result is how it
	// ended. A notifier without a command fires nothing.
	Fired  bool
	Result Result
}

// CheckDeath notifies death d of the campaign's controller (cp is its
// record) once: one check at a time (CheckLockFile); a death already
// notified (DeathFile) is not notified again; otherwise the death is
// recorded, then the command runs with a controller-dead event whose
// detail is detail. The record comes first: a check that dies while its
// command runs does not fire it twice. A nil Notifier (no command)
// records and fires nothing.
func (n *Notifier) CheckDeath(dir string, cp state.Campaign, d Death, detail string, now time.Time) (Checked, error) {
	c := Checked{Death: d}
	lock, err := lockfile.Acquire(filepath.Join(dir, CheckLockFile))
	if err != nil {
		return c, fmt.Errorf("another controller check holds %s: %w", filepath.Join(dir, CheckLockFile), err)
	}
	defer lock.Release()
	prior, ok, err := ReadNotified(dir)
	if err != nil {
		return c, err
	}
	if ok && prior.Same(d) {
		c.Notified = &prior
		return c, nil
	}
	if n == nil {
		return c, nil
	}
	if err := RecordNotified(dir, d, "controller check", now); err != nil {
		return c, err
	}
	ev := n.EventOf("controller-dead", cp)
	ev.Reason, ev.Detail = state.EventControllerDead, detail
	c.Fired, c.Result = true, n.Run(ev)
	return c, nil
}
