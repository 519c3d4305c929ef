package campaigndir

import (
	"fmt"
	"strings"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// Finished says whether the campaign in dir is complete or frozen, with a
// line that says so: resume then starts nothing. A campaign whose records
// cannot be read is not finished.
func Finished(dir string) (bool, string) {
	st, err := dirlayout.OpenStoreReadOnly(dir, 5*time.Second)
	if err != nil {
		return false, ""
	}
	defer st.Close()
	cp, err := st.Campaign()
	if err != nil || (cp.State != state.CampaignComplete && cp.State != state.CampaignFrozen) {
		return false, ""
	}
	if cp.State == state.CampaignFrozen {
		return true, fmt.Sprintf("campaign %s in %s is frozen; nothing to resume", cp.ID, dir)
	}
	sum, err := st.Summary()
	if err != nil {
		return true, fmt.Sprintf("campaign %s in %s is complete; nothing to resume", cp.ID, dir)
	}
	return true, fmt.Sprintf("campaign %s in %s is complete (%d runs); nothing to resume", cp.ID, dir, sum.RunsTotal)
}

// DiedError says that no controller is alive while the campaign is
// unfinished or attempts are left live: the controller died (before or
// during a stop) and may have left processes; resume reclaims them.
type DiedError struct{ Detail string }

func (e *DiedError) Error() string { return e.Detail }

// AfterStop reports what the records of the campaign in dir say once no
// controller holds it: a note when it is stopped and resumable with
// nothing left live, or complete; a *DiedError when a controller died and
// left attempts live or the campaign running. pid is the controller that
// was asked to stop (0: none was running).
func AfterStop(dir string, pid int) (string, error) {
	st, err := dirlayout.OpenStoreReadOnly(dir, 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("read the campaign in %s: %w", dir, err)
	}
	defer st.Close()
	cp, err := st.Campaign()
	if err != nil {
		return "", err
	}
	live, err := st.LiveAttempts()
	if err != nil {
		return "", err
	}
	who := "the controller"
	if pid != 0 {
		who = fmt.Sprintf("controller pid %d", pid)
	}
	switch {
	case cp.State == state.CampaignComplete:
		return fmt.Sprintf("no controller runs in %s; the campaign is complete", dir), nil
	case len(live) > 0:
		runs := make([]string, len(live))
		for i, a := range live {
			runs[i] = fmt.Sprintf("%s attempt %d (%s)", a.RunID, a.N, a.State)
		}
		return "", &DiedError{fmt.Sprintf("%s is not alive, but it left %d attempt(s) live: %s; their processes may still hold GPUs. Resume reclaims them: controller resume -d %s",
			who, len(live), strings.Join(runs, ", "), dir)}
	case cp.State == state.CampaignRunning:
		return "", &DiedError{fmt.Sprintf("%s is not alive and the campaign is unfinished (it died); resume continues it: controller resume -d %s", who, dir)}
	case pid == 0:
		return fmt.Sprintf("no controller runs in %s; the campaign is stopped (%s); resume with: controller resume -d %s", dir, cp.StopReason, dir), nil
	}
	return fmt.Sprintf("controller exited; the campaign is stopped (%s) and resumable: controller resume -d %s", cp.StopReason, dir), nil
}
