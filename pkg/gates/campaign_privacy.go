package gates

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"warden/pkg/provenance"
	"warden/protocols"
)

// CampaignPrivacy is the privacy-campaign gate: it scans the campaign's
// own files in dir for forbidden fields and the private values of idx:
// everything but the entries named in skip (relative to dir, slash-
// separated: the attempt directories, which each attempt scans itself, and
// what holds no content the campaign wrote) and the provenance copies,
// which are scanned for private values alone. Files found clean and
// unchanged since an earlier scan through cache are not read again.
func CampaignPrivacy(dir string, skip []string, forbidden []string, idx *PrivateIndex, cache *ScanCache, now time.Time) Verdict {
	v := PrivacyScanCached(dir, forbidden, idx, func(rel string) bool {
		return rel == provenance.SubDir || slices.Contains(skip, rel)
	}, 64<<20, cache, now)
	// Provenance copies are the protocol's inputs: a synthetic manifest
	// may be archived there with its prompts (seed 002, "Synthetic
	// manifests may be archived"), so no field is forbidden in them; no
	// private text may be there.
	provDir := filepath.Join(dir, provenance.SubDir)
	if _, err := os.Lstat(provDir); errors.Is(err, fs.ErrNotExist) {
		v.Gate = "privacy-campaign"
		return v // nothing was written there to scan
	}
	pv := PrivacyScanCached(provDir, nil, idx, nil, 64<<20, cache, now)
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
		if v.Verdict != Fail {
			v.Verdict = pv.Verdict // fail or error
		}
	}
	v.Gate = "privacy-campaign"
	return v
}

// CampaignPrivateIndex reads the private inputs recorded in the
// provenance of the campaign in dir and indexes them for the privacy scan
// of every attempt's artifacts: every run of at least minLeak bytes of any
// private value (0: protocols.DefaultMinLeakBytes).
func CampaignPrivateIndex(dir string, minLeak int) (*PrivateIndex, error) {
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
	x, err := IndexPrivate(paths, minLeak)
	if err != nil {
		return nil, fmt.Errorf("read the private inputs for the privacy scan: %w", err)
	}
	return x, nil
}
