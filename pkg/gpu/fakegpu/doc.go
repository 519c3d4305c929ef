// Package fakegpu is a GPU backend made of files, for CI and the demo on
// hosts without a GPU.
//
// A fake host lives in one directory (processes find it through the
// environment variable named by EnvDir):
//
//	DIR/gpus.json                              the devices, written once by Init or InitWith
//	DIR/claims/<gpu index>/<pid>-<start>.json  one claim of memory by one process
//	DIR/energy/<gpu index>.json                the GPU's energy counter, updated by energy reads
//	DIR/energy/<gpu index>.lock                flocked while the counter is updated
//	DIR/throttle/<gpu index>.json              clock-event reasons SetThrottle adds to the GPU's readings
//
// A claim records the pid and the start time of the claiming process (field
// 22 of /proc/PID/stat, in clock ticks since boot), its uid, the MiB it holds
// and a free-form role. Stand-in servers call Claim when they "load a model".
//
// Readings (Read, Sample, Energy, Info) derive every figure from the memory
// live claims hold: power is IdlePowerW plus PowerPerMiBW per MiB, capped at
// PowerLimitW; the SM clock is BusySMClockMHz when memory is held and
// IdleSMClockMHz otherwise; the clock-event reasons are gpu_idle without
// memory, sw_power_cap at the power limit, and whatever SetThrottle gave
// the GPU (a test's thermal or power-brake slowdown); the temperature
// follows the power; MIG is disabled. The energy counter is integrated: each energy read adds the
// present power times the time since the last update (see Energy).
//
// Invariants:
//
//   - A claim counts only while a process with its pid and the same start time
//     exists and is not a zombie. Memory is therefore released when the
//     process dies, with no cooperation from it, as a real driver releases it;
//     a reused pid does not inherit the memory of the process it replaced.
//   - Readers never delete or change claim files. Claims of dead processes
//     stay on disk and are ignored; they are useful evidence when a test
//     fails. Energy reads are the one reader that writes: they update the
//     GPU's energy counter under an exclusive flock, so that the counter
//     never decreases, whichever processes read it.
//   - Every file is written to a temporary file in its own directory, renamed
//     into place, and the directory is fsynced: a reader sees a whole claim or
//     none.
//   - A Backend holds no mutable state after Open; its methods are safe for
//     concurrent use and read the claims afresh on every call.
//   - Figures are exact: power is counted in integer milliwatts and energy in
//     nanojoules (milliwatts times whole microseconds).
//
// Caveats:
//
//   - Liveness is read from /proc, so the package works on Linux only, and
//     only for processes in the reader's pid namespace.
//   - A claim's uid is a recorded number, not checked against the process:
//     ClaimFor lets a test make a process it started look like another user's.
//   - One process has at most one claim per GPU; claiming again replaces it.
//   - Between two energy reads the power is taken to be what it is at the
//     second read: a claim made in between counts for the whole interval.
//     Read the counter at the boundaries of what you measure.
//   - The energy counter advances by the Backend's clock (wall time unless
//     WithClock says otherwise); a clock that goes back adds nothing until it
//     passes the counter's last update again.
package fakegpu
