package attempt

import (
	"path/filepath"

	"warden/pkg/dirlayout"
	"warden/pkg/gates"
)

// campaignPrivacy is the privacy-campaign gate of the campaign env runs in
// (gates.CampaignPrivacy): the attempt directories under runs/ (each
// attempt scans its own), the fake GPUs' claims, the socket and the lock
// are left out.
func (c *Env) campaignPrivacy(forbidden []string) gates.Verdict {
	skip := []string{dirlayout.RunsDir, dirlayout.SocketFile, dirlayout.LockFile}
	if c.FakeGPUDir != "" {
		if rel, err := filepath.Rel(c.Dir, c.FakeGPUDir); err == nil && filepath.IsLocal(rel) {
			skip = append(skip, filepath.ToSlash(rel))
		}
	}
	return gates.CampaignPrivacy(c.Dir, skip, forbidden, c.Private, c.PrivCache, c.Now())
}
