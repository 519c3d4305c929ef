package runner

import (
	"errors"
	"fmt"
	"syscall"

	"warden/pkg/safefile"
	"warden/pkg/schedule"
	"warden/pkg/state"
)

// stopIfStorageFault stops the campaign for review when err says that the
// file system of the campaign directory is full (ENOSPC, EDQUOT) or fails
// writes (EIO, EROFS): attempts can no longer keep their records and
// artifacts. The runs in flight end as they can;
// nothing new starts, and resume continues once space is freed.
//
// A write error that is not transient (a file system remounted read-only,
// an I/O error) is recorded as a stop where the database still commits;
// the runner ends the work, its children stopped the usual way, and Run
// returns the error (failStorage). Either is counted (diskFullCount).
func (c *Runner) stopIfStorageFault(err error) {
	full := errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
	cause, then := "ran out of space (ENOSPC)", "free space"
	switch {
	case err == nil || !full && !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EIO):
		return
	case errors.Is(err, syscall.EROFS):
		cause, then = "could not be written (read-only file system, EROFS)", "check the device and the file system"
	case !full:
		cause, then = "could not be written (I/O error, EIO)", "check the device and the file system"
	}
	msg := cause + ": " + err.Error()
	c.diskFullErr.Store(&msg)
	c.diskFull.Add(1)
	c.stopCampaign(schedule.Stop{Reason: state.StopHarnessError, Detail: fmt.Sprintf("the campaign directory %s %s: %v; %s, then resume", c.dir, cause, err, then)})
	if !full {
		c.failStorage(err)
	}
}

// diskFullCount is how many of the controller's writes to the campaign
// directory the file system refused (no space, an I/O error, read-only),
// and the last such cause and error: an attempt that ends failed while the
// count grew is classed as the harness's (attempt.Env.DiskFull).
func (c *Runner) diskFullCount() (int64, string) {
	n := c.diskFull.Load()
	last := ""
	if p := c.diskFullErr.Load(); p != nil {
		last = *p
	}
	return n, last
}

// failStorage records, once, that the campaign directory's file system
// refuses writes for good, and wakes the loop to end the work.
func (c *Runner) failStorage(err error) {
	c.storageOnce.Do(func() {
		c.storageErr = fmt.Errorf("the campaign directory %s cannot be written (%w): the work was ended; resume once the file system is writable again", c.dir, err)
		c.log.Error().Err(err).Msg("campaign directory not writable: ending the work")
		close(c.storageFailed)
	})
}

// stateFileTail is how many of the last events resume looks at to find
// the attempts whose state.json may lag behind the database.
const stateFileTail = 1000

// repairStateFiles rewrites the state.json files that lag behind the
// database (state.Store.RepairStateFiles) and says which.
func (c *Runner) repairStateFiles() {
	fixed, err := c.store.RepairStateFiles(stateFileTail, safefile.ChildLimit)
	if err != nil {
		c.log.Warn().Err(err).Msg("look for stale state.json files")
		return
	}
	for _, f := range fixed {
		if f.Err != nil {
			c.log.Warn().Err(f.Err).Str("run", f.Run).Int("attempt", f.N).Msg("rewrite state.json")
			continue
		}
		c.log.Info().Str("run", f.Run).Int("attempt", f.N).Msg("state.json lagged behind the database or was damaged (not its JSON: NUL-filled, cut); rewritten")
	}
}
