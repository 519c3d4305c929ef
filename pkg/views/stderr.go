package views

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/gates"
	"warden/pkg/provenance"
	"warden/pkg/safefile"
	"warden/pkg/state"
	"warden/protocols"
)

// The bound on what ctlq shows of a failed process's standard error: its
// last StderrTailLines lines within its last StderrTailBytes bytes.
const (
	StderrTailLines = 20
	StderrTailBytes = 4 << 10
)

// StderrTail is the end of the standard error of a process of a failed
// attempt that exited non-zero or was killed: ROLE.err in the attempt
// directory. Lines is empty and Note says why when it is not shown.
type StderrTail struct {
	Attempt   int      `json:"attempt"`
	Role      string   `json:"role"`
	File      string   `json:"file"`
	Lines     []string `json:"lines"`
	Truncated bool     `json:"truncated"` // the file holds more than Lines
	Note      string   `json:"note,omitempty"`
}

// StderrGuard is what decides whether a file may be shown: the private
// inputs' directories (nothing under one is read) and their index (a tail
// that holds private text is not shown). Err is set when the private
// inputs cannot be read: then no tail is shown.
type StderrGuard struct {
	campaign    string
	minLeak     int
	loaded      bool // the private inputs are read when a tail is first asked for
	privateDirs []string
	index       *gates.PrivateIndex
	err         error
}

// MinLeakOf is the plan's privacy.min_leak_bytes (the default without a
// plan or in a plan written before it existed).
func MinLeakOf(plan *protocols.Plan) int {
	if plan != nil && plan.PrivacyMinLeakBytes > 0 {
		return plan.PrivacyMinLeakBytes
	}
	return protocols.DefaultMinLeakBytes
}

// NewStderrGuard guards the tails of the campaign in dir, with the
// plan's leak length (MinLeakOf).
func NewStderrGuard(dir string, minLeak int) *StderrGuard {
	return &StderrGuard{campaign: dir, minLeak: minLeak}
}

// load reads the private inputs once, the first time a tail is wanted:
// a run with no failed process costs no reading of them.
func (g *StderrGuard) load() {
	if g.loaded {
		return
	}
	g.loaded = true
	entries, err := provenance.Read(g.campaign)
	if err != nil {
		g.err = err
		return
	}
	var paths []string
	for _, e := range entries {
		if e.Private {
			paths = append(paths, e.Path)
			g.privateDirs = append(g.privateDirs, filepath.Dir(e.Path))
		}
	}
	g.index, g.err = gates.IndexPrivate(paths, g.minLeak)
}

// StderrTails returns the tails of every failed process of the run's
// failed attempts: client and server.
func StderrTails(d api.RunDetail, g *StderrGuard) []StderrTail {
	var out []StderrTail
	for _, a := range d.Attempts {
		if a.State != state.Failed {
			continue
		}
		seen := map[string]bool{}
		for _, x := range a.Exits {
			if (x.Code == 0 && x.Signal == "") || seen[x.Role] || (x.Role != "client" && x.Role != "server") {
				continue
			}
			seen[x.Role] = true
			out = append(out, g.tail(a, x.Role))
		}
	}
	return out
}

func (g *StderrGuard) tail(a state.Attempt, role string) StderrTail {
	path := dirlayout.Stderr(a.Dir, role)
	t := StderrTail{Attempt: a.N, Role: role, File: path, Lines: []string{}}
	if err := g.allowed(a.Dir, path); err != nil {
		t.Note = "not shown: " + err.Error()
		return t
	}
	if err := a.CheckEvidence(filepath.Base(path)); errors.Is(err, state.ErrDamagedEvidence) {
		t.Note = "not shown: " + err.Error()
		return t
	}
	b, truncated, err := readEnd(path, StderrTailBytes)
	if err != nil {
		t.Note = "not shown: " + err.Error()
		return t
	}
	if ids := g.index.Leaks(b); len(ids) > 0 {
		t.Note = fmt.Sprintf("not shown: it holds private text (%s)", strings.Join(ids, ", "))
		return t
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if truncated && len(lines) > 1 {
		lines = lines[1:] // the first is cut
	}
	if len(lines) > StderrTailLines {
		lines, truncated = lines[len(lines)-StderrTailLines:], true
	}
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	t.Lines = append(t.Lines, lines...)
	t.Truncated = truncated
	return t
}

// allowed refuses a file outside the campaign's runs/ directory, in a
// directory that is a link, or under a private input's directory.
func (g *StderrGuard) allowed(attemptDir, path string) error {
	g.load()
	if g.err != nil {
		return fmt.Errorf("the private inputs cannot be read to check it: %v", g.err)
	}
	rel, err := filepath.Rel(dirlayout.Runs(g.campaign), attemptDir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return fmt.Errorf("the attempt directory %s is not under %s", attemptDir, dirlayout.Runs(g.campaign))
	}
	if fi, err := os.Lstat(attemptDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("the attempt directory %s is not a directory", attemptDir)
	}
	for _, d := range g.privateDirs {
		if r, err := filepath.Rel(d, path); err == nil && !strings.HasPrefix(r, "..") {
			return fmt.Errorf("it is under %s, a private input's directory", d)
		}
	}
	return nil
}

// readEnd reads at most the last n bytes of a regular file (safefile: no
// link, FIFO or device) and says whether the file holds more.
func readEnd(path string, n int64) ([]byte, bool, error) {
	f, err := safefile.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, errors.New("no such file")
		}
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	k, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	return bytes.ToValidUTF8(b[:k], []byte("?")), off > 0, nil
}

// PrintStderrTails is ctlq show's text for the tails.
func PrintStderrTails(w io.Writer, tails []StderrTail) {
	for _, t := range Escaped(tails) {
		fmt.Fprintf(w, "\nattempt %d %s stderr (%s", t.Attempt, t.Role, t.File)
		if t.Truncated {
			fmt.Fprintf(w, ", last %d lines", len(t.Lines))
		}
		fmt.Fprintln(w, "):")
		if t.Note != "" {
			fmt.Fprintf(w, "  %s\n", t.Note)
		}
		for _, l := range t.Lines {
			fmt.Fprintf(w, "  | %s\n", l)
		}
	}
}
