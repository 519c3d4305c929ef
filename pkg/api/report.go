package api

import (
	"time"

	"warden/pkg/state"
)

// Report is everything a campaign report draws from the state database:
// `ctlq report` reads it through GET /v1/report or from the database, and
// adds what lives in files (plan.json, results, GPU samples).
type Report struct {
	Schema      int               `json:"schema"`
	GeneratedAt time.Time         `json:"generated_at"`
	Status      Status            `json:"status"`
	Amendments  []state.Amendment `json:"amendments"`
	// Runs in plan order, each with its attempts, events and gate verdicts.
	Runs []RunDetail `json:"runs"`
	// Ledger is the budget ledger in order: charges, reservations and
	// their releases.
	Ledger []state.LedgerEntry `json:"ledger"`
}

// BuildReport gathers a report from the store. Its cost grows with the
// runs and events of the campaign; it is for a report, not for polling.
func BuildReport(s *state.Store, dir string, ctl Controller, now time.Time) (Report, error) {
	r := Report{Schema: Schema, GeneratedAt: now, Runs: []RunDetail{}}
	var err error
	if r.Status, err = BuildStatus(s, dir, ctl, now); err != nil {
		return Report{}, err
	}
	if r.Amendments, err = s.Amendments(); err != nil {
		return Report{}, err
	}
	if r.Amendments == nil {
		r.Amendments = []state.Amendment{}
	}
	runs, err := s.Runs()
	if err != nil {
		return Report{}, err
	}
	for _, run := range runs {
		d, err := BuildRun(s, run.ID)
		if err != nil {
			return Report{}, err
		}
		r.Runs = append(r.Runs, d)
	}
	if r.Ledger, err = s.Ledger(); err != nil {
		return Report{}, err
	}
	if r.Ledger == nil {
		r.Ledger = []state.LedgerEntry{}
	}
	return r, nil
}
