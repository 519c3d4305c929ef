package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// DocumentDefaults gives cobra's own completion command, and each of its
// shell subcommands, the exit status every command of the product states
// in its help (and so in its man page): 0 when the script is written,
// code when it cannot be. Call it once the root has its subcommands.
func DocumentDefaults(root *cobra.Command, code int) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		for _, sub := range append([]*cobra.Command{c}, c.Commands()...) {
			sub.Long += fmt.Sprintf("\n\nExit status: 0 the script is written; %d it cannot be, or bad usage.", code)
		}
	}
}
