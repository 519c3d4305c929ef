package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// readOnlyStorage says whether the file system of the campaign directory
// dir no longer takes writes, and how that shows: mounted read-only
// (ST_RDONLY), or marked read-only by the kernel after an I/O error on its
// device (ext4's errors=remount-ro shows "ro" or "emergency_ro" among the
// super block's options in /proc/self/mountinfo, the mount itself still
// "rw"). "" when neither is seen, or dir cannot be looked at.
func readOnlyStorage(dir string) string {
	var sfs unix.Statfs_t
	if unix.Statfs(dir, &sfs) == nil && sfs.Flags&unix.ST_RDONLY != 0 {
		return "mounted read-only"
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	best, opts := "", []string(nil)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 6 || sep < 0 || sep+3 >= len(f) {
			continue
		}
		mp := unescapeMount(f[4])
		if (real == mp || strings.HasPrefix(real, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, opts = mp, strings.Split(f[sep+3], ",")
		}
	}
	switch {
	case slices.Contains(opts, "emergency_ro"):
		return "marked read-only by the kernel (emergency_ro) after an I/O error on its device"
	case slices.Contains(opts, "ro"):
		return "read-only (its super block is ro: the kernel remounts ext4 so after an I/O error on its device)"
	}
	return ""
}

// unescapeMount undoes mountinfo's octal escapes of a path.
func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}
