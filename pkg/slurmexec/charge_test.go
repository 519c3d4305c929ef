package slurmexec

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"warden/pkg/attempt"
	"warden/pkg/record"
	"warden/pkg/state"
)

// A node measures its charge to its own cleanup; the controller records
// the cleanup when the report arrives, later. The charge it records is
// never less than the GPU time from the server's start to that moment.
func TestChargeToReceipt(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	now := t0.Add(3572 * time.Millisecond)
	a := &step{env: &attempt.Env{Now: func() time.Time { return now }}, spec: attempt.Spec{GPUIDs: []int{0, 1}}, serverStart: t0}
	rep := record.Report{Kind: "transition", To: state.Cleanup,
		Ledger:         []state.LedgerEntry{{Kind: state.LedgerCharge, GPUSeconds: 2 * 3.551, Note: "server start to cleanup"}},
		AttemptFigures: map[string]float64{"gpu_seconds": 2 * 3.551}}
	a.chargeToReceipt(&rep)
	if got := rep.Ledger[0].GPUSeconds; got != 2*3.572 {
		t.Fatalf("charge %g GPU-s, want %g: from the server's start to the report's receipt", got, 2*3.572)
	}
	if rep.AttemptFigures["gpu_seconds"] != rep.Ledger[0].GPUSeconds {
		t.Fatalf("figure gpu_seconds %g disagrees with the ledger's %g", rep.AttemptFigures["gpu_seconds"], rep.Ledger[0].GPUSeconds)
	}
	// a charge already covering the receipt, and a report with none, stay
	more := record.Report{Ledger: []state.LedgerEntry{{Kind: state.LedgerCharge, GPUSeconds: 10}}}
	a.chargeToReceipt(&more)
	if more.Ledger[0].GPUSeconds != 10 {
		t.Fatalf("a larger node charge was changed to %g", more.Ledger[0].GPUSeconds)
	}
	none := &step{env: a.env, spec: a.spec}
	rep2 := record.Report{Ledger: []state.LedgerEntry{{Kind: state.LedgerCharge, GPUSeconds: 1}}}
	none.chargeToReceipt(&rep2)
	if rep2.Ledger[0].GPUSeconds != 1 {
		t.Fatal("without a reported server start the charge must stay the node's")
	}
}

// A report of another schema is another build's: refused before anything
// of it is recorded, with both versions named. The executor then ends the
// step and fails the attempt harness-error (TestSlurmNodeRunnerFailures).
func TestReportOfAnotherSchemaRefused(t *testing.T) {
	a := &step{env: &attempt.Env{Now: time.Now}}
	for _, schema := range []int{0, record.ReportSchema - 1, record.ReportSchema + 1} {
		err := a.applyReport(record.Report{Schema: schema, Kind: "transition", To: state.Complete})
		if err == nil {
			t.Fatalf("a report of schema %d was applied", schema)
		}
		want := fmt.Sprintf("a report of schema %d, where this controller reads schema %d", schema, record.ReportSchema)
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
}
