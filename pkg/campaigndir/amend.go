package campaigndir

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"warden/pkg/amend"
	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/launch"
	"warden/pkg/provenance"
	"warden/pkg/state"
)

// Amendable is the campaign in dir, with its settings set and its store
// open for writing, as an amendment applies to it: controller.json
// follows an installed amendment.
func Amendable(dir string, set Settings, store *state.Store) amend.Campaign {
	return amend.Campaign{Dir: dir, Workdir: set.Workdir, Store: store, SaveSettings: func(path, sha string) error {
		set.ProtocolPath, set.ProtocolSHA256 = path, sha
		return atomicfile.WriteJSON(dirlayout.Settings(dir), set, 0o644)
	}}
}

// Amend shows, and when asked records and installs, an amendment of the
// campaign in dir, which no controller runs (amend.Amend).
func Amend(dir string, req amend.Request) (amend.Result, error) {
	set, err := ReadSettings(dir)
	if err != nil {
		return amend.Result{}, err
	}
	store, err := dirlayout.OpenStore(dir, state.Options{Timeout: 2 * time.Second})
	if err != nil {
		return amend.Result{}, err
	}
	defer store.Close()
	res, _, err := amend.Amend(Amendable(dir, set, store), req)
	return res, err
}

// Readjudicate recomputes the recorded verdicts of the campaign in dir,
// which no controller runs, under the recorded amendment (of its runs
// only, when only names any): amend.Readjudicate, with the validators'
// new output under provenance/amendments/ID/readjudicated.
//
// It refuses, as a *NotOwnedError, a directory CheckOwned refuses: the
// validators it runs are the plan's.
func Readjudicate(dir, amendment string, only []string) ([]amend.Readjudicated, error) {
	if err := CheckOwned(dir, os.Geteuid()); err != nil {
		return nil, err
	}
	plan, err := dirlayout.ReadPlan(dir)
	if err != nil {
		return nil, err
	}
	store, err := dirlayout.OpenStore(dir, state.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	if err := amend.CheckRecorded(store, amendment); err != nil {
		return nil, err
	}
	set, err := ReadSettings(dir)
	if err != nil {
		return nil, err
	}
	reaper := launch.NewReaper()
	if err := reaper.Start(context.Background()); err != nil {
		return nil, err
	}
	defer reaper.Close()
	outDir := filepath.Join(dir, provenance.SubDir, "amendments", amendment, "readjudicated")
	return amend.Readjudicate(Amendable(dir, set, store), plan, amendment, only, &launch.Launcher{Reaper: reaper}, outDir)
}
