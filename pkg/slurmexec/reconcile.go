package slurmexec

import (
	"context"
	"fmt"
	"time"

	"warden/pkg/launch"
	"warden/pkg/slurm"
	"warden/pkg/state"
)

// goneWithin bounds the wait for cancelled jobs to leave the queue,
// and for their accounting to record their end.
const goneWithin = 60 * time.Second

// accountingLag is how long after a job ended its record may take to
// appear in Slurm's accounting (about a second, seen).
const accountingLag = 10 * time.Second

// CancelCampaignJobs cancels every job of the campaign still in Slurm's
// queue (a dead controller's steps, and any it started but never
// recorded), and waits until none is left.
func (x *Executor) CancelCampaignJobs(ctx context.Context) error {
	cl := Client(x.l)
	prefix := slurm.CampaignPrefix(x.cfg.Campaign)
	ctx, cancel := context.WithTimeout(ctx, goneWithin)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	cancelled := map[string]bool{}
	for {
		qctx, qcancel := context.WithTimeout(ctx, commandTimeout)
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
			x.log.Warn().Str("job", j.ID).Str("name", j.Name).Str("state", j.State).Msg("cancelling a job of the campaign left in Slurm")
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

// StepSpan reads, from Slurm's accounting, when the attempt's job started
// and ended, waiting (bounded) for the end to be recorded. ok is false
// when Slurm has no record of it (the job never started).
func StepSpan(ctx context.Context, l *launch.Launcher, a state.Attempt) (start, end time.Time, ended, ok bool, err error) {
	if a.Slurm.JobID == "" && a.Slurm.JobName == "" {
		return start, end, false, false, nil // never handed to Slurm
	}
	cl := Client(l)
	ctx, cancel := context.WithTimeout(ctx, goneWithin)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	asked := time.Now()
	for {
		var recs []slurm.Record
		qctx, qcancel := context.WithTimeout(ctx, commandTimeout)
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
