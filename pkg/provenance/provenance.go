// Package provenance records and re-checks the files a campaign depends
// on: the protocol and every file it declares (client, helpers, mappings,
// manifests). At campaign start each file is hashed (Hash) and, unless
// private, copied read-only into DIR/provenance/files/<sha256> (Write); the
// index DIR/provenance/SHA256SUMS maps each path to its hash, role and
// privacy. At resume every file is hashed again and any change is refused,
// naming the file and both hashes (Verify).
//
// Layout:
//
//	DIR/provenance/
//	  SHA256SUMS        the index, written atomically after every copy
//	  files/<sha256>    one copy per distinct content, 0444
//	  files/a_b_c.py    (campaigns recorded before copies were content-addressed)
//
// Caveats, what holds and what callers must not assume:
//   - Inputs must be regular files, or links to them; anything else (FIFO,
//     device, directory, socket) is refused by name without being read, so
//     neither start nor resume can block on one.
//   - Hashing and copying read through a fixed buffer: memory stays bounded
//     whatever the size. Inputs over Options.MaxFileBytes are refused.
//   - A copy is renamed into place only when the bytes written hash to the
//     hash recorded by Hash: an input that changes between the two is
//     refused, never kept under a wrong name.
//   - A private input is hashed, never copied.
//   - Write creates files under DIR; removing them after a failure is the
//     caller's business. Hash writes nothing.
package provenance

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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
	// Frozen, when set, is the hash the protocol freezes for the file
	// and FrozenAt where (FILE:LINE:COL): Hash refuses a file with
	// another hash (*FrozenError). Neither is recorded in the index.
	Frozen, FrozenAt string
	// Shard marks a model shard (shards.go): hashed once, never copied,
	// recorded with its Size and MTimeNS, re-verified by them.
	Shard   bool
	Size    int64
	MTimeNS int64
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

// ErrFrozen is returned (wrapped in *FrozenError) when a file's hash is
// not the one the protocol freezes.
var ErrFrozen = errors.New("provenance file differs from its frozen hash")

// FrozenError names the file, where the protocol freezes its hash, and
// both hashes.
type FrozenError struct {
	Path, At, Frozen, Now string
}

func (e *FrozenError) Error() string {
	return fmt.Sprintf("%s: %s has sha256 %s; the protocol freezes %s", e.At, e.Path, e.Now, e.Frozen)
}

func (e *FrozenError) Unwrap() error { return ErrFrozen }

// HashFile is the hex SHA-256 of a regular file, read streaming; a path
// that is not a regular file is refused with a *NotRegularError.
func HashFile(path string) (string, error) {
	sum, _, err := hashRegular(path, 0)
	return sum, err
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

// DefaultMaxFileBytes is the size limit of one provenance input when
// Options.MaxFileBytes is 0.
const DefaultMaxFileBytes int64 = 4 << 30

// Options are the limits of Hash and Record. The zero value is the default.
type Options struct {
	// MaxFileBytes is the largest input accepted, in bytes; a larger one
	// is refused with a *TooLargeError naming the limit. 0 means
	// DefaultMaxFileBytes; a negative value means no limit.
	MaxFileBytes int64
	// Cache holds entries recorded before (an amendment's record of the
	// campaign's): a shard whose path, size and modification time match
	// one of them takes its hash without being read.
	Cache []Entry
}

func (o Options) limit() int64 {
	switch {
	case o.MaxFileBytes == 0:
		return DefaultMaxFileBytes
	case o.MaxFileBytes < 0:
		return 0
	}
	return o.MaxFileBytes
}

// Hash checks and hashes every entry and writes nothing: each must be a
// regular file (or a link to one) within the size limit, a private one
// must be owner-only (CheckPrivate), and one with a Frozen hash must have
// it. It fails on the first entry that is
// not, naming it. Memory stays bounded whatever the sizes.
func Hash(entries []Entry, opts Options) ([]Entry, error) {
	out := make([]Entry, len(entries))
	for i, e := range entries {
		if e.Private {
			if err := CheckPrivate(e.Path); err != nil {
				return nil, fmt.Errorf("provenance: %w", err)
			}
		}
		if e.Shard {
			se, err := hashShard(e, opts.Cache)
			if err != nil {
				return nil, fmt.Errorf("provenance: %w", err)
			}
			out[i] = se
			continue
		}
		sum, _, err := hashRegular(e.Path, opts.limit())
		if err != nil {
			return nil, fmt.Errorf("provenance: %w", err)
		}
		if e.Frozen != "" && sum != e.Frozen {
			return nil, fmt.Errorf("provenance: %w", &FrozenError{Path: e.Path, At: e.FrozenAt, Frozen: e.Frozen, Now: sum})
		}
		e.SHA256 = sum
		out[i] = e
	}
	return out, nil
}

// Write records entries already hashed by Hash under
// campaignDir/provenance: a copy of each public one, checked against its
// hash as it is written (see copyInto), then the index SHA256SUMS, written
// atomically and last. A private entry is never copied. An input that
// changed since Hash is refused with a *ChangedError.
func Write(campaignDir string, hashed []Entry, opts Options) error {
	dir := filepath.Join(campaignDir, SubDir)
	files := filepath.Join(dir, Files)
	if err := atomicfile.MkdirAll(files, 0o755); err != nil {
		return fmt.Errorf("provenance: %w", err)
	}
	for _, e := range hashed {
		if e.Private || e.Shard {
			continue // hash only, never copied
		}
		if err := copyInto(files, e, opts.limit()); err != nil {
			return fmt.Errorf("provenance: %w", err)
		}
	}
	if err := atomicfile.SyncDir(files); err != nil {
		return fmt.Errorf("provenance: %w", err)
	}
	var b bytes.Buffer
	for _, e := range hashed {
		writeSumLine(&b, e)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, SumFile), b.Bytes(), 0o444); err != nil {
		return fmt.Errorf("provenance: %w", err)
	}
	return nil
}

// Record is Hash then Write: it fails on the first bad input before
// writing anything.
func Record(campaignDir string, entries []Entry, opts Options) ([]Entry, error) {
	out, err := Hash(entries, opts)
	if err != nil {
		return nil, err
	}
	if err := Write(campaignDir, out, opts); err != nil {
		return nil, err
	}
	return out, nil
}

// CopyOf is the kept copy of the recorded entry e, and whether there is
// one: DIR/provenance/files/<sha256>, or, in a campaign recorded before
// copies were content-addressed, the copy named by flattening the path,
// when its content still has the recorded hash (flattened names collide).
// A private entry has none.
func CopyOf(campaignDir string, e Entry) (string, bool) {
	if e.Private || !validSum(e.SHA256) {
		return "", false
	}
	files := filepath.Join(campaignDir, SubDir, Files)
	p := filepath.Join(files, e.SHA256)
	if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
		return p, true
	}
	p = filepath.Join(files, legacyCopyName(e.Path))
	if sum, err := HashFile(p); err == nil && sum == e.SHA256 {
		return p, true
	}
	return "", false
}

// legacyCopyName is how copies were named before they were content-addressed:
// the path flattened into one name, /a/b/c.py -> a_b_c.py (so /a/b_c and
// /a_b/c collided).
func legacyCopyName(path string) string {
	return strings.ReplaceAll(strings.TrimPrefix(filepath.Clean(path), "/"), "/", "_")
}

// Read loads the recorded entries from SHA256SUMS (see writeSumLine for
// its format; the files of older campaigns read unchanged).
func Read(campaignDir string) ([]Entry, error) {
	f, err := os.Open(filepath.Join(campaignDir, SubDir, SumFile))
	if err != nil {
		return nil, fmt.Errorf("provenance: %w", err)
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		e, err := parseSumLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("provenance: %s: %w", f.Name(), err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("provenance: read %s: %w", f.Name(), err)
	}
	return out, nil
}

// Verify re-hashes every recorded file, streaming; it returns every change
// joined: a *ChangedError for a file changed or missing, a
// *NotRegularError for one replaced by something that is not a regular
// file (never opened, so a FIFO cannot block it).
func Verify(campaignDir string) error { return VerifyOnly(campaignDir, nil) }

// VerifyOnly is Verify of the recorded entries keep accepts (every entry
// when keep is nil).
func VerifyOnly(campaignDir string, keep func(Entry) bool) error {
	entries, err := Read(campaignDir)
	if err != nil {
		return err
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	var errs []error
	for _, e := range entries {
		if keep != nil && !keep(e) {
			continue
		}
		if e.Shard {
			if err := verifyShard(e); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		now, err := HashFile(e.Path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			errs = append(errs, &ChangedError{Path: e.Path, Recorded: e.SHA256})
		case err != nil:
			errs = append(errs, err)
		case now != e.SHA256:
			errs = append(errs, &ChangedError{Path: e.Path, Recorded: e.SHA256, Now: now})
		}
	}
	return errors.Join(errs...)
}
