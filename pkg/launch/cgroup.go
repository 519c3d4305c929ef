package launch

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"warden/internal/mountinfo"

	"golang.org/x/sys/unix"
)

// pollInterval is how often this package looks again at /proc and
// cgroup.events while waiting for processes to go away, once a wait has
// lasted (pollUntil starts at pollFirst).
const pollInterval = 20 * time.Millisecond

// pollFirst is the first wait of a poll (pollUntil).
const pollFirst = time.Millisecond

// Default locations of the files a Manager reads to find its hierarchy.
const (
	selfMountInfo = mountinfo.Self
	selfCgroup    = "/proc/self/cgroup"
)

// campaignPrefix starts the name of every campaign root directory. OpenLeaf
// refuses a directory whose parent does not carry it.
const campaignPrefix = "warden-"

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Manager creates and removes the leaf cgroups of one campaign.
//
// Layout (cgroup v2 only):
//
//	<mount>                       cgroup2 mount, found in /proc/self/mountinfo
//	└── <own path>                the controller's cgroup, from /proc/self/cgroup "0::<path>"
//	    └── warden-<name>         campaign root: never holds a process
//	        ├── <leaf>            one per started process tree (e.g. run-attempt-role)
//	        └── <leaf>
//
// cgroup v2's no-internal-process rule says that a non-root cgroup that
// enables domain controllers for its children (cgroup.subtree_control) may
// not hold processes itself: processes live in leaves. This package enables
// no controllers (it needs only cgroup.procs, cgroup.events and cgroup.kill,
// which every cgroup has), so the controller may stay in <own path> while its
// children live below it. Processes are only ever placed in leaves, never in
// the campaign root, so enabling controllers later (memory or cpu limits
// per leaf) needs only the controller itself to move into a leaf of its own
// first, and subtree_control writes on <own path> and the campaign root.
//
// A Manager that found no writable cgroup2 hierarchy is not Available; the
// package then contains processes with process groups and sessions only,
// and Mode says so. A nil *Manager behaves as an unavailable one.
type Manager struct {
	name      string
	mount     string // cgroup2 mount point; "" when none was found
	mountRoot string // hierarchy path mounted at mount (mountinfo field 4)
	root      string // campaign root directory; "" when unavailable
	rootRel   string // root as /proc/PID/cgroup writes it
	reason    string // why cgroups are unavailable; "" when available
	hasKill   bool   // cgroup.kill exists (Linux 5.14 and later)
}

// NewManager finds the cgroup2 hierarchy and creates (or, on resume, reuses)
// the campaign root warden-<name> below the controller's own cgroup. The
// error is non-nil only for an invalid name: when cgroups cannot be used the
// Manager is returned with Available false and the reason in Mode.
func NewManager(name string) (*Manager, error) {
	return newManager(name, selfMountInfo, selfCgroup)
}

func newManager(name, mountInfoPath, cgroupPath string) (*Manager, error) {
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("new cgroup manager %q: name must match %s", name, validName)
	}
	m := &Manager{name: name}
	mount, mountRoot, err := findCgroup2(mountInfoPath)
	if err != nil {
		m.reason = err.Error()
		return m, nil
	}
	m.mount, m.mountRoot = mount, mountRoot
	own, err := ownCgroup(cgroupPath)
	if err != nil {
		m.reason = err.Error()
		return m, nil
	}
	rel, ok := relativeTo(own, mountRoot)
	if !ok {
		m.reason = fmt.Sprintf("own cgroup %s is outside the mounted hierarchy %s", own, mountRoot)
		return m, nil
	}
	root := filepath.Join(mount, rel, campaignPrefix+name)
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		m.reason = fmt.Sprintf("create campaign cgroup: %v", err)
		return m, nil
	}
	if err := unix.Access(filepath.Join(root, "cgroup.procs"), unix.W_OK); err != nil {
		m.reason = fmt.Sprintf("campaign cgroup %s not writable: %v", root, err)
		return m, nil
	}
	m.root = root
	m.rootRel = filepath.Join(mountRoot, rel, campaignPrefix+name)
	_, err = os.Stat(filepath.Join(root, "cgroup.kill"))
	m.hasKill = err == nil
	return m, nil
}

// Available reports whether leaves can be created.
func (m *Manager) Available() bool { return m != nil && m.root != "" }

// Root is the campaign root directory, or "" when not Available.
func (m *Manager) Root() string {
	if m == nil {
		return ""
	}
	return m.root
}

// Mode describes how processes are contained, for the log and the
// environment record.
func (m *Manager) Mode() string {
	switch {
	case m == nil:
		return "process groups and sessions only (no cgroup manager)"
	case !m.Available():
		return "process groups and sessions only: " + m.reason
	case m.hasKill:
		return "cgroup v2 at " + m.root + " (clone into cgroup, cgroup.kill)"
	default:
		return "cgroup v2 at " + m.root + " (clone into cgroup, no cgroup.kill: SIGKILL per pid)"
	}
}

// NewLeaf creates the leaf cgroup name under the campaign root. An existing
// empty leaf (left by a previous controller) is reused; one that still holds
// processes is refused.
func (m *Manager) NewLeaf(name string) (Leaf, error) {
	if !m.Available() {
		return Leaf{}, fmt.Errorf("create leaf cgroup %q: cgroups unavailable: %s", name, m.Mode())
	}
	if !validName.MatchString(name) {
		return Leaf{}, fmt.Errorf("create leaf cgroup %q: name must match %s", name, validName)
	}
	l := Leaf{Path: filepath.Join(m.root, name), rel: filepath.Join(m.rootRel, name)}
	if err := os.Mkdir(l.Path, 0o755); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return Leaf{}, fmt.Errorf("create leaf cgroup %s: %w", l.Path, err)
		}
		pop, err := l.Populated()
		if err != nil {
			return Leaf{}, fmt.Errorf("create leaf cgroup %s: %w", l.Path, err)
		}
		if pop {
			return Leaf{}, fmt.Errorf("create leaf cgroup %s: exists and holds processes", l.Path)
		}
	}
	return l, nil
}

// Cleanup removes the empty leaves and then the campaign root. It fails,
// naming them, when leaves still hold processes; it does not kill anything.
func (m *Manager) Cleanup(ctx context.Context) error {
	if !m.Available() {
		return nil
	}
	_, busy, err := m.pruneLeaves(ctx)
	if err != nil {
		return fmt.Errorf("clean up campaign cgroup %s: %w", m.root, err)
	}
	if len(busy) > 0 {
		return fmt.Errorf("clean up campaign cgroup %s: leaves still hold processes: %s", m.root, strings.Join(busy, ", "))
	}
	if err := rmdirTree(ctx, m.root); err != nil {
		return fmt.Errorf("clean up campaign cgroup %s: %w", m.root, err)
	}
	return nil
}

// PruneEmpty removes the leaves that hold no process (a controller that
// died left them) and keeps the campaign root; it returns the names it
// removed. A leaf that holds processes is left as it is.
func (m *Manager) PruneEmpty(ctx context.Context) ([]string, error) {
	if !m.Available() {
		return nil, nil
	}
	removed, _, err := m.pruneLeaves(ctx)
	if err != nil {
		return removed, fmt.Errorf("prune campaign cgroup %s: %w", m.root, err)
	}
	return removed, nil
}

// pruneLeaves removes the empty leaves under the root, returning those
// removed and those that still hold processes.
func (m *Manager) pruneLeaves(ctx context.Context) (removed, busy []string, err error) {
	ents, err := os.ReadDir(m.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		l := Leaf{Path: filepath.Join(m.root, e.Name()), rel: filepath.Join(m.rootRel, e.Name())}
		pop, err := l.Populated()
		if err != nil {
			return removed, busy, err
		}
		if pop {
			busy = append(busy, e.Name())
			continue
		}
		if err := rmdirTree(ctx, l.Path); err != nil {
			return removed, busy, err
		}
		removed = append(removed, e.Name())
	}
	return removed, busy, nil
}

// Leaf is one leaf cgroup. The zero Leaf means "no cgroup": its methods do
// nothing and report it empty.
type Leaf struct {
	// Path is the leaf's directory in the cgroup2 mount.
	Path string
	rel  string // the leaf as /proc/PID/cgroup writes it ("0::<rel>")
}

// IsZero reports whether l is the zero Leaf.
func (l Leaf) IsZero() bool { return l.Path == "" }

// OpenLeaf returns the Leaf at path, a directory recorded earlier (at
// resume). To keep a corrupt record from aiming cgroup.kill at someone
// else's cgroup, path must be absolute and clean, on a cgroup2 file system,
// and directly inside a campaign root (a directory named warden-*).
func OpenLeaf(path string) (Leaf, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return Leaf{}, fmt.Errorf("open leaf cgroup %q: not an absolute clean path", path)
	}
	if !strings.HasPrefix(filepath.Base(filepath.Dir(path)), campaignPrefix) {
		return Leaf{}, fmt.Errorf("open leaf cgroup %s: parent is not a %s* campaign root", path, campaignPrefix)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		return Leaf{}, fmt.Errorf("open leaf cgroup %s: %w", path, err)
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return Leaf{}, fmt.Errorf("open leaf cgroup %s: not on a cgroup2 file system", path)
	}
	mount, mountRoot, err := findCgroup2(selfMountInfo)
	if err != nil {
		return Leaf{}, fmt.Errorf("open leaf cgroup %s: %w", path, err)
	}
	rel, ok := relativeTo(path, mount)
	if !ok {
		return Leaf{}, fmt.Errorf("open leaf cgroup %s: not below the cgroup2 mount %s", path, mount)
	}
	return Leaf{Path: path, rel: filepath.Join(mountRoot, rel)}, nil
}

// Procs lists the pids in the leaf and in any cgroup below it (a process
// may create sub-cgroups of its own), in ascending order. Exited processes
// are not listed. A leaf that no longer exists is empty.
func (l Leaf) Procs() ([]int, error) {
	if l.IsZero() {
		return nil, nil
	}
	var pids []int
	err := filepath.WalkDir(l.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil // removed during the walk
		}
		if err != nil {
			return err
		}
		for f := range strings.FieldsSeq(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("parse %s/cgroup.procs: %w", p, err)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list leaf cgroup %s: %w", l.Path, err)
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// Populated reads cgroup.events: true while a live process is in the leaf or
// below it. A leaf that no longer exists is not populated.
func (l Leaf) Populated() (bool, error) {
	if l.IsZero() {
		return false, nil
	}
	f, err := os.Open(filepath.Join(l.Path, "cgroup.events"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s/cgroup.events: %w", l.Path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "populated "); ok {
			return v != "0", nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read %s/cgroup.events: %w", l.Path, err)
	}
	return false, fmt.Errorf("read %s/cgroup.events: no populated line", l.Path)
}

// Kill sends SIGKILL to every process in the leaf and below it by writing
// "1" to cgroup.kill, which the kernel applies atomically, forks in flight
// included. Where cgroup.kill does not exist (before Linux 5.14) it falls
// back to freezing the leaf (cgroup.freeze, 5.2+), sending SIGKILL to each
// listed pid, and thawing; without the freezer a process that forks between
// the listing and the kill can leave a child behind, which the caller's
// wait-until-empty then reports.
func (l Leaf) Kill() error {
	if l.IsZero() {
		return nil
	}
	err := writeCgroupFile(filepath.Join(l.Path, "cgroup.kill"), "1")
	if err == nil || errors.Is(err, fs.ErrNotExist) && !dirExists(l.Path) {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kill leaf cgroup %s: %w", l.Path, err)
	}
	return l.killEach()
}

// killEach is Kill's fallback for kernels without cgroup.kill.
func (l Leaf) killEach() error {
	freeze := filepath.Join(l.Path, "cgroup.freeze")
	frozen := writeCgroupFile(freeze, "1") == nil
	_, err := l.Signal(syscall.SIGKILL)
	if frozen {
		// SIGKILL ends frozen tasks in cgroup v2; thaw regardless so that
		// nothing stays frozen if the kill failed.
		if terr := writeCgroupFile(freeze, "0"); terr != nil && err == nil {
			err = terr
		}
	}
	if err != nil {
		return fmt.Errorf("kill leaf cgroup %s pid by pid: %w", l.Path, err)
	}
	return nil
}

// Signal sends sig to every process in the leaf and below it, one by one,
// and returns the pids signalled. Each pid is opened as a pidfd and its
// /proc/PID/cgroup checked before the signal goes through the pidfd, so a
// pid that left and was reused outside the leaf is never signalled.
func (l Leaf) Signal(sig syscall.Signal) ([]int, error) {
	pids, err := l.Procs()
	if err != nil {
		return nil, err
	}
	var sent []int
	for _, pid := range pids {
		ok, err := l.signalMember(pid, sig)
		if err != nil {
			return sent, fmt.Errorf("signal %s leaf cgroup %s: %w", signalName(sig), l.Path, err)
		}
		if ok {
			sent = append(sent, pid)
		}
	}
	return sent, nil
}

func (l Leaf) signalMember(pid int, sig syscall.Signal) (bool, error) {
	if pid <= 1 {
		return false, nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if errors.Is(err, unix.ENOSYS) {
		fd = -1
	} else if err != nil {
		return false, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	if fd >= 0 {
		defer unix.Close(fd)
	}
	in, err := l.holds(pid)
	if err != nil || !in {
		return false, err
	}
	if fd >= 0 {
		err = unix.PidfdSendSignal(fd, sig, nil, 0)
	} else {
		err = unix.Kill(pid, sig)
	}
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("signal pid %d: %w", pid, err)
	}
	return true, nil
}

// holds reports whether /proc/PID/cgroup places pid in the leaf or below it.
func (l Leaf) holds(pid int) (bool, error) {
	path, err := procCgroup(pid)
	if errors.Is(err, errNoProcess) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return path == l.rel || strings.HasPrefix(path, l.rel+"/"), nil
}

// Remove waits until the leaf holds no live process (polling cgroup.events
// for "populated 0"), then removes it and any cgroup below it. It gives up
// when ctx ends. Removing a leaf that does not exist succeeds.
func (l Leaf) Remove(ctx context.Context) error {
	if l.IsZero() {
		return nil
	}
	if err := pollUntil(ctx, func() (bool, error) {
		pop, err := l.Populated()
		return !pop, err
	}); err != nil {
		return fmt.Errorf("remove leaf cgroup %s: wait for populated 0: %w", l.Path, err)
	}
	if err := rmdirTree(ctx, l.Path); err != nil {
		return fmt.Errorf("remove leaf cgroup %s: %w", l.Path, err)
	}
	return nil
}

// pollUntil calls done until it returns true, an error, or ctx ends: at
// once, then after pollFirst, each wait twice the last up to pollInterval,
// so what is over within a millisecond (a cgroup emptied by a kill) is
// seen within about as long, and a long wait looks every pollInterval.
func pollUntil(ctx context.Context, done func() (bool, error)) error {
	for wait := pollFirst; ; wait = min(2*wait, pollInterval) {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// rmdirTree removes dir and the directories below it, deepest first. rmdir
// of a cgroup can fail with EBUSY for a moment after its last process
// exited; that is retried until ctx ends.
func rmdirTree(ctx context.Context, dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	slices.Reverse(dirs) // WalkDir lists parents before children
	for _, d := range dirs {
		err := pollUntil(ctx, func() (bool, error) {
			err := unix.Rmdir(d)
			switch {
			case err == nil, errors.Is(err, unix.ENOENT):
				return true, nil
			case errors.Is(err, unix.EBUSY):
				return false, nil
			default:
				return false, err
			}
		})
		if err != nil {
			return fmt.Errorf("rmdir %s: %w", d, err)
		}
	}
	return nil
}

func writeCgroupFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %s: %w", path, werr)
	}
	if cerr != nil {
		return fmt.Errorf("write %s: %w", path, cerr)
	}
	return nil
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// findCgroup2 returns the mount point and mounted root of the first cgroup2
// file system in a mountinfo file.
func findCgroup2(mountInfoPath string) (mount, root string, err error) {
	mounts, err := mountinfo.Read(mountInfoPath)
	if err != nil {
		return "", "", fmt.Errorf("find cgroup2 mount: %w", err)
	}
	for _, m := range mounts {
		if m.FSType == "cgroup2" {
			return m.Point, m.Root, nil
		}
	}
	return "", "", fmt.Errorf("find cgroup2 mount: none in %s", mountInfoPath)
}

// ownCgroup returns the cgroup v2 path ("0::<path>") of a /proc/PID/cgroup
// file.
func ownCgroup(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	if p, ok := parseCgroupFile(b); ok {
		return p, nil
	}
	return "", fmt.Errorf("read own cgroup: no cgroup v2 (0::) line in %s", path)
}

func parseCgroupFile(b []byte) (string, bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return strings.TrimSuffix(p, " (deleted)"), true
		}
	}
	return "", false
}

// procCgroup returns the cgroup v2 path of pid.
func procCgroup(pid int) (string, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return "", fmt.Errorf("read cgroup of pid %d: %w", pid, errNoProcess)
		}
		return "", fmt.Errorf("read cgroup of pid %d: %w", pid, err)
	}
	p, ok := parseCgroupFile(b)
	if !ok {
		return "", fmt.Errorf("read cgroup of pid %d: no cgroup v2 (0::) line", pid)
	}
	return p, nil
}

// relativeTo returns path relative to base ("/" when equal), if path is base
// or below it.
func relativeTo(path, base string) (string, bool) {
	path, base = filepath.Clean(path), filepath.Clean(base)
	if path == base {
		return "/", true
	}
	if base == "/" {
		return path, true
	}
	if rest, ok := strings.CutPrefix(path, base+"/"); ok {
		return "/" + rest, true
	}
	return "", false
}

// CgroupName returns a cgroup name for s that Manager and Leaf accept:
// s itself when it is valid, otherwise a readable prefix of its valid
// characters and a hash of the whole, so that any run id or campaign id
// maps to a distinct, valid name (long names used to turn containment
// off).
func CgroupName(s string) string {
	if validName.MatchString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 60 {
			break
		}
		if r < 128 && (r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		}
	}
	sum := sha256.Sum256([]byte(s))
	prefix := strings.TrimLeft(b.String(), "._-")
	if prefix == "" {
		prefix = "x"
	}
	return prefix + "-" + hex.EncodeToString(sum[:8])
}
