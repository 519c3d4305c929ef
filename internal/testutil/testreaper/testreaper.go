// Package testreaper runs a test binary's tests as the subreaper of every
// process they start, with the one reaper that collects their exits.
package testreaper

import (
	"context"
	"fmt"
	"os"
	"testing"

	"warden/pkg/launch"
)

// Run makes the test process a subreaper, starts its reaper into *r, runs
// m's tests and closes the reaper; it returns the exit code for os.Exit.
// Nothing else may wait for children once it runs (see launch.Reaper):
// build what the tests need with os/exec before.
func Run(m *testing.M, r **launch.Reaper) int {
	if err := launch.BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*r = launch.NewReaper()
	if err := (*r).Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := (*r).Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}
