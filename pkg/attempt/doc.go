// Package attempt runs one attempt of a run: from preflight through a
// fresh server, the client's measured interval, the server's shutdown and
// the proof of cleanup, to the validators and a terminal state. It is the
// attempt lifecycle and nothing else: it is given an explicit environment
// (Env: the campaign directory, the launcher, the GPUs, the clock, the log,
// the private inputs, a recorder for its records, the in-flight hooks) and
// never reaches back to whoever drives the campaign. The campaign loop
// (pkg/runner) runs it on the controller's host; the node side (pkg/node)
// runs it on a Slurm node and reports each record to the controller.
//
// # Path through the states
//
//	Execute: reserved -> preflight (GPUs idle, CPUs local, port free)
//	  -> starting (server, and the client when it starts with it)
//	  -> ready (health, effective configuration) -> measuring (client)
//	  -> stopping (client, then server through its API parent)
//	  -> cleanup (no process left, GPUs at baseline, GPU time charged)
//	  -> validating (validators, manifest hash, privacy scans)
//	  -> complete | quarantined | failed
//
// # Files, one per phase
//
//	attempt.go    Attempt, New and Execute: the spine, one call per phase
//	preflight.go  preflight: GPUs idle and ours, CPUs local, port free
//	start.go      startServer: launch, readiness, listener, effective config
//	launch.go     the launch variables and environment, starting a process
//	drain.go      startClient, measure and supervise: the client's run, the
//	              listener re-checks, the drain judgement
//	stop.go       stopping and cleanup: shutdown, the cleanup gate, the charge,
//	              adopted escapees
//	validate.go   validating: the validators, the privacy scans, the end states
//	              of a run that measured
//	exit.go       terminal states, exit records, OOM, the terminal classes
//	energy.go     host records before and after, the GPU sampler, energy
//	gpuprocs.go   the gpu-processes gate over the sampler's readings (which
//	              processes are the attempt's: package ownprocs; the client's
//	              phase file: phasefile.Watcher)
//	inputs.go     the manifest hash
//
// # Tests, one table per phase
//
// The phase tests run one attempt in the test process on a harness
// (harness_test.go): the fake GPUs, the real launcher, a temporary
// campaign directory, a strict store behind a recorder that keeps every
// record, the stand-in server and a client that writes the phase lines,
// result and exit status a case scripts (testdata/phaseclient). Each
// table gives, for every outcome of its phase, the exact path through the
// states, with the reason:
//
//	preflight_test.go  TestPreflight  preflight.go, and the spine's stop before it
//	start_test.go      TestStart      start.go, launch.go
//	drain_test.go      TestDrain      drain.go, gpuprocs.go
//	stop_test.go       TestStop       stop.go
//	validate_test.go   TestValidate   validate.go, inputs.go, privacy.go
//	exit_test.go       TestExit       exit.go
//
// TestEveryReasonHasACase (reasons_test.go) fails when a phase's file can
// give a reason that no case of the phase's table ends with.
// listener_test.go checks the listener again while a client measures
// (drain.go), on the measuring alone.
//
// An operator's stop or the budget's cap (ctx's end, its cause
// ErrBudgetExhausted) ends it interrupted from wherever it is, its
// processes stopped and its GPU time charged. Once a server may be
// running, a failure always passes through stopping and cleanup (the
// store's transition table says the same). A transition that cannot be
// recorded ends the work as the harness's failure: the processes are
// stopped, the time they were proven gone goes to the end log (Env.Ends),
// and the attempt stays live in the records for resume to charge.
//
// # Records
//
// Every step is a transition written through the Recorder (pkg/record),
// with what was noted since the last one (exits, signals, gate verdicts,
// ledger entries, the attempt's figures) in the same write. Nothing slow
// runs inside a database transaction. Beside the records it writes, beneath
// the campaign directory and without following a link a child planted:
// environment.json, commands.log, gates.jsonl, signals.json (for the
// validators), server-config.json, preflight.json and postmeasure.json,
// gpu-samples.jsonl.
//
// # Invariants
//
//   - Every process it starts is started through Env.Launcher; the server
//     and the client are recorded before anything acts on them (the server
//     by Recorder.ProcStarted while it is probed, a client started with it
//     at once, a client started once the server is ready in the transition
//     to measuring that follows its start), and the cleanup gate proves
//     them gone.
//   - The GPU time of an attempt is charged once, from its server's start;
//     Env.InFlight holds it from that start until the charge.
//   - A check that cannot tell fails closed: an unreadable drain, manifest
//     hash, GPU sample or configuration fails the attempt, never passes it.
//   - A failure while the campaign directory ran out of space (Env.DiskFull
//     grew) is the harness's, not the workload's.
package attempt
