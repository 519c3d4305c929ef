package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// helpExits checks that every command of root a person can call (and so
// gets a man page: make man) states its exit status in its own help.
func helpExits(t *testing.T, root *cobra.Command) {
	t.Helper()
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		seen++
		if !strings.Contains(c.Long, "Exit status") {
			t.Errorf("%s --help states no exit status", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if seen < 5 {
		t.Fatalf("only %d commands seen", seen)
	}
}

// TestEveryCommandStatesItsExitStatus (issue 39, friction 11): exit
// codes in each command's own --help and man page, not only the root's.
func TestEveryCommandStatesItsExitStatus(t *testing.T) { helpExits(t, newRoot()) }
