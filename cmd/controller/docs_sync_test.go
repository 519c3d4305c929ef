package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
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
