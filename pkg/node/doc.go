// Package node is the node side of the Slurm executor: the node-side runner
// that srun starts on a node runs one attempt there with the attempt
// lifecycle (pkg/attempt), from the Spec the controller wrote into the
// attempt directory (SpecFile), and reports every record to the controller
// as JSON lines on its standard output (pkg/record's Report). It opens no
// database: the controller stays the only writer of the campaign's records.
//
// # Commands
//
// The controller writes one command per line on the runner's standard
// input: CmdStop (end the attempt: interrupted, it restarts on resume),
// CmdBudget (the same, because the budget's cap was reached) and CmdUntil
// (a background load's target is done: end its client). The end of the
// input means the controller is gone: the attempt ends as for a stop.
//
// # Refusals
//
// Run refuses, before it reports anything or starts a process, a spec of
// another SpecSchema, without a plan or slots, whose attempt directory is
// not a clean absolute path, or whose step holds another number of GPUs
// than the run's slots.
package node
