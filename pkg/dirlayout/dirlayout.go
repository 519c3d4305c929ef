// Package dirlayout is the layout of a campaign directory: the names of
// its files, the paths of an attempt's directory and of the files in it,
// and the readers of the two files every part opens: the plan (plan.json)
// and the state database (state.db). It is a leaf: it imports the standard
// library, the store and the protocol package, and nothing that runs.
//
//	DIR/
//	├── state.db            the store (pkg/state)
//	├── plan.json           the plan the campaign was started with (read-only, 0444)
//	├── controller.json     how the campaign was started, for resume (pkg/campaigndir)
//	├── controller.lock     held by the controller that runs the campaign
//	├── controller.log      the detached controller's log
//	├── ctl.sock            the query API's socket (pkg/api)
//	├── fake-gpus/          the fake GPU backend's host, by default
//	├── report.html         ctlq report's page, by default
//	├── inputs/             controller sweep's protocol and manifests, when it made the campaign
//	└── runs/
//	    └── RUN/
//	        └── aN/         one attempt's directory (AttemptDir)
//	            ├── gpu-samples.jsonl   the GPU samples (pkg/gpu/sample)
//	            ├── sanity.json         the data sanity block (pkg/contract)
//	            ├── client/result.json  the load client's result
//	            └── ROLE.out, ROLE.err  a process's standard output and error
//
// Other files of the directory (the provenance, the end log) belong to
// the packages that write them (pkg/provenance, pkg/endlog).
package dirlayout

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"warden/pkg/state"
	"warden/protocols"
)

// Files and directories at the top of a campaign directory.
const (
	StateFile    = "state.db"
	PlanFile     = "plan.json"
	SocketFile   = "ctl.sock"
	LockFile     = "controller.lock"
	LogFile      = "controller.log"
	SettingsFile = "controller.json"
	ReportFile   = "report.html"
	RunsDir      = "runs"
	FakeGPUsDir  = "fake-gpus"
	// InputsDir holds, when the campaign was made by controller sweep,
	// the protocol it wrote and the manifests it materialized; start
	// accepts a directory that holds only these.
	InputsDir = "inputs"
)

// Files of an attempt's directory.
const (
	GPUSamplesFile = "gpu-samples.jsonl"
	SanityFile     = "sanity.json"
	ClientDir      = "client"
	ResultFile     = "result.json" // in ClientDir
)

// EvidenceFiles are the attempt directory's evidence files digested when
// its processes have ended, beside every file of ClientDir: what the
// processes wrote, and what the controller wrote of their launch and their
// GPUs. ClientResultRel is the client's result.json relative to the
// attempt directory. EvidenceChecked are the files a reader checks for
// damage even without a digest (an attempt that ended before its
// processes were proven gone has none): all NUL bytes is damage.
var (
	EvidenceFiles   = []string{"server.out", "server.err", "client.out", "client.err", "environment.json", GPUSamplesFile}
	ClientResultRel = filepath.Join(ClientDir, ResultFile)
	EvidenceChecked = append([]string{ClientResultRel}, EvidenceFiles...)
)

// State is the path of the campaign's state database.
func State(dir string) string { return filepath.Join(dir, StateFile) }

// Plan is the path of the campaign's plan.
func Plan(dir string) string { return filepath.Join(dir, PlanFile) }

// Socket is the path of the query API's socket.
func Socket(dir string) string { return filepath.Join(dir, SocketFile) }

// Lock is the path of the controller's lock file.
func Lock(dir string) string { return filepath.Join(dir, LockFile) }

// Log is the path of the detached controller's log.
func Log(dir string) string { return filepath.Join(dir, LogFile) }

// Settings is the path of controller.json.
func Settings(dir string) string { return filepath.Join(dir, SettingsFile) }

// Runs is the directory that holds every attempt's directory.
func Runs(dir string) string { return filepath.Join(dir, RunsDir) }

// AttemptRel is an attempt's directory relative to the runs directory
// (RUN/aN); a tree that mirrors runs/ (an amendment's re-adjudication)
// uses it under its own root.
func AttemptRel(run string, n int) string { return filepath.Join(run, "a"+strconv.Itoa(n)) }

// AttemptDir is the directory of attempt n of run: DIR/runs/RUN/aN.
func AttemptDir(dir, run string, n int) string { return filepath.Join(Runs(dir), AttemptRel(run, n)) }

// GPUSamples is the GPU samples file of the attempt directory adir.
func GPUSamples(adir string) string { return filepath.Join(adir, GPUSamplesFile) }

// Sanity is the data sanity block of the attempt directory adir.
func Sanity(adir string) string { return filepath.Join(adir, SanityFile) }

// ClientResult is the load client's result.json in the attempt directory adir.
func ClientResult(adir string) string { return filepath.Join(adir, ClientDir, ResultFile) }

// Stderr is the standard error of the process of role in the attempt
// directory adir (ROLE.err).
func Stderr(adir, role string) string { return filepath.Join(adir, role+".err") }

// Stdout is the standard output of the process of role in the attempt
// directory adir (ROLE.out).
func Stdout(adir, role string) string { return filepath.Join(adir, role+".out") }

// ReadPlan reads the plan a campaign was started with.
func ReadPlan(dir string) (*protocols.Plan, error) {
	b, err := os.ReadFile(Plan(dir))
	if err != nil {
		return nil, err
	}
	var p protocols.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// OpenStore opens the campaign's state database for writing (state.Open).
func OpenStore(dir string, opts state.Options) (*state.Store, error) {
	return state.Open(State(dir), opts)
}

// OpenStoreReadOnly opens the campaign's state database read-only
// (state.OpenReadOnly), waiting at most timeout for its lock.
func OpenStoreReadOnly(dir string, timeout time.Duration) (*state.Store, error) {
	return state.OpenReadOnly(State(dir), timeout)
}
