package budget

import (
	"strings"
	"testing"
)

// A refusal lists the wave's runs as an operator reads them, not as a Go
// slice.
func TestRefusalListsRuns(t *testing.T) {
	r := &Refusal{Account: Account{CapGPUSeconds: 3600}, Want: 7200, Runs: []string{"a.sat", "b.mod"}}
	msg := r.Error()
	if !strings.Contains(msg, "(runs a.sat, b.mod)") || strings.Contains(msg, "[") {
		t.Fatalf("refusal text %q", msg)
	}
}
