package provenance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
)

// Model shards (seed 002: "Record ... model path and shard hashes"): the
// files of a model directory that match a glob, each an Entry with Shard
// set. A shard is hashed once per campaign, never copied (weights are not
// an archive's), and recorded with its size and modification time: a
// later Hash or Verify of a shard whose size and modification time are
// those recorded takes the recorded hash without reading the file again
// (tens of gigabytes of weights before every launch wave otherwise); a
// shard whose size or time changed is hashed again and compared.

// Shards lists the files of dir that match glob (filepath.Match), sorted,
// as entries of role role; none is an error, as is a glob that is not one.
func Shards(dir, glob, role string, private bool) ([]Entry, error) {
	if _, err := filepath.Match(glob, ""); err != nil {
		return nil, fmt.Errorf("provenance: shards %q: %w", glob, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("provenance: shards of %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("provenance: shards of %s: not a directory", dir)
	}
	ms, err := filepath.Glob(filepath.Join(dir, glob))
	if err != nil {
		return nil, fmt.Errorf("provenance: shards of %s: %w", dir, err)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("provenance: no file of %s matches %q: the model's shards cannot be recorded", dir, glob)
	}
	sort.Strings(ms)
	out := make([]Entry, len(ms))
	for i, m := range ms {
		out[i] = Entry{Path: m, Role: role, Private: private, Shard: true}
	}
	return out, nil
}

// statOf is a regular file's size and modification time (links followed).
func statOf(path string) (int64, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, 0, &NotRegularError{Path: path, Kind: kind(fi.Mode())}
	}
	return fi.Size(), fi.ModTime().UnixNano(), nil
}

// cached is the hash recorded for shard e in cache when its path, size
// and modification time are those recorded.
func cached(cache []Entry, e Entry) (string, bool) {
	for _, c := range cache {
		if c.Shard && c.Path == e.Path && c.Size == e.Size && c.MTimeNS == e.MTimeNS && validSum(c.SHA256) {
			return c.SHA256, true
		}
	}
	return "", false
}

// hashShard hashes shard e, or takes its cached hash, and records its
// size and modification time. The size limit does not apply: a shard is
// read through the fixed buffer, never copied.
func hashShard(e Entry, cache []Entry) (Entry, error) {
	size, mtime, err := statOf(e.Path)
	if err != nil {
		return e, err
	}
	e.Size, e.MTimeNS = size, mtime
	if sum, ok := cached(cache, e); ok {
		e.SHA256 = sum
		return e, nil
	}
	sum, _, err := hashRegular(e.Path, 0)
	if err != nil {
		return e, err
	}
	// the file changed while it was read: its record would not be its own
	if s2, m2, err := statOf(e.Path); err != nil || s2 != size || m2 != mtime {
		return e, fmt.Errorf("hash %s: the shard changed while it was read", e.Path)
	}
	e.SHA256 = sum
	return e, nil
}

// verifyShard checks a recorded shard: unchanged size and time take the
// record; otherwise the file is hashed again and must have the recorded
// hash.
func verifyShard(e Entry) error {
	size, mtime, err := statOf(e.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &ChangedError{Path: e.Path, Recorded: e.SHA256}
	case err != nil:
		return err
	case size == e.Size && mtime == e.MTimeNS:
		return nil
	}
	now, _, err := hashRegular(e.Path, 0)
	if err != nil {
		return err
	}
	if now != e.SHA256 {
		return &ChangedError{Path: e.Path, Recorded: e.SHA256, Now: now}
	}
	return nil
}

// shardSuffix is how the index records a shard's size and modification
// time: after the role (and " private"), " shard=SIZE:MTIME_NS".
var shardSuffix = regexp.MustCompile(` shard=([0-9]+):(-?[0-9]+)$`)

func formatShard(e Entry) string {
	if !e.Shard {
		return ""
	}
	return " shard=" + strconv.FormatInt(e.Size, 10) + ":" + strconv.FormatInt(e.MTimeNS, 10)
}

// parseShard cuts a shard suffix from an index line's metadata.
func parseShard(meta string, e *Entry) string {
	m := shardSuffix.FindStringSubmatchIndex(meta)
	if m == nil {
		return meta
	}
	size, err1 := strconv.ParseInt(meta[m[2]:m[3]], 10, 64)
	mtime, err2 := strconv.ParseInt(meta[m[4]:m[5]], 10, 64)
	if err1 != nil || err2 != nil {
		return meta
	}
	e.Shard, e.Size, e.MTimeNS = true, size, mtime
	return meta[:m[0]]
}
