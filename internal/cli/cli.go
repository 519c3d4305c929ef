// Package cli holds what the commands' mains share: running the root
// command and turning the error it returns into an exit status. Each main
// keeps what it shows of the error.
package cli

import (
	"errors"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// StatusError is an error that ends a command with an exit status other
// than the default. ExitError is one; a command may keep its own.
type StatusError interface {
	error
	// ExitStatus returns the exit code and the error to show, which may
	// be nil (nothing to show).
	ExitStatus() (code int, cause error)
}

// ExitError ends the command with exit status Code, showing Err.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ExitError) Unwrap() error { return e.Err }

// ExitStatus returns Code and Err.
func (e *ExitError) ExitStatus() (int, error) { return e.Code, e.Err }

// Status is how a failed command ends.
type Status struct {
	Code int
	// Cause is the error the StatusError carries, or the error itself
	// when none in its chain is one.
	Cause error
	// Carried says whether a StatusError in the chain set Code.
	Carried bool
}

// StatusOf returns the status err ends a command with: that of the first
// StatusError in its chain, or def and err itself.
func StatusOf(err error, def int) Status {
	var se StatusError
	if errors.As(err, &se) {
		code, cause := se.ExitStatus()
		return Status{Code: code, Cause: cause, Carried: true}
	}
	return Status{Code: def, Cause: err}
}

// Run executes root and returns the process's exit status: 0 when it
// succeeds; otherwise it calls report with the command that ran, the
// error and its status (def when the error carries none), and returns
// the status's code. A main passes the result to os.Exit.
func Run(root *cobra.Command, def int, report func(cmd *cobra.Command, err error, s Status)) int {
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	s := StatusOf(err, def)
	report(cmd, err, s)
	return s.Code
}

// IsTerminal says whether f is a terminal (it answers the terminal's
// ioctl), for a command that shows progress or colour only to a person.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
