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
	// ControllerGaps are the intervals no controller ran the campaign: from
	// a dead controller's last heartbeat to the resume that found it dead.
	ControllerGaps []ControllerGap `json:"controller_gaps"`
}

// ControllerGap is one interval without a controller.
type ControllerGap struct {
	From          time.Time `json:"from"`
	Until         time.Time `json:"until"`
	Seconds       float64   `json:"seconds"`
	ControllerPID int       `json:"controller_pid,omitempty"`
}

// controllerGaps reads the gaps from the campaign's events.
func controllerGaps(s *state.Store) ([]ControllerGap, error) {
	evs, err := s.Events(0, 0)
	if err != nil {
		return nil, err
	}
	gaps := []ControllerGap{}
	for _, e := range evs {
		if e.Run != "" || e.Reason != state.EventControllerDead {
			continue
		}
		from, until := unixTime(e.Figures["dead_from_unix"]), unixTime(e.Figures["dead_until_unix"])
		if from.IsZero() || !until.After(from) {
			continue
		}
		gaps = append(gaps, ControllerGap{From: from, Until: until, Seconds: until.Sub(from).Seconds(), ControllerPID: int(e.Figures["controller_pid"])})
	}
	return gaps, nil
}

func unixTime(s float64) time.Time {
	if s <= 0 {
		return time.Time{}
	}
	sec := int64(s)
	return time.Unix(sec, int64((s-float64(sec))*1e9)).UTC()
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
	if r.ControllerGaps, err = controllerGaps(s); err != nil {
		return Report{}, err
	}
	return r, nil
}
