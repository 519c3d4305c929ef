package runner

// StopIfDiskFull and DiskFullCount expose the runner's storage-fault
// handling to its tests.
func (c *Runner) StopIfDiskFull(err error)                  { c.stopIfDiskFull(err) }
func (c *Runner) DiskFullCount() (count int64, last string) { return c.diskFullCount() }
