package attempt

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"warden/pkg/provenance"
	"warden/pkg/state"
	"warden/protocols"
)

// Seed 002, stop condition 1: "source/patch/helper/manifest hash
// mismatch". The inputs recorded at start (DIR/provenance/SHA256SUMS) are
// hashed again before every launch wave, not only at resume: a file
// rewritten while the campaign runs stops it before another run reads it.
// And each run's client reports the SHA-256 of the manifest it read; it
// must be the one recorded at start.

// checkManifest compares the manifest.sha256 the client's result reports
// with the hash recorded at start for the manifest the run names. A result
// that reports none, or a manifest with no recorded hash, cannot be
// checked: the run fails as well (fail closed).
func (a *Attempt) checkManifest() (state.Reason, string) {
	if a.run.Manifest == "" {
		return "", ""
	}
	path := protocols.ManifestPath(a.run.Manifest, a.env.Workdir)
	frozen, err := a.env.recordedHash(path)
	if err != nil {
		return state.ReasonInputChanged, fmt.Sprintf("manifest %s: %v", path, err)
	}
	found, err := reportedManifestHash(filepath.Join(a.dir, a.run.ResultFile))
	if err != nil {
		return state.ReasonInputChanged, fmt.Sprintf("manifest %s (recorded sha256 %s) cannot be checked: %v", path, frozen, err)
	}
	if found != frozen {
		return state.ReasonInputChanged, fmt.Sprintf("manifest %s: recorded sha256 %s, the client read %s", path, frozen, found)
	}
	return "", ""
}

// recordedHash is the hash recorded at start for path.
func (c *Env) recordedHash(path string) (string, error) {
	entries, err := provenance.Read(c.Dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if filepath.Clean(e.Path) == filepath.Clean(path) {
			return e.SHA256, nil
		}
	}
	return "", errors.New("no hash recorded at start (not among the campaign's provenance files)")
}

// reportedManifestHash reads manifest.sha256 from a client's result file.
func reportedManifestHash(path string) (string, error) {
	b, err := readChildFile(path)
	if err != nil {
		return "", fmt.Errorf("the client's result: %w", err)
	}
	var r struct {
		Manifest *struct {
			SHA256 string `json:"sha256"`
		} `json:"manifest"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("the client's result %s: %w", filepath.Base(path), err)
	}
	if r.Manifest == nil || r.Manifest.SHA256 == "" {
		return "", fmt.Errorf("the client's result %s reports no manifest.sha256", filepath.Base(path))
	}
	return r.Manifest.SHA256, nil
}
