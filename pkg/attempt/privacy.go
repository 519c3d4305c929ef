package attempt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"warden/pkg/campaignfs"
	"warden/pkg/gates"
	"warden/pkg/provenance"
	"warden/protocols"
)

// campaignPrivacy scans the campaign's own files (everything in the
// campaign directory but the attempt directories under runs/, which each
// attempt scans itself, and the fake GPUs' claims): controller.log,
// plan.json, controller.json, state.db, the provenance copies and
// ledger output, a report written there. Files found clean and unchanged
// since an earlier attempt are not read again.
func (c *Env) campaignPrivacy(forbidden []string) gates.Verdict {
	fake := ""
	if c.FakeGPUDir != "" {
		if rel, err := filepath.Rel(c.Dir, c.FakeGPUDir); err == nil && filepath.IsLocal(rel) {
			fake = filepath.ToSlash(rel)
		}
	}
	v := gates.PrivacyScanCached(c.Dir, forbidden, c.Private, func(rel string) bool {
		// the socket and the lock hold no content
		return rel == campaignfs.RunsDir || rel == fake || rel == provenance.SubDir || rel == campaignfs.SocketFile || rel == campaignfs.LockFile
	}, 64<<20, c.PrivCache, c.Now())
	// Provenance copies are the protocol's inputs: a synthetic manifest
	// may be archived there with its prompts (seed 002, "Synthetic
	// manifests may be archived"), so no field is forbidden in them; no
	// private text may be there.
	provDir := filepath.Join(c.Dir, provenance.SubDir)
	if _, err := os.Lstat(provDir); errors.Is(err, fs.ErrNotExist) {
		v.Gate = "privacy-campaign"
		return v // nothing was written there to scan
	}
	pv := gates.PrivacyScanCached(provDir, nil, c.Private, nil, 64<<20, c.PrivCache, c.Now())
	for k, n := range pv.Figures {
		if strings.HasPrefix(k, "files_") || k == "bytes_scanned" || k == "findings" || k == "symlinks" || k == "irregular" {
			v.Figures[k] += n
		}
	}
	if !pv.Passed() {
		if v.Detail != "" {
			v.Detail += "; "
		}
		v.Detail += provenance.SubDir + "/: " + pv.Detail
		if v.Verdict != gates.Fail {
			v.Verdict = pv.Verdict // fail or error
		}
	}
	v.Gate = "privacy-campaign"
	return v
}

// PrivateIndex reads the private inputs recorded in the campaign's
// provenance and indexes them for the privacy scan of every attempt's
// artifacts: every run of at least minLeak bytes of any private value
// (0: protocols.DefaultMinLeakBytes).
func PrivateIndex(dir string, minLeak int) (*gates.PrivateIndex, error) {
	entries, err := provenance.Read(dir)
	if err != nil {
		return nil, err
	}
	if minLeak == 0 {
		minLeak = protocols.DefaultMinLeakBytes
	}
	var paths []string
	for _, e := range entries {
		if e.Private {
			paths = append(paths, e.Path)
		}
	}
	x, err := gates.IndexPrivate(paths, minLeak)
	if err != nil {
		return nil, fmt.Errorf("read the private inputs for the privacy scan: %w", err)
	}
	return x, nil
}
