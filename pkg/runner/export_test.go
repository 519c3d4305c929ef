package runner

import (
	"syscall"

	"warden/pkg/schedule"
)

// StopIfStorageFault and DiskFullCount expose the runner's storage-fault
// handling to its tests.
func (c *Runner) StopIfStorageFault(err error)              { c.stopIfStorageFault(err) }
func (c *Runner) DiskFullCount() (count int64, last string) { return c.diskFullCount() }

// HoldStop stands for a stop whose write the database refused (its disk
// full): the keeper holds s, as stopCampaign leaves it then.
func (c *Runner) HoldStop(s schedule.Stop) {
	c.stops.Record(s, func() bool { return true }, func(schedule.Stop) error { return syscall.ENOSPC })
}
