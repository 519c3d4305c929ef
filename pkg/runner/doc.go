// Package runner is the campaign loop: it reconciles what a previous
// controller left (Reconcile), claims the campaign (Claim), then runs it
// (Run) until it completes, stops for review, or Stop or Freeze is called.
// Each turn it reads the records into a View, asks the scheduling policy
// (pkg/schedule) what to do, records the regime, the stop or the
// reservation, and starts units of runs; after each attempt the outcome
// policy (pkg/outcome) says whether the unit goes on, retries or stops.
//
// An executor runs the attempts: on this host (the attempt lifecycle,
// pkg/attempt, given an Env) or each as a Slurm step (pkg/slurmexec). It is
// chosen once, in New; the loop, reconcile and co-location ask it what
// depends on where the processes run.
//
// # What it owns
//
//   - The budget in flight: the reservations of the units started, and the
//     GPU time of the attempts whose server holds GPUs (flights), checked
//     against the cap each tick; at the cap the runs end budget-exhausted.
//     A unit's reservations are released when it ends: left out of the
//     next decision's account at once, and recorded in one commit with the
//     next wave's reservations, or on their own when the next decision
//     launches nothing, and always before Run returns. One lost to a crash
//     is released at resume.
//   - The campaign's storage health: a full file system stops the campaign
//     for review; one that refuses writes for good ends the work and Run
//     returns the error.
//   - Resume (Reconcile): every attempt left live is ended, its processes
//     reclaimed by identity (or its Slurm job cancelled), its GPU time
//     charged never less than it held, and stale state.json files rewritten.
//   - Co-location checks: a target and its background loads run side by
//     side, then the check's gate judges the block.
package runner
