package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"warden/internal/mountinfo"
	"warden/pkg/views"

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
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return ""
	}
	best, opts := "", []string(nil)
	for _, m := range mounts {
		if (real == m.Point || strings.HasPrefix(real, strings.TrimSuffix(m.Point, "/")+"/")) && len(m.Point) >= len(best) {
			best, opts = m.Point, m.SuperOptions
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

// fullBelow is the free space under which the campaign directory's file
// system counts as full: less than a database commit and a record need.
const fullBelow = 1 << 20

// storageFault says how the file system of the campaign directory dir
// refuses writes: readOnlyStorage's reading, or full (less than fullBelow
// free to this user: the blocks reserved for root count for root only,
// as they do for the controller, which runs as the same user); the zero
// Storage when neither is seen.
func storageFault(dir string) views.Storage {
	if ro := readOnlyStorage(dir); ro != "" {
		return views.Storage{ReadOnly: ro}
	}
	var sfs unix.Statfs_t
	if unix.Statfs(dir, &sfs) != nil {
		return views.Storage{}
	}
	free := sfs.Bavail
	if os.Geteuid() == 0 {
		free = sfs.Bfree
	}
	if bytes := free * uint64(sfs.Bsize); bytes < fullBelow {
		return views.Storage{Full: true, Free: bytes}
	}
	return views.Storage{}
}
