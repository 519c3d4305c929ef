package runner

import (
	"errors"
	"fmt"
	"syscall"

	"warden/pkg/safefile"
	"warden/pkg/schedule"
	"warden/pkg/state"
)

// stopIfDiskFull stops the campaign for review when err says that the
// file system of the campaign directory is full: attempts can no longer
// keep their records and artifacts. The runs in flight end as they can;
// nothing new starts, and resume continues once space is freed.
//
// A write error that is not transient (a file system remounted read-only,
// an I/O error) cannot even record a stop: the runner ends the work
// instead, its children stopped the usual way, and Run returns the error
// (failStorage).
func (c *Runner) stopIfDiskFull(err error) {
	switch {
	case err == nil:
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		c.noteStorageFault("ran out of space (ENOSPC)", err)
		c.stopCampaign(schedule.Stop{Reason: state.StopHarnessError, Detail: fmt.Sprintf(
			"no space left on device (ENOSPC) for the campaign directory %s: %v; free space, then resume", c.dir, err)})
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EIO):
		cause := "could not be written (I/O error, EIO)"
		if errors.Is(err, syscall.EROFS) {
			cause = "could not be written (read-only file system, EROFS)"
		}
		c.noteStorageFault(cause, err)
		// recorded where the database still commits (an I/O error on
		// some writes only), so that ctlq status names the cause
		c.stopCampaign(schedule.Stop{Reason: state.StopHarnessError, Detail: fmt.Sprintf(
			"the campaign directory %s %s: %v; check the device and the file system, then resume", c.dir, cause, err)})
		c.failStorage(err)
	}
}

// noteStorageFault counts a write to the campaign directory that the file
// system refused, with its cause ("ran out of space (ENOSPC)") and error,
// for the attempts that end failed meanwhile (diskFullCount).
func (c *Runner) noteStorageFault(cause string, err error) {
	msg := cause + ": " + err.Error()
	c.diskFullErr.Store(&msg)
	c.diskFull.Add(1)
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
