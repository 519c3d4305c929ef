package main

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	sweeppkg "warden/pkg/sweep"
)

// TestValidatorDocsName: the validators docs/validators.md's table lists,
// each with its own section, are exactly `controller validate`'s
// subcommands, and every validator docs/stop-conditions.md says detects a
// stop condition is one of them.
func TestValidatorDocsName(t *testing.T) {
	t.Parallel()
	var subs []string
	for _, c := range newValidateCmd().Commands() {
		subs = append(subs, c.Name())
	}
	b, err := os.ReadFile("../../docs/validators.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, table, ok := strings.Cut(doc, "| subcommand |")
	table, _, _ = strings.Cut(table, "\n\n")
	if !ok {
		t.Fatal("docs/validators.md: no subcommand table")
	}
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(table, -1) {
		listed = append(listed, m[1])
	}
	slices.Sort(subs)
	slices.Sort(listed)
	if !slices.Equal(subs, listed) {
		t.Errorf("docs/validators.md's table lists %v; controller validate has %v", listed, subs)
	}
	for _, s := range subs {
		if !strings.Contains(doc, "\n## "+s+"\n") {
			t.Errorf("docs/validators.md has no section for validator %s", s)
		}
	}
	sc, err := os.ReadFile("../../docs/stop-conditions.md")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("the `([a-z0-9-]+)` validator").FindAllStringSubmatch(string(sc), -1)
	if len(named) < 5 {
		t.Fatalf("docs/stop-conditions.md names %d validators: its shape changed", len(named))
	}
	for _, m := range named {
		if !slices.Contains(subs, m[1]) {
			t.Errorf("docs/stop-conditions.md says the %q validator detects a stop condition; controller validate has no such subcommand", m[1])
		}
	}
}

// sweepDocTable reads the rows of the table of docs/sweep.md that begins
// with header: each row's first cell and second cell.
func sweepDocTable(t *testing.T, header string) [][2]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/sweep.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), header)
	if !ok {
		t.Fatalf("docs/sweep.md has no table %q", header)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var rows [][2]string
	for _, line := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(line, " | ")
		if len(cells) < 2 {
			t.Fatalf("docs/sweep.md: row %q", line)
		}
		rows = append(rows, [2]string{strings.TrimPrefix(cells[0], "| "), strings.TrimSuffix(cells[1], " |")})
	}
	return rows
}

// TestSweepDocsFlags: docs/sweep.md's flag table lists exactly the flags
// controller sweep has beside controller start's, each with its default;
// every flag pkg/sweep's errors name is one of them.
func TestSweepDocsFlags(t *testing.T) {
	t.Parallel()
	sweep := newSweepCmd()
	start := map[string]bool{}
	newStartCmd().Flags().VisitAll(func(f *pflag.Flag) { start[f.Name] = f.Name != "dir" })
	want := map[string]string{}
	sweep.Flags().VisitAll(func(f *pflag.Flag) {
		if !start[f.Name] {
			want[f.Name] = f.DefValue
		}
	})
	listed := map[string]bool{}
	for _, row := range sweepDocTable(t, "| flag | default | becomes |") {
		m := regexp.MustCompile("^`(?:-[a-z], )?--([a-z0-9-]+)`$").FindStringSubmatch(row[0])
		if m == nil {
			t.Errorf("docs/sweep.md: flag cell %q", row[0])
			continue
		}
		name, doc := m[1], row[1]
		listed[name] = true
		def, ok := want[name]
		switch {
		case !ok:
			t.Errorf("docs/sweep.md lists --%s, which controller sweep does not have beside start's flags", name)
		case def == "" && doc != "–", def != "" && doc != "`"+def+"`":
			t.Errorf("--%s: docs/sweep.md says default %s, the flag's is %q", name, doc, def)
		}
	}
	for name := range want {
		if !listed[name] {
			t.Errorf("controller sweep has --%s, which docs/sweep.md's flag table does not list", name)
		}
	}
	for _, name := range sweeppkg.FlagNames {
		if _, ok := want[name]; !ok {
			t.Errorf("pkg/sweep names --%s in its errors; controller sweep has no such flag of its own", name)
		}
	}
}

// TestSweepDocsExitCodes: docs/sweep.md's exit codes are controller
// sweep's, as its help lists them, word for word.
func TestSweepDocsExitCodes(t *testing.T) {
	t.Parallel()
	rows := sweepDocTable(t, "| exit | meaning |")
	if len(rows) != len(sweepExits) {
		t.Fatalf("docs/sweep.md lists %d exit codes, controller sweep %d", len(rows), len(sweepExits))
	}
	help := strings.Join(strings.Fields(newSweepCmd().Long), " ")
	for i, e := range sweepExits {
		if rows[i][0] != strconv.Itoa(e.code) || rows[i][1] != e.meaning {
			t.Errorf("docs/sweep.md exit row %v; controller sweep's is %d %q", rows[i], e.code, e.meaning)
		}
		if !strings.Contains(help, strconv.Itoa(e.code)+" "+e.meaning) {
			t.Errorf("controller sweep --help lacks exit %d: %s", e.code, e.meaning)
		}
	}
}
