package campaigndir

import (
	"errors"
	"fmt"
	"os"
	"time"

	"warden/pkg/amend"
	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/pkg/provenance"
	"warden/pkg/state"
	"warden/protocols"
)

// Lock takes the campaign in dir (absolute) for one controller: it
// refuses a directory without a state database, one that another user
// owns or others may write (CheckOwned: a *NotOwnedError), and one a live
// controller holds, naming its pid. A campaign made before the directory
// was owner-only becomes so.
func Lock(dir string) (*lockfile.Lock, error) {
	if _, err := os.Stat(dirlayout.State(dir)); err != nil {
		return nil, fmt.Errorf("%s is not a campaign directory: no %s", dir, dirlayout.StateFile)
	}
	if err := CheckOwned(dir, os.Geteuid()); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, fi.Mode().Perm()&0o700); err != nil {
			return nil, fmt.Errorf("make %s owner-only: %w", dir, err)
		}
	}
	lock, err := lockfile.Acquire(dirlayout.Lock(dir))
	if err != nil {
		var he *lockfile.HeldError
		if errors.As(err, &he) {
			return nil, fmt.Errorf("refused: controller pid %d already runs campaign %s", he.PID, dir)
		}
		return nil, err
	}
	return lock, nil
}

// Opened is a locked campaign as its controller runs it.
type Opened struct {
	Settings Settings
	Plan     *protocols.Plan
	Store    *state.Store // open for writing; the caller closes it
}

// Open reads the settings and plan of the locked campaign in dir and opens
// its store; a damaged or empty database is refused (*DamagedError), a
// copy of it kept, before anything is recorded. backend, when not "", must be the campaign's GPU backend. An
// amendment that a controller recorded and died before it installed is
// installed first. Every recorded input must be unchanged: a change is
// refused, with where to find the copy of an input that is missing.
func Open(dir, backend string) (_ Opened, err error) {
	set, err := ReadSettings(dir)
	if err != nil {
		return Opened{}, err
	}
	if backend != "" && backend != set.GPUBackend {
		return Opened{}, fmt.Errorf("campaign uses GPU backend %q; --gpu-backend %s cannot change it", set.GPUBackend, backend)
	}
	plan, err := dirlayout.ReadPlan(dir)
	if err != nil {
		return Opened{}, fmt.Errorf("read plan: %w", err)
	}
	path := dirlayout.State(dir)
	store, err := state.Open(path, state.Options{Timeout: 2 * time.Second})
	if err != nil {
		return Opened{}, damaged(path, err)
	}
	defer func() {
		if err != nil {
			store.Close()
		}
	}()
	if installed, err := amend.Finish(Amendable(dir, set, store), plan); err != nil {
		return Opened{}, err
	} else if installed {
		if set, err = ReadSettings(dir); err != nil {
			return Opened{}, err
		}
		if plan, err = dirlayout.ReadPlan(dir); err != nil {
			return Opened{}, fmt.Errorf("read plan: %w", err)
		}
	}
	if err := provenance.Verify(dir); err != nil {
		return Opened{}, fmt.Errorf("refused: a recorded input changed since the campaign started or was last amended (register an amendment to change it: controller amend)%s:\n%w", provenance.MissingHint(dir, err), err)
	}
	return Opened{Settings: set, Plan: plan, Store: store}, nil
}
