package sweep

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/loadgen"
	"warden/protocols"
)

// Written is what Write made in the campaign directory.
type Written struct {
	// Protocol is the protocol's path, DIR/inputs/sweep.yaml.
	Protocol string
	Manifest ManifestFile
	// Plan is the written protocol's plan, as controller plan -f makes it
	// (its inputs checked).
	Plan *protocols.Plan
	// made is the topmost directory Write created: Remove removes it.
	made string
}

// ManifestFile is the sweep's manifest.
type ManifestFile struct {
	Path         string `json:"path"`
	Rows         int    `json:"rows"`
	SHA256       string `json:"sha256"`
	Materialized bool   `json:"materialized"`
}

// DirError is Write's refusal of a campaign directory that exists and is
// not empty.
type DirError struct {
	Dir string
	// Written is set when the directory holds a protocol an earlier sweep
	// wrote (a --dry-run): start it from there instead.
	Written string
}

func (e *DirError) Error() string {
	msg := fmt.Sprintf("%s exists and is not empty: controller sweep makes a new campaign directory", e.Dir)
	if e.Written != "" {
		msg += fmt.Sprintf("; it holds the protocol an earlier sweep wrote, which starts with: controller start -f %s -d %s", e.Written, e.Dir)
	}
	return msg
}

// Write makes the campaign directory (owner-only), materializes the
// synthetic manifest into its inputs/ (an existing manifest stays where it
// is and is hashed), writes the protocol there, and plans it with the
// protocols package, as controller plan -f does, inputs checked. Before
// the protocol is written, a failure removes what Write made. A protocol
// that is written but does not plan is kept for review: the error is the
// plan's (*protocols.Problems), and the Written is returned with it.
func Write(sw *Sweep) (*Written, error) {
	dir := sw.Env.Dir
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		de := &DirError{Dir: dir}
		p := filepath.Join(dir, dirlayout.InputsDir, ProtocolFile)
		if _, err := os.Stat(p); err == nil {
			de.Written = p
		}
		return nil, de
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("campaign directory %s: %w", dir, err)
	}
	w := &Written{Protocol: filepath.Join(dir, dirlayout.InputsDir, ProtocolFile)}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			break
		}
		w.made = d
		if filepath.Dir(d) == d {
			break
		}
	}
	fail := func(err error) (*Written, error) {
		if rerr := w.Remove(); rerr != nil {
			return nil, fmt.Errorf("%w (and removing what the sweep made failed: %v)", err, rerr)
		}
		return nil, err
	}
	if err := atomicfile.MkdirAll(filepath.Join(dir, dirlayout.InputsDir), 0o700); err != nil {
		return fail(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fail(err)
	}
	p := sw.Pattern
	w.Manifest = ManifestFile{Path: p.Path, Rows: p.Rows, Materialized: p.Materialize != nil}
	if p.Materialize != nil {
		sum, err := loadgen.Materialize(*p.Materialize, p.Path)
		if err != nil {
			return fail(err)
		}
		w.Manifest.Rows, w.Manifest.SHA256 = sum.Rows, sum.SHA256
	} else {
		sum, err := fileSHA256(p.Path)
		if err != nil {
			return fail(fmt.Errorf("hash the manifest: %w", err))
		}
		w.Manifest.SHA256 = sum
	}
	text := sw.Protocol(ManifestInfo{Rows: w.Manifest.Rows, SHA256: w.Manifest.SHA256})
	if err := atomicfile.WriteFile(w.Protocol, text, 0o644); err != nil {
		return fail(err)
	}
	plan, err := protocols.PlanFile(w.Protocol, protocols.Options{CheckInputs: true})
	if err != nil {
		return w, err
	}
	w.Plan = plan
	return w, nil
}

// Remove removes what Write made: the campaign directory, when Write
// created it (and any parents it had to create), else its inputs/.
func (w *Written) Remove() error {
	if w.made != "" {
		return os.RemoveAll(w.made)
	}
	return os.RemoveAll(filepath.Dir(w.Protocol))
}

var lineFlag = regexp.MustCompile(`#\s*(--[a-z][a-z0-9-]*)`)

// FlagAt is the flag the written protocol's line (1-based) came from, as
// its comment names it ("--serve-cmd"); "" when the line names none.
func (w *Written) FlagAt(line int) string {
	b, err := os.ReadFile(w.Protocol)
	if err != nil || line < 1 {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	if line > len(lines) {
		return ""
	}
	if m := lineFlag.FindStringSubmatch(lines[line-1]); m != nil {
		return m[1]
	}
	return ""
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
