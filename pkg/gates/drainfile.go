package gates

import (
	"encoding/json"
	"errors"
	"fmt"

	"warden/pkg/safefile"
)

// ReadDrainTimes reads the drain's start and end (CLOCK_MONOTONIC
// nanoseconds) from a client's result file (read as a child's file, safefile): drain.start_mono_ns and
// drain.end_mono_ns, as Warden's load client writes them.
func ReadDrainTimes(path string) (start, end int64, err error) {
	b, err := safefile.ReadFile(path, safefile.ChildLimit)
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
