// Package record is an attempt's record in the making and where it goes.
// A Record notes what happens to an attempt (process exits, signals sent,
// gate verdicts, ledger entries, its own figures, states passed through
// with nothing acting in them) and writes it with the
// attempt's next transition, in that transition's one write, through a
// Recorder: the campaign's database when the controller runs the attempt,
// JSON lines on the node-side runner's standard output when a Slurm node
// does (Report is one such line). The attempt lifecycle (pkg/attempt) and
// the Slurm executor (pkg/slurmexec) each keep one; neither writes the
// database any other way for a transition.
//
// # Report protocol
//
// A node-side runner writes one Report per line: first Kind "step" (the
// Slurm step's identity), then "proc" for each process started and
// "transition" for each state entered, with what was noted since the last
// (the states passed through on the way, Through, among it). ReportSchema
// is its version: the controller refuses a report of another, as one the
// records refuse. The controller applies each report as it arrives, as it
// would its own attempt's record.
//
// # Readable logs
//
// AppendLine and AppendJSONLine write the attempt's readable copies of what
// the records hold (commands.log, gates.jsonl): opened beneath the campaign
// directory, without following a link a child planted, and not fsynced: a
// power cut may lose their last lines, never a record.
package record
