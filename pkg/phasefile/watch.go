package phasefile

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"time"

	"warden/pkg/safefile"
)

// Watcher follows a phase file while its client appends to it and
// remembers when each phase was first reported. It keeps the file open
// and reads only what was appended since the last look, so watching costs
// one read a poll. A line that does not decode, or whose time does not
// parse, is not a phase seen; an incomplete last line waits for the rest.
// A Watcher is used by one goroutine.
type Watcher struct {
	path      string
	f         *os.File
	partial   []byte               // an incomplete last line
	first     map[string]time.Time // phase -> time first reported
	successes *int
	profiles  int
}

// NewWatcher watches the phase file at path, which need not exist yet.
func NewWatcher(path string) *Watcher {
	return &Watcher{path: path, first: map[string]time.Time{}}
}

// Poll reads what the client appended since the last Poll. A file not
// there yet, or not a regular file, has no phase.
func (w *Watcher) Poll() {
	if w.f == nil {
		f, err := safefile.Open(w.path)
		if err != nil {
			return
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
		var p Line
		if json.Unmarshal(w.partial[:i], &p) == nil && p.Phase != "" {
			if t, err := time.Parse(time.RFC3339Nano, p.T); err == nil {
				if p.Phase == Profile {
					w.profiles++
				}
				if _, seen := w.first[p.Phase]; !seen {
					w.first[p.Phase] = t
				}
				if p.Phase == Done && p.Successes != nil {
					w.successes = p.Successes
				}
			}
		}
		w.partial = w.partial[i+1:]
	}
}

// At is when phase was first reported; zero if not yet.
func (w *Watcher) At(phase string) time.Time { return w.first[phase] }

// Successes is the count the client reported with its Done line; ok
// false before one that carries it.
func (w *Watcher) Successes() (n int, ok bool) {
	if w.successes == nil {
		return 0, false
	}
	return *w.successes, true
}

// Profiles counts the Profile lines seen: one per profile window begun.
func (w *Watcher) Profiles() int { return w.profiles }

// Close closes the file; the Watcher is not polled after it.
func (w *Watcher) Close() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}
