package runner

import (
	"context"
	"fmt"

	"warden/pkg/budget"
	"warden/pkg/record"
	"warden/pkg/slurmexec"
	"warden/pkg/state"
)

// reconcileSlurmAttempt ends a live attempt that ran as a Slurm step. Its
// job was cancelled already (slurmexec.Executor.CancelCampaignJobs); Slurm ended every
// process of it on its node. Its GPU time is charged from Slurm's own
// start and end of the job, and never less than the node reported (its
// server's start to its last record): what the ledger holds for it
// already is not charged again.
func (c *Runner) reconcileSlurmAttempt(ctx context.Context, a state.Attempt, already float64) error {
	start, end, ended, known, err := slurmexec.StepSpan(ctx, c.starter, a)
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
	if srv := record.ServerProc(a); srv != nil {
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
