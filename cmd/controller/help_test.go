package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestEveryCommandStatesItsExitStatus (issue 39, friction 11): every
// command a person can call states its exit status in its own --help,
// and so in its man page (make man), not only ctlq.1.
func TestEveryCommandStatesItsExitStatus(t *testing.T) {
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
	walk(newRoot())
	if seen < 10 {
		t.Fatalf("only %d commands seen", seen)
	}
}

// TestOneResumeSpelling (issue 39, friction 8): the hints, the help and
// the docs spell a resume one way, controller resume -d DIR; the root's
// --resume is named only where it is said to be that same command. And
// both spellings take the same flags.
func TestOneResumeSpelling(t *testing.T) {
	var files []string
	for _, glob := range []string{"../../README.md", "../../docs/*.md", "../../docs/systemd/*", "../../cmd/*/*.go", "../../pkg/*/*.go", "../../pkg/*/*/*.go"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "controller --resume") && !strings.Contains(line, "controller resume") {
				t.Errorf("%s:%d spells a resume controller --resume: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d files read", checked)
	}

	root := newRoot()
	resume, _, err := root.Find([]string{"resume"})
	if err != nil {
		t.Fatal(err)
	}
	resume.Flags().VisitAll(func(f *pflag.Flag) {
		if root.Flags().Lookup(f.Name) == nil {
			t.Errorf("controller resume takes --%s, controller --resume does not", f.Name)
		}
	})
	if root.Flags().Lookup("output").Shorthand != "o" {
		t.Error("controller --resume takes no -o")
	}
}
