package runner

import (
	"context"
	"fmt"
	"time"

	"warden/pkg/budget"
	"warden/pkg/slurm"
	"warden/pkg/state"
)

// slurmGoneWithin bounds the wait for cancelled jobs to leave the queue,
// and for their accounting to record their end.
const slurmGoneWithin = 60 * time.Second

// accountingLag is how long after a job ended its record may take to
// appear in Slurm's accounting (about a second, seen).
const accountingLag = 10 * time.Second

// cancelCampaignJobs cancels every job of the campaign still in Slurm's
// queue (a dead controller's steps, and any it started but never
// recorded), and waits until none is left.
func (x slurmExecutor) cancelCampaignJobs(ctx context.Context) error {
	c := x.c
	cl := c.slurmClient()
	prefix := slurm.CampaignPrefix(x.cfg.Campaign)
	ctx, cancel := context.WithTimeout(ctx, slurmGoneWithin)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	cancelled := map[string]bool{}
	for {
		qctx, qcancel := context.WithTimeout(ctx, slurmCommandTimeout)
		jobs, err := cl.Jobs(qctx, prefix)
		qcancel()
		if err != nil {
			return err
		}
		if len(jobs) == 0 {
			return nil
		}
		for _, j := range jobs {
			if cancelled[j.ID] {
				continue
			}
			c.log.Warn().Str("job", j.ID).Str("name", j.Name).Str("state", j.State).Msg("cancelling a job of the campaign left in Slurm")
			if err := cl.Cancel(ctx, j.ID); err != nil {
				return err
			}
			cancelled[j.ID] = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("jobs of the campaign still in Slurm's queue after scancel: %v", jobs)
		case <-tick.C:
		}
	}
}

// stepSpan reads, from Slurm's accounting, when the attempt's job started
// and ended, waiting (bounded) for the end to be recorded. ok is false
// when Slurm has no record of it (the job never started).
func (c *Runner) stepSpan(ctx context.Context, a state.Attempt) (start, end time.Time, ended, ok bool, err error) {
	if a.Slurm.JobID == "" && a.Slurm.JobName == "" {
		return start, end, false, false, nil // never handed to Slurm
	}
	cl := c.slurmClient()
	ctx, cancel := context.WithTimeout(ctx, slurmGoneWithin)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	asked := time.Now()
	for {
		var recs []slurm.Record
		qctx, qcancel := context.WithTimeout(ctx, slurmCommandTimeout)
		if a.Slurm.JobID != "" {
			recs, err = cl.Accounting(qctx, a.Slurm.JobID)
		} else {
			recs, err = cl.AccountingByName(qctx, a.Slurm.JobName, a.CreatedAt.Add(-time.Hour))
		}
		qcancel()
		if err != nil {
			return start, end, false, false, err
		}
		if a.Slurm.Shared && a.Slurm.StepID != "" && a.Slurm.JobID != "" {
			// a step of a shared allocation: its own record, not the
			// allocation's
			if own := slurm.Records(recs, a.Slurm.JobID+"."+a.Slurm.StepID); len(own) > 0 {
				recs = own
			}
		}
		start, end, ended = slurm.Span(recs)
		if len(recs) > 0 && ended {
			return start, end, true, true, nil
		}
		if len(recs) == 0 && time.Since(asked) > accountingLag {
			// the queue has none of the campaign's jobs (they were
			// cancelled), and the accounting none of this one: it never
			// started
			return start, end, false, false, nil
		}
		select {
		case <-ctx.Done():
			return start, end, false, len(recs) > 0, nil
		case <-tick.C:
		}
	}
}

// reconcileSlurmAttempt ends a live attempt that ran as a Slurm step. Its
// job was cancelled already (cancelCampaignJobs); Slurm ended every
// process of it on its node. Its GPU time is charged from Slurm's own
// start and end of the job, and never less than the node reported (its
// server's start to its last record): what the ledger holds for it
// already is not charged again.
func (c *Runner) reconcileSlurmAttempt(ctx context.Context, a state.Attempt, already float64) error {
	start, end, ended, known, err := c.stepSpan(ctx, a)
	if err != nil {
		c.log.Warn().Err(err).Str("run", a.RunID).Int("attempt", a.N).Msg("read the step's accounting")
	}
	now := c.now()
	figures := map[string]float64{}
	total := 0.0
	if known && !start.IsZero() {
		if !ended || end.IsZero() {
			end = now // not recorded as ended: held until now, as far as anyone knows
		}
		total = budget.Charge(len(a.GPUIDs), start, end)
		figures["slurm_start_unix"] = unixSeconds(start)
		figures["slurm_end_unix"] = unixSeconds(end)
	}
	if srv := serverProc(a); srv != nil {
		last := a.UpdatedAt
		if !known {
			last = now // no account of the job: charge to now
		}
		total = max(total, budget.Charge(len(a.GPUIDs), srv.StartedAt, last))
	}
	if err != nil && (a.Slurm.JobID != "" || a.Slurm.JobName != "") {
		// the accounting could not be read: the job may have held its
		// GPUs from the attempt's creation until now (never under-count)
		total = max(total, budget.Charge(len(a.GPUIDs), a.CreatedAt, now))
		figures["slurm_accounting_unread"] = 1
	}
	charge := max(0, total-already)
	note := fmt.Sprintf("interrupted Slurm job %s (%s): %.3f GPU-s from Slurm's start to end and the node's reports, less %.3f charged before",
		a.Slurm.JobID, a.Slurm.JobName, total, already)
	return c.interruptLeftover(a, charge, note, "the controller died or stopped; the attempt's Slurm job was cancelled at resume", figures,
		func(at *state.Attempt) {
			if at.Slurm != nil && known {
				at.Slurm.Start, at.Slurm.End = start, end
			}
		})
}
