package state

import (
	"encoding/json"
	"path/filepath"

	"warden/pkg/safefile"
)

// StateFileRepair is one attempt RepairStateFiles rewrote, or could not
// (Err).
type StateFileRepair struct {
	Run string
	N   int
	Err error
}

// RepairStateFiles rewrites the state.json of recently changed attempts
// whose file does not match the database: a controller that died between
// a commit and the file's rename, or could not write it (a full disk),
// left it behind. Only the attempts named by the last tail events are
// looked at, so a resume stays quick on a large campaign. maxFile bounds
// the read of each file.
func (s *Store) RepairStateFiles(tail uint64, maxFile int64) ([]StateFileRepair, error) {
	// A file whose queued write fails is stale and rewritten below.
	_ = s.FlushStateFiles()
	last, err := s.LastEventSeq()
	if err != nil {
		return nil, err
	}
	events, err := s.Events(max(last, tail)-tail, 0)
	if err != nil {
		return nil, err
	}
	var out []StateFileRepair
	seen := map[[2]any]bool{}
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		k := [2]any{e.Run, e.Attempt}
		if e.Run == "" || seen[k] {
			continue
		}
		seen[k] = true
		a, err := s.Attempt(e.Run, e.Attempt)
		if err != nil || a.Dir == "" || stateFileCurrent(a, maxFile) {
			continue
		}
		out = append(out, StateFileRepair{Run: a.RunID, N: a.N, Err: s.RewriteStateFile(a.RunID, a.N)})
	}
	return out, nil
}

// stateFileCurrent reports whether the attempt's state.json holds its
// recorded state and events. A file larger than maxFile, a link or
// anything but a regular file is not current (safefile.ReadFile).
func stateFileCurrent(a Attempt, maxFile int64) bool {
	b, err := safefile.ReadFile(filepath.Join(a.Dir, StateFileName), maxFile)
	if err != nil {
		return false
	}
	var sf StateFile
	if err := json.Unmarshal(b, &sf); err != nil {
		return false
	}
	return sf.Attempt.State == a.State && len(sf.Events) == len(a.EventSeqs) && sf.Attempt.UpdatedAt.Equal(a.UpdatedAt)
}
