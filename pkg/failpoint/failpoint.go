// Package failpoint kills the process at named points between durable
// steps, so crash tests can prove that every state the controller can die
// in is one it resumes from. Failpoints exist only in a build made for
// tests (go build -tags failpoints); in every other build Hit is an empty
// function the compiler removes.
//
// In a failpoints build, $WARDEN_FAILPOINT names one point, optionally
// with the hit to fire on: "after-transition:measuring" or
// "after-transition:measuring@2" (the second time). When the point is hit,
// the process kills itself with SIGKILL: no deferred function, no flush,
// as in a power cut of the process.
package failpoint

// EnvVar names the failpoint to fire.
const EnvVar = "WARDEN_FAILPOINT"

// Names lists every failpoint, in the order a run meets them. Hit refuses
// (panics, in a failpoints build) a name that is not listed, so the list
// stays complete and a crash test can walk all of them.
var Names = []string{
	"wave-reserved",
	"attempt-created",
	// reserved and preflight are passed through: recorded with starting
	"before-transition:starting", "after-transition:starting",
	"server-started-unrecorded",
	// ready is passed through: recorded with measuring
	"client-started-unrecorded",
	"before-transition:measuring", "after-transition:measuring",
	"before-transition:stopping", "after-transition:stopping",
	"signals-sent-unrecorded",
	"before-transition:cleanup", "after-transition:cleanup",
	"charged",
	"before-transition:validating", "after-transition:validating",
	"before-transition:complete", "after-transition:complete",
	"state-json-before-rename",
	// the failure paths: an attempt that fails, is quarantined or is
	// interrupted (by a stop, or by a resume that found it live), and the
	// moment between a retry decision and the retry's attempt
	"before-transition:failed", "after-transition:failed",
	"retry-decided",
	"before-transition:quarantined", "after-transition:quarantined",
	"before-transition:interrupted", "after-transition:interrupted",
	// the Slurm executor: srun started, its step not yet reported; the
	// step's identity recorded
	"srun-started", "step-recorded",
	// the durable steps of controller amend, readjudicate and freeze
	"amend-files-written", "amend-recorded", "amend-provenance-installed",
	"readjudicate-recorded",
	"freeze-recorded",
}

func known(name string) bool {
	for _, n := range Names {
		if n == name {
			return true
		}
	}
	return false
}
