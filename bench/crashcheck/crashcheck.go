// Package crashcheck checks the promises a campaign directory must keep
// when its controller is killed at any moment and resumed: every run ends
// with exactly one complete (or quarantined) attempt, no complete attempt
// is started again, an attempt directory is never written once its attempt
// has ended, no process of the campaign outlives it, no fake GPU memory
// stays held, and the budget ledger is never below the GPU time really
// used.
//
// A crash test takes a Snapshot right after each kill (the controller is
// dead, its children may live on), compares it with the one before
// (Compare), and once the campaign has completed checks the end state
// (Final). Snapshots are JSON, so a script can keep them between runs of
// the bench/check command.
//
// Caveats: Take and Final open the state database read-only, so no
// controller may run on the directory meanwhile. Processes are found by
// the campaign's and attempts' directories in their environment
// (WARDEN_CAMPAIGN_DIR, WARDEN_ATTEMPT_DIR): one that cleared its
// environment is not seen, and processes of other users cannot be read.
package crashcheck

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/state"
)

// Tolerance is how far below the GPU time it can prove used the ledger may
// fall for one attempt (clock readings taken microseconds apart).
const Tolerance = 0.005

// Snapshot is what a crash test knows of a campaign at one moment with no
// controller running.
type Snapshot struct {
	Dir string    `json:"dir"`
	At  time.Time `json:"at"`
	// Results maps each done run to its complete or quarantined attempt.
	Results map[string]int `json:"results"`
	// Attempts maps "run/aN" to what was seen of the attempt.
	Attempts map[string]Attempt `json:"attempts"`
}

// Attempt is one attempt as a snapshot saw it.
type Attempt struct {
	State string `json:"state"`
	// Files maps each file of a terminal attempt's directory (relative
	// path) to its SHA-256; nil for a live attempt.
	Files map[string]string `json:"files,omitempty"`
	// StaleStateFile says that the attempt's state.json did not match the
	// database (the controller died between its commit and the file's
	// rename, or could not write it): resume may complete that write.
	StaleStateFile bool `json:"stale_state_file,omitempty"`
	// AliveAt is the last snapshot time at which a process carrying the
	// attempt's directory in its environment was alive: its GPUs were held
	// at least until then.
	AliveAt time.Time `json:"alive_at,omitzero"`
}

func key(run string, n int) string { return run + "/a" + strconv.Itoa(n) }

// Take opens the campaign's state read-only and records the snapshot. A
// broken store invariant is returned as a violation, not an error: the
// error is for a state that cannot be read at all.
func Take(dir string) (*Snapshot, []string, error) {
	s, err := dirlayout.OpenStoreReadOnly(dir, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	var violations []string
	if err := s.Check(); err != nil {
		violations = append(violations, "state invariants after the crash: "+err.Error())
	}
	alive, err := attemptsAlive(dir)
	if err != nil {
		return nil, nil, err
	}
	snap := &Snapshot{Dir: dir, At: time.Now(), Results: map[string]int{}, Attempts: map[string]Attempt{}}
	runs, err := s.Runs()
	if err != nil {
		return nil, nil, err
	}
	for _, r := range runs {
		if r.Done {
			snap.Results[r.ID] = r.Result
		}
		as, err := s.Attempts(r.ID)
		if err != nil {
			return nil, nil, err
		}
		for _, a := range as {
			sa := Attempt{State: string(a.State)}
			if a.State.Terminal() {
				if sa.Files, err = hashDir(a.Dir); err != nil {
					return nil, nil, err
				}
				sa.StaleStateFile = stateFileAgrees(a) != ""
			}
			if alive[a.Dir] {
				sa.AliveAt = snap.At
			}
			snap.Attempts[key(r.ID, a.N)] = sa
		}
	}
	return snap, violations, nil
}

// Compare checks cur, taken after a later crash or at the end, against
// prev, and carries prev's process sightings over into cur.
func Compare(prev, cur *Snapshot) []string {
	var vs []string
	for _, run := range slices.Sorted(maps.Keys(prev.Results)) {
		n := prev.Results[run]
		if m, ok := cur.Results[run]; !ok || m != n {
			vs = append(vs, fmt.Sprintf("run %s: its result was attempt %d, now %d", run, n, m))
		}
		if _, ok := cur.Attempts[key(run, n+1)]; ok {
			vs = append(vs, fmt.Sprintf("run %s: complete in attempt %d, started again in attempt %d", run, n, n+1))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(prev.Attempts)) {
		pa := prev.Attempts[k]
		ca, ok := cur.Attempts[k]
		if !ok {
			vs = append(vs, fmt.Sprintf("attempt %s (%s) is no longer recorded", k, pa.State))
			continue
		}
		if !ca.AliveAt.After(pa.AliveAt) {
			ca.AliveAt = pa.AliveAt
			cur.Attempts[k] = ca
		}
		if pa.Files == nil {
			continue
		}
		if ca.State != pa.State {
			vs = append(vs, fmt.Sprintf("attempt %s was %s, now %s", k, pa.State, ca.State))
		}
		before, after := pa.Files, ca.Files
		if pa.StaleStateFile {
			// the write the crash cut short may be completed; Final
			// checks that the file then matches the database
			before, after = maps.Clone(before), maps.Clone(after)
			delete(before, state.StateFileName)
			delete(after, state.StateFileName)
		}
		if d := diffFiles(before, after); d != "" {
			vs = append(vs, fmt.Sprintf("attempt %s ended (%s) before the crash, but its directory changed: %s", k, pa.State, d))
		}
	}
	return vs
}

func diffFiles(before, after map[string]string) string {
	for _, f := range slices.Sorted(maps.Keys(before)) {
		h, ok := after[f]
		switch {
		case !ok:
			return f + " removed"
		case h != before[f]:
			return f + " rewritten"
		}
	}
	for _, f := range slices.Sorted(maps.Keys(after)) {
		if _, ok := before[f]; !ok {
			return f + " added"
		}
	}
	return ""
}

// Expect is how a campaign must end: its state and, for a stopped one,
// its stop reason; Results names the runs that must have exactly one
// complete or quarantined attempt (nil: every run). A run not named may
// have none, never more than one.
type Expect struct {
	State      state.CampaignState
	StopReason state.StopReason
	Results    []string
}

// Final checks the campaign after its last resume ended, with the last
// snapshot (compared and carried over) for the GPU time seen in use. Among
// the end-state checks: every attempt's evidence files hold what their
// recorded digests say, and no client result.json is all NUL bytes
// (state.Attempt.DamagedEvidence).
func Final(dir string, last *Snapshot) ([]string, error) {
	return FinalExpect(dir, last, Expect{State: state.CampaignComplete})
}

// FinalExpect is Final for a campaign that ends as exp says.
func FinalExpect(dir string, last *Snapshot, exp Expect) ([]string, error) {
	s, err := dirlayout.OpenStoreReadOnly(dir, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var vs []string
	if err := s.Check(); err != nil {
		vs = append(vs, "state invariants: "+err.Error())
	}
	cp, err := s.Campaign()
	if err != nil {
		return nil, err
	}
	if cp.State != exp.State || (exp.StopReason != "" && cp.StopReason != exp.StopReason) {
		vs = append(vs, fmt.Sprintf("campaign is %s (%s: %s), want %s %s", cp.State, cp.StopReason, cp.StopDetail, exp.State, exp.StopReason))
	}
	ledger, err := s.Ledger()
	if err != nil {
		return nil, err
	}
	var prior, charges float64
	charged := map[string]float64{}
	for _, e := range ledger {
		switch e.Kind {
		case state.LedgerPrior:
			prior += e.GPUSeconds
		case state.LedgerCharge:
			charges += e.GPUSeconds
			charged[key(e.Run, e.Attempt)] += e.GPUSeconds
		}
	}
	if d := cp.ConsumedGPUSeconds - (prior + charges); d > 1e-6 || d < -1e-6 {
		vs = append(vs, fmt.Sprintf("budget: consumed %.6f GPU-s, but prior %.6f + charges %.6f = %.6f", cp.ConsumedGPUSeconds, prior, charges, prior+charges))
	}
	events, err := s.Events(0, 0)
	if err != nil {
		return nil, err
	}
	byAttempt := map[string][]state.Event{}
	for _, e := range events {
		if e.Run != "" {
			byAttempt[key(e.Run, e.Attempt)] = append(byAttempt[key(e.Run, e.Attempt)], e)
		}
	}
	runs, err := s.Runs()
	if err != nil {
		return nil, err
	}
	var used float64
	for _, r := range runs {
		as, err := s.Attempts(r.ID)
		if err != nil {
			return nil, err
		}
		results := 0
		for _, a := range as {
			if a.State == state.Complete || a.State == state.Quarantined {
				results++
			}
			if a.State.Live() {
				vs = append(vs, fmt.Sprintf("run %s attempt %d is still %s", r.ID, a.N, a.State))
			}
			if v := stateFileAgrees(a); v != "" {
				vs = append(vs, v)
			}
			for _, err := range a.DamagedEvidence(dirlayout.EvidenceChecked...) {
				vs = append(vs, fmt.Sprintf("run %s attempt %d: %v", r.ID, a.N, err))
			}
			k := key(r.ID, a.N)
			var seen time.Time
			if last != nil {
				seen = last.Attempts[k].AliveAt
			}
			u := usedGPUSeconds(a, byAttempt[k], seen)
			used += u
			if charged[k] < u-Tolerance {
				vs = append(vs, fmt.Sprintf("budget: run %s attempt %d held %d GPU(s) for at least %.3f GPU-s but was charged %.3f", r.ID, a.N, len(a.GPUIDs), u, charged[k]))
			}
		}
		switch mustHave := exp.Results == nil || slices.Contains(exp.Results, r.ID); {
		case r.Closed() && results > 0:
			vs = append(vs, fmt.Sprintf("run %s is not run (%s%s) but has %d complete or quarantined attempts", r.ID, r.NotRun, r.NotRunReason, results))
		case r.Closed():
			// frozen, or a point its capacity search ended before: no result
		case mustHave && results != 1:
			vs = append(vs, fmt.Sprintf("run %s has %d complete or quarantined attempts, want exactly 1", r.ID, results))
		case !mustHave && results > 1:
			vs = append(vs, fmt.Sprintf("run %s has %d complete or quarantined attempts, want at most 1", r.ID, results))
		}
	}
	if charges < used-Tolerance {
		vs = append(vs, fmt.Sprintf("budget: %.3f GPU-s charged, at least %.3f used", charges, used))
	}
	pids, err := CampaignPIDs(dir)
	if err != nil {
		return nil, err
	}
	if len(pids) > 0 {
		vs = append(vs, fmt.Sprintf("processes of the campaign still alive: %v", pids))
	}
	held, err := FakeGPUMemory(dir)
	if err != nil {
		return nil, err
	}
	for i, mib := range held {
		if mib != 0 {
			vs = append(vs, fmt.Sprintf("fake GPU %d still has %d MiB held", i, mib))
		}
	}
	hv, err := hostileFinal(dir, s, runs)
	if err != nil {
		return nil, err
	}
	return append(vs, hv...), nil
}

// stateFileAgrees checks the attempt directory's state.json against the
// database: the record an operator reads beside the artifacts.
func stateFileAgrees(a state.Attempt) string {
	b, err := os.ReadFile(filepath.Join(a.Dir, state.StateFileName))
	if err != nil {
		return fmt.Sprintf("run %s attempt %d: %v", a.RunID, a.N, err)
	}
	var sf state.StateFile
	if err := json.Unmarshal(b, &sf); err != nil {
		return fmt.Sprintf("run %s attempt %d: %s: %v", a.RunID, a.N, state.StateFileName, err)
	}
	if sf.Attempt.State != a.State || len(sf.Events) != len(a.EventSeqs) {
		return fmt.Sprintf("run %s attempt %d: %s says %s after %d events, the database %s after %d",
			a.RunID, a.N, state.StateFileName, sf.Attempt.State, len(sf.Events), a.State, len(a.EventSeqs))
	}
	return ""
}

// usedGPUSeconds is a lower bound of the GPU time attempt a held: from its
// server's start (or, when the server was never recorded but a process of
// the attempt was seen alive, from the transition into starting) until the
// cleanup it proved, or else the last record the controller made of it
// before it was interrupted, or the last time one of its processes was
// seen alive, whichever is later.
func usedGPUSeconds(a state.Attempt, events []state.Event, seenAlive time.Time) float64 {
	var start time.Time
	for _, p := range a.Procs {
		if p.Role == "server" {
			start = p.StartedAt
		}
	}
	var startingAt, cleanupAt, lastRecord time.Time
	for i, e := range events {
		switch {
		case e.To == string(state.Starting):
			startingAt = e.Wall
		case e.To == string(state.Cleanup):
			cleanupAt = e.Wall
		}
		if i < len(events)-1 || e.To != string(state.Interrupted) {
			lastRecord = e.Wall
		}
	}
	if start.IsZero() {
		if startingAt.IsZero() || seenAlive.IsZero() {
			return 0
		}
		start = startingAt
	}
	end := lastRecord
	if !cleanupAt.IsZero() {
		end = cleanupAt
	}
	if seenAlive.After(end) {
		end = seenAlive
	}
	if !end.After(start) {
		return 0
	}
	return float64(len(a.GPUIDs)) * end.Sub(start).Seconds()
}

// hashDir maps each regular file under dir to its SHA-256. A directory
// that does not exist has no files.
func hashDir(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && os.IsNotExist(err) {
				return filepath.SkipDir
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[rel] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hash attempt directory %s: %w", dir, err)
	}
	return out, nil
}

// scan calls fn with the pid and environment of every live, non-zombie
// process whose environment can be read.
func scan(fn func(pid int, env []byte)) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("scan /proc: %w", err)
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && (st[i+2] == 'Z' || st[i+2] == 'X') {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		fn(pid, env)
	}
	return nil
}

// CampaignPIDs lists the live processes that carry the campaign directory
// in their environment: everything its controller started, and their
// descendants.
func CampaignPIDs(dir string) ([]int, error) {
	marker := []byte("\x00WARDEN_CAMPAIGN_DIR=" + dir + "\x00")
	var pids []int
	err := scan(func(pid int, env []byte) {
		if bytes.Contains(append([]byte{0}, env...), marker) {
			pids = append(pids, pid)
		}
	})
	return pids, err
}

// attemptsAlive maps each attempt directory of the campaign to whether a
// live process carries it in its environment.
func attemptsAlive(dir string) (map[string]bool, error) {
	campaign := []byte("\x00WARDEN_CAMPAIGN_DIR=" + dir + "\x00")
	const attempt = "\x00WARDEN_ATTEMPT_DIR="
	out := map[string]bool{}
	err := scan(func(pid int, env []byte) {
		env = append([]byte{0}, env...)
		if !bytes.Contains(env, campaign) {
			return
		}
		if i := bytes.Index(env, []byte(attempt)); i >= 0 {
			rest := env[i+len(attempt):]
			if j := bytes.IndexByte(rest, 0); j >= 0 {
				out[string(rest[:j])] = true
			}
		}
	})
	return out, err
}

// FakeGPUMemory is the memory held on each fake GPU of the campaign's
// fake host (from its controller.json); nil for a campaign on real GPUs.
func FakeGPUMemory(dir string) ([]int, error) {
	var set struct {
		GPUBackend string `json:"gpu_backend"`
		FakeGPUDir string `json:"fake_gpu_dir"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "controller.json"))
	if err != nil {
		return nil, fmt.Errorf("read campaign settings: %w", err)
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("read campaign settings: %w", err)
	}
	if set.GPUBackend != "fake" {
		return nil, nil
	}
	g, err := fakegpu.Open(set.FakeGPUDir)
	if err != nil {
		return nil, err
	}
	out := make([]int, g.Count())
	for i := range out {
		if out[i], err = g.MemoryUsedMiB(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Save writes the snapshot to path atomically.
func (s *Snapshot) Save(path string) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("save snapshot: %w", err)
	}
	return nil
}

// Load reads a snapshot written by Save; a missing file is (nil, nil).
func Load(path string) (*Snapshot, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("load snapshot %s: %w", path, err)
	}
	return &s, nil
}
