package main

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// docSwitches reads the "Stand-in switches" table of docs/servers.md:
// switch name (without dashes) to its documented default.
func docSwitches(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("../../docs/servers.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Stand-in switches"
		case in && strings.HasPrefix(line, "| `--"):
			cells := strings.Split(line, "|")
			if len(cells) < 4 {
				t.Fatalf("row %q", line)
			}
			name := strings.Trim(strings.TrimSpace(cells[1]), "`")
			def := strings.Trim(strings.TrimSpace(cells[2]), "`")
			out[strings.TrimPrefix(name, "--")] = def
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestServersDocSwitches: every switch docs/servers.md lists exists on
// "standin server" with the default it documents, and every switch of the
// server's real-server behaviours (profiler, server kind) and the ones
// listed below is documented there.
func TestServersDocSwitches(t *testing.T) {
	doc := docSwitches(t)
	flags := newServerCmd().Flags()
	for name, def := range doc {
		f := flags.Lookup(name)
		if f == nil {
			t.Errorf("docs/servers.md lists --%s, which standin server does not have", name)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s: docs/servers.md says default %q, the flag's is %q", name, def, f.DefValue)
		}
	}
	required := pflag.NewFlagSet("behaviours", pflag.ContinueOnError)
	addProfilerFlags(required, &profilerSchedule{})
	addKindFlags(required, &kindConfig{})
	for _, name := range []string{"max-num-seqs", "max-num-batched-tokens", "report-max-num-seqs", "effective-config",
		"traces-dir", "tp", "shutdown-timeout", "load-s", "reuse-port"} {
		required.Bool(name, false, "")
	}
	required.VisitAll(func(f *pflag.Flag) {
		if _, ok := doc[f.Name]; !ok {
			t.Errorf("--%s follows a real server's behaviour but docs/servers.md does not list it", f.Name)
		}
	})
	if len(doc) == 0 {
		t.Fatal("docs/servers.md has no stand-in switches table")
	}
}
