package runner

// StopIfStorageFault and DiskFullCount expose the runner's storage-fault
// handling to its tests.
func (c *Runner) StopIfStorageFault(err error)              { c.stopIfStorageFault(err) }
func (c *Runner) DiskFullCount() (count int64, last string) { return c.diskFullCount() }
