package fakegpu

import (
	"os"
	"path/filepath"
)

// writeFileRenamed writes data to a temporary file in the same directory
// and renames it over path, without fsync: readers see the old or the new
// content whole, but a power cut may lose the update. It is for the energy
// counters only (see advanceEnergy for why they skip the fsync); every
// other file goes through atomicfile.WriteFile.
func writeFileRenamed(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
