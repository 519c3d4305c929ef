package attempt

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"time"

	"warden/pkg/phasefile"
	"warden/pkg/safefile"
)

// phaseWatcher follows the client's phase file (JSON lines appended by
// the client) and remembers when each phase was first reported. It keeps
// the file open and reads only what was appended since the last look, so
// watching costs one read a second while a benchmark measures.
type phaseWatcher struct {
	path    string
	f       *os.File
	partial []byte               // an incomplete last line
	first   map[string]time.Time // phase -> time first reported
	// successes is the count the client reported with "done", if any
	successes *int
	// profiles counts the profile lines: one per profile window begun
	profiles int
}

func newPhaseWatcher(path string) *phaseWatcher {
	return &phaseWatcher{path: path, first: map[string]time.Time{}}
}

// poll reads what the client appended.
func (w *phaseWatcher) poll() {
	if w.f == nil {
		f, err := safefile.Open(w.path)
		if err != nil {
			return // not written yet, or not a regular file: no phase seen
		}
		w.f = f
	}
	buf := make([]byte, 4096)
	for {
		n, err := w.f.Read(buf)
		w.partial = append(w.partial, buf[:n]...)
		if err == io.EOF || n == 0 || err != nil {
			break
		}
	}
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		var p phasefile.Line
		if json.Unmarshal(w.partial[:i], &p) == nil && p.Phase != "" {
			// A line whose time does not parse is not a phase seen.
			if t, err := time.Parse(time.RFC3339Nano, p.T); err == nil {
				if p.Phase == phasefile.Profile {
					w.profiles++
				}
				if _, seen := w.first[p.Phase]; !seen {
					w.first[p.Phase] = t
				}
				if p.Phase == phasefile.Done && p.Successes != nil {
					w.successes = p.Successes
				}
			}
		}
		w.partial = w.partial[i+1:]
	}
}

// at is when the phase was first reported; zero if not yet.
func (w *phaseWatcher) at(phase string) time.Time { return w.first[phase] }

func (w *phaseWatcher) close() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}
