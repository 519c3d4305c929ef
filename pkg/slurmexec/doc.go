// Package slurmexec is the campaign's Slurm executor: it runs every attempt
// as a Slurm step. For each attempt it writes the node spec (pkg/node's
// Spec) into the attempt directory, records the job's name and command
// line, starts srun through the controller's launcher, sends the node-side
// runner the controller's commands, and applies each record the runner
// reports to the campaign's database through the caller's Recorder. The
// controller stays the only writer of the database.
//
// A co-location block runs in one allocation on one node (Allocate,
// Release). At resume, CancelCampaignJobs ends every job of the campaign
// left in Slurm's queue and StepSpan reads from Slurm's accounting when an
// attempt's job started and ended.
//
// # Failure paths
//
//   - srun that cannot start, or a step that ends without reporting the
//     attempt's end: step-lost, its GPU time charged from the server's
//     start to now, the cleanup gate error (the node's GPUs were not read).
//   - A report that cannot be recorded (or is not the report protocol):
//     the step is ended and the attempt fails harness-error.
//   - A stop while the step waits for resources: srun's SIGTERM withdraws
//     the request. srun is signalled by its pid alone, never its process
//     group, which would orphan the step.
package slurmexec
