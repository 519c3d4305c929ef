package campaigndir

import (
	"path/filepath"

	"warden/pkg/amend"
	"warden/pkg/atomicfile"
	"warden/pkg/state"
)

// Amendable is the campaign in dir, with its settings set and its store
// open for writing, as an amendment applies to it: controller.json
// follows an installed amendment.
func Amendable(dir string, set Settings, store *state.Store) amend.Campaign {
	return amend.Campaign{Dir: dir, Workdir: set.Workdir, Store: store, SaveSettings: func(path, sha string) error {
		set.ProtocolPath, set.ProtocolSHA256 = path, sha
		return atomicfile.WriteJSON(filepath.Join(dir, SettingsFile), set, 0o644)
	}}
}
