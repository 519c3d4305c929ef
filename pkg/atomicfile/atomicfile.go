// Package atomicfile writes files so that a crash leaves either the old
// content or the new one, whole, and the new one survives a power cut once
// a write has returned.
//
// WriteFile's promise: the data goes to a temporary file in the same
// directory as the target, which is fsynced, renamed over the target, and
// then the directory itself is fsynced, so the rename is durable too.
// Readers never see a partial file. A failed write removes its temporary
// file and leaves the target as it was (unless the failure is the final
// directory fsync: the rename has then happened but may not be durable).
//
// MkdirAll gives directories the same durability: each parent whose entry
// list changed is fsynced.
package atomicfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Option changes how WriteFile and WriteJSON write.
type Option func(*config)

type config struct {
	beforeRename func()
	noSync       bool
	root         string
}

// Beneath returns an Option that resolves the target's path beneath the
// directory root (os.Root: openat2 RESOLVE_BENEATH where the kernel has
// it): a symbolic link that a process planted in the path, leading out of
// root, fails the write instead of being followed. The target must be
// under root.
func Beneath(root string) Option {
	return func(c *config) { c.root = root }
}

// NoSync returns an Option that skips every fsync: the rename is still
// atomic (readers see the old content or the new one, whole), but a power
// cut may lose the write or leave an empty file. It is for files derived
// from a durable record that the caller rebuilds after a crash (the
// attempts' state.json, which resume rewrites from the database).
func NoSync() Option {
	return func(c *config) { c.noSync = true }
}

// BeforeRename returns an Option that calls f after the temporary file has
// been written and fsynced and before it is renamed over the target: at that
// point the target still holds its old content. Crash tests kill the process
// there.
func BeforeRename(f func()) Option {
	return func(c *config) { c.beforeRename = f }
}

// WriteFile writes data to path atomically and durably, with permissions
// mode (not subject to the umask, and not copied from an existing file):
// a temporary file in the same directory, fsync, rename over path, fsync
// of the directory. The directory must exist.
func WriteFile(path string, data []byte, mode os.FileMode, opts ...Option) error {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if err := write(path, data, mode, cfg); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// write writes data to path through one directory handle: the root's
// when the target is to be resolved beneath one (Beneath), its own
// directory's otherwise. Every write takes the same path: a temporary
// file created exclusively and without following a link, filled, fsynced
// (unless NoSync), renamed over the target, then the directory fsynced.
func write(path string, data []byte, mode os.FileMode, cfg config) error {
	rootDir, rel := filepath.Dir(path), filepath.Base(path)
	if cfg.root != "" {
		r, err := filepath.Rel(cfg.root, path)
		if err != nil || r == "." || strings.HasPrefix(r, "..") {
			return fmt.Errorf("%s is not beneath %s", path, cfg.root)
		}
		rootDir, rel = cfg.root, r
	}
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return err
	}
	defer root.Close()
	tmp := filepath.Join(filepath.Dir(rel), fmt.Sprintf(".%s.tmp%d", filepath.Base(rel), rand.Uint64()))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			root.Remove(tmp)
		}
	}()
	if err := fill(f, data, mode, !cfg.noSync); err != nil {
		return err
	}
	if cfg.beforeRename != nil {
		cfg.beforeRename()
	}
	if err := root.Rename(tmp, rel); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	renamed = true
	if cfg.noSync {
		return nil
	}
	d, err := root.Open(filepath.Dir(rel))
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	if err := errors.Join(d.Sync(), d.Close()); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// WriteJSON writes v as JSON, indented by two spaces and ending in a
// newline, to path through WriteFile.
func WriteJSON(path string, v any, mode os.FileMode, opts ...Option) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: encode: %w", path, err)
	}
	return WriteFile(path, append(data, '\n'), mode, opts...)
}

// SyncDir fsyncs the directory dir, making the creation, removal and
// renaming of its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	if err := errors.Join(d.Sync(), d.Close()); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// MkdirAll creates dir and any missing parents with permissions mode
// (before the umask), as os.MkdirAll does, and fsyncs each parent whose
// entry list it changed, so that the new directories survive a power cut.
// A dir that already exists is left alone; one that exists but is not a
// directory is an error.
func MkdirAll(dir string, mode os.FileMode) error {
	if err := mkdirAll(filepath.Clean(dir), mode); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	return nil
}

func mkdirAll(dir string, mode os.FileMode) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: fs.ErrExist}
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAll(parent, mode); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, mode); err != nil {
		// Made meanwhile by someone else: sync the parent all the same, as
		// its maker may not have yet.
		fi, serr := os.Stat(dir)
		if !errors.Is(err, fs.ErrExist) || serr != nil || !fi.IsDir() {
			return err
		}
	}
	return SyncDir(parent)
}

// fill writes data to the temporary file f, sets its mode, fsyncs it when
// sync, and closes it.
func fill(f *os.File, data []byte, mode os.FileMode, sync bool) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write temporary file: %w", err)
	}
	return nil
}
