// Package provenance records and re-checks the files a campaign depends
// on: the protocol and every file it declares (client, helpers, mappings,
// manifests). At campaign start each file is hashed and, unless private,
// copied read-only into DIR/provenance/files; the hashes are written to
// DIR/provenance/SHA256SUMS. At resume every file is hashed again and any
// change is refused, naming the file and both hashes.
package provenance

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"warden/pkg/atomicfile"
)

// Entry is one recorded file.
type Entry struct {
	Path    string // as resolved at start (absolute)
	Role    string
	Private bool
	SHA256  string
}

// Dir and file names under the campaign directory.
const (
	SubDir  = "provenance"
	SumFile = "SHA256SUMS"
	Files   = "files"
)

// ErrChanged is returned (wrapped in *ChangedError) when a file's hash differs from the record.
var ErrChanged = errors.New("provenance file changed")

// ChangedError names the changed file and both hashes.
type ChangedError struct {
	Path     string
	Recorded string
	Now      string // "" when the file is missing
}

func (e *ChangedError) Error() string {
	if e.Now == "" {
		return fmt.Sprintf("%s is missing (recorded sha256 %s)", e.Path, e.Recorded)
	}
	return fmt.Sprintf("%s changed: recorded sha256 %s, now %s", e.Path, e.Recorded, e.Now)
}

func (e *ChangedError) Unwrap() error { return ErrChanged }

// HashFile is the hex SHA-256 of a file.
func HashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// CheckPrivate verifies a private input's permissions: the file mode 0600
// and its directory 0700, so no other user can read it.
func CheckPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() != 0o600 {
		return fmt.Errorf("private input %s has mode %04o; it must be 0600", path, fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return err
	}
	if di.Mode().Perm() != 0o700 {
		return fmt.Errorf("private input %s is in directory %s with mode %04o; it must be 0700", path, filepath.Dir(path), di.Mode().Perm())
	}
	return nil
}

// Record hashes every entry, copies the public ones into
// campaignDir/provenance/files, and writes SHA256SUMS. It fails on the
// first missing file or private input with loose permissions, before
// writing anything.
func Record(campaignDir string, entries []Entry) ([]Entry, error) {
	out := make([]Entry, len(entries))
	for i, e := range entries {
		if e.Private {
			if err := CheckPrivate(e.Path); err != nil {
				return nil, fmt.Errorf("provenance: %w", err)
			}
		}
		sum, err := HashFile(e.Path)
		if err != nil {
			return nil, fmt.Errorf("provenance: %w", err)
		}
		e.SHA256 = sum
		out[i] = e
	}
	dir := filepath.Join(campaignDir, SubDir)
	if err := atomicfile.MkdirAll(filepath.Join(dir, Files), 0o755); err != nil {
		return nil, fmt.Errorf("provenance: %w", err)
	}
	for _, e := range out {
		if e.Private {
			continue // hash only, never copied
		}
		data, err := os.ReadFile(e.Path)
		if err != nil {
			return nil, fmt.Errorf("provenance: %w", err)
		}
		dst := filepath.Join(dir, Files, copyName(e.Path))
		if err := atomicfile.WriteFile(dst, data, 0o444); err != nil {
			return nil, fmt.Errorf("provenance: copy %s: %w", e.Path, err)
		}
	}
	var b bytes.Buffer
	for _, e := range out {
		priv := ""
		if e.Private {
			priv = " private"
		}
		fmt.Fprintf(&b, "%s  %s\t%s%s\n", e.SHA256, e.Path, e.Role, priv)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, SumFile), b.Bytes(), 0o444); err != nil {
		return nil, fmt.Errorf("provenance: %w", err)
	}
	return out, nil
}

// copyName flattens a path into one file name: /a/b/c.py -> a_b_c.py.
func copyName(path string) string {
	return strings.ReplaceAll(strings.TrimPrefix(filepath.Clean(path), "/"), "/", "_")
}

// Read loads the recorded entries.
func Read(campaignDir string) ([]Entry, error) {
	f, err := os.Open(filepath.Join(campaignDir, SubDir, SumFile))
	if err != nil {
		return nil, fmt.Errorf("provenance: %w", err)
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		sum, rest, ok := strings.Cut(line, "  ")
		path, meta, ok2 := strings.Cut(rest, "\t")
		if !ok || !ok2 {
			return nil, fmt.Errorf("provenance: malformed line %q", line)
		}
		role, priv, _ := strings.Cut(meta, " ")
		out = append(out, Entry{Path: path, Role: role, Private: priv == "private", SHA256: sum})
	}
	return out, sc.Err()
}

// Verify re-hashes every recorded file; it returns every change joined,
// each a *ChangedError.
func Verify(campaignDir string) error {
	entries, err := Read(campaignDir)
	if err != nil {
		return err
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	var errs []error
	for _, e := range entries {
		now, err := HashFile(e.Path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if now != e.SHA256 {
			errs = append(errs, &ChangedError{Path: e.Path, Recorded: e.SHA256, Now: now})
		}
	}
	return errors.Join(errs...)
}
