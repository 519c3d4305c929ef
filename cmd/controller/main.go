// Command controller runs pre-registered benchmark campaigns: it plans a
// protocol, executes its runs detached from the terminal, and resumes after
// a crash or a reboot.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	root := newRoot()
	err := root.Execute()
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(os.Stderr, ee.err)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "controller:", err)
	os.Exit(1)
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "controller",
		Short:         "Run pre-registered GPU serving benchmark campaigns",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newPlanCmd())
	return root
}
