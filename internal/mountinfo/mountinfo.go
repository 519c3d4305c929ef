// Package mountinfo reads the kernel's table of mounts, /proc/PID/mountinfo
// (proc(5)): one line a mount,
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// its root within the file system, its mount point and, after the " - "
// separator, the file system's type, source and super block options.
package mountinfo

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Self is this process's table.
const Self = "/proc/self/mountinfo"

// Mount is one line of the table, its paths unescaped.
type Mount struct {
	Root, Point string
	FSType      string
	// SuperOptions are the super block's options (the last field): ext4
	// shows "ro" or "emergency_ro" here after an I/O error while the
	// mount itself stays "rw".
	SuperOptions []string
}

// Read reads the table at path; lines it cannot read are passed over.
func Read(path string) ([]Mount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var out []Mount
	for line := range strings.SplitSeq(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		m := Mount{Root: Unescape(f[3]), Point: Unescape(f[4]), FSType: g[0]}
		if len(g) >= 3 {
			m.SuperOptions = strings.Split(g[2], ",")
		}
		out = append(out, m)
	}
	return out, nil
}

// Unescape undoes the octal escapes (\040 for a space, ...) the table
// uses in paths.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
