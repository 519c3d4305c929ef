// Package mancmd is the hidden "man DIR" command that Warden's binaries
// share: it writes a man page for every command of the tree (make man).
package mancmd

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// New returns the man command for root; title heads every page
// ("CONTROLLER", "CTLQ").
func New(root *cobra.Command, title string) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write man pages of every command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			return doc.GenManTree(root, &doc.GenManHeader{Title: title, Section: "1", Source: "Warden"}, args[0])
		},
	}
}
