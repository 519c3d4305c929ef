package record

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/safefile"
	"warden/pkg/state"
)

// MaxEvidenceFiles bounds how many files of the client's result directory
// Seal digests.
const MaxEvidenceFiles = 256

// Seal makes the attempt's evidence files durable once its processes have
// ended, and notes their digests (state.EvidenceFile) for the next
// transition, so that a reader can tell a file a failing disk damaged
// (state.Attempt.CheckEvidence). The files are the processes' output,
// environment.json, the GPU samples and every regular file of the client's
// result directory (at most MaxEvidenceFiles); one that is not there, is
// not a regular file, or that a child made unreadable, is skipped. An
// error is the file system's: a file or directory whose fsync failed (an
// I/O error, no space) cannot be kept as evidence (Config.StorageFault).
func (r *Record) Seal() error {
	names := append(append([]string{}, dirlayout.EvidenceFiles...), resultFiles(r.dir)...)
	// the directories are made durable beside the files: both are done
	// before Seal returns, whichever ends first
	dirs := []string{r.dir, filepath.Join(r.dir, dirlayout.ClientDir)}
	dirErrs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, d := range dirs {
		wg.Go(func() { dirErrs[i] = atomicfile.SyncDir(d) })
	}
	sums, errs := sealAll(r.dir, names)
	wg.Wait()
	for i, rel := range names {
		err := errs[i]
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, fs.ErrPermission) {
			continue // nothing the controller can keep: not there, not a file, or made unreadable by a child
		}
		if err != nil {
			return r.storageFault(fmt.Errorf("the evidence %s could not be made durable: %w", filepath.Join(r.dir, rel), err))
		}
		r.pendEvidence = append(r.pendEvidence, state.EvidenceFile{Path: rel, Size: sums[i].Size, SHA256: sums[i].SHA256})
	}
	for i, d := range dirs {
		if err := dirErrs[i]; err != nil && !errors.Is(err, fs.ErrNotExist) {
			if !isDir(d) {
				continue // a child put something else at the client directory's name: no directory to make durable
			}
			return r.storageFault(fmt.Errorf("the evidence directory %s could not be made durable: %w", d, err))
		}
	}
	return nil
}

// sealWorkers bounds how many evidence files are fsynced at once.
const sealWorkers = 8

// sealAll seals the files names (relative to dir) concurrently, so that
// the file system can make them durable in one journal commit instead of
// one each, and returns each one's Sum and error, in the order of names.
// Every goroutine it starts has ended when it returns.
func sealAll(dir string, names []string) ([]safefile.Sum, []error) {
	sums, errs := make([]safefile.Sum, len(names)), make([]error, len(names))
	next := make(chan int, len(names))
	for i := range names {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(sealWorkers, len(names)) {
		wg.Go(func() {
			for i := range next {
				sums[i], errs[i] = safefile.Seal(filepath.Join(dir, names[i]))
			}
		})
	}
	wg.Wait()
	return sums, errs
}

// storageFault tells Config.StorageFault, if set, of err, and returns it.
func (r *Record) storageFault(err error) error {
	if r.cfg.StorageFault != nil {
		r.cfg.StorageFault(err)
	}
	return err
}

// resultFiles lists the regular files under the client's result
// directory of adir, relative to adir, links not followed, at most
// MaxEvidenceFiles.
func resultFiles(adir string) []string {
	var out []string
	filepath.WalkDir(filepath.Join(adir, dirlayout.ClientDir), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if len(out) == MaxEvidenceFiles {
			return filepath.SkipAll
		}
		if rel, err := filepath.Rel(adir, path); err == nil {
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// isDir says whether path is a directory, not following a link.
func isDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}
