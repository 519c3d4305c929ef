package attempt

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"warden/pkg/safefile"
)

// MkdirBeneath creates a directory under the campaign directory, and its
// parents, resolving beneath it: a link a child planted (its run directory
// replaced by a link out of the campaign) fails it instead of being
// followed.
func (c *Env) MkdirBeneath(dir string) error {
	rel, err := filepath.Rel(c.Dir, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%s is not under the campaign directory %s", dir, c.Dir)
	}
	root, err := os.OpenRoot(c.Dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return fmt.Errorf("create %s beneath %s: %w", rel, c.Dir, err)
	}
	return nil
}

// readChildFile reads a file a child wrote (safefile, at most safefile.ChildLimit
// bytes).
func readChildFile(path string) ([]byte, error) { return safefile.ReadFile(path, safefile.ChildLimit) }

// readDrainTimes reads the drain's start and end (CLOCK_MONOTONIC
// nanoseconds) from a client's result file: drain.start_mono_ns and
// drain.end_mono_ns, as Warden's load client writes them.
func readDrainTimes(path string) (start, end int64, err error) {
	b, err := readChildFile(path)
	if err != nil {
		return 0, 0, err
	}
	var r struct {
		Drain *struct {
			StartMonoNS int64 `json:"start_mono_ns"`
			EndMonoNS   int64 `json:"end_mono_ns"`
		} `json:"drain"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, 0, fmt.Errorf("decode: %w", err)
	}
	switch {
	case r.Drain == nil:
		return 0, 0, errors.New("no drain object")
	case r.Drain.StartMonoNS <= 0 || r.Drain.EndMonoNS <= 0:
		return 0, 0, errors.New("drain.start_mono_ns or drain.end_mono_ns missing")
	case r.Drain.EndMonoNS < r.Drain.StartMonoNS:
		return 0, 0, fmt.Errorf("drain ends (%d) before it starts (%d)", r.Drain.EndMonoNS, r.Drain.StartMonoNS)
	}
	return r.Drain.StartMonoNS, r.Drain.EndMonoNS, nil
}
