package campaigndir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"warden/pkg/dirlayout"
	"warden/pkg/provenance"
)

// A campaign directory is trusted with commands: its settings name the
// workdir and the notification command, its plan every server, client
// and validator command line, its database the amendment a resume
// installs. Whoever can write any of them chooses what the next resume
// runs, and as whom: root's resume of a directory another user owns
// would run that user's commands as root. So every command that runs
// something recorded in a campaign directory (resume, the detached
// controller, readjudicate, a Slurm node's attempt) first proves that
// the directory and those files belong to the invoking user and that no
// one else may write them.

// NotOwnedError is the refusal of a campaign directory, or of a file in
// it, that the invoking user does not own or that others may write: it
// names the path, what is wrong and the command that fixes it.
type NotOwnedError struct {
	Path    string
	Problem string // "owned by uid 1001, not by uid 0 (who runs this)", "writable by its group"
	Fix     string
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("refused: %s is %s; a campaign directory runs the commands it records, so only the user who runs it may own or write it: %s", e.Path, e.Problem, e.Fix)
}

// trusted are the files of a campaign directory whose contents decide what
// it runs, relative to the directory: the settings (workdir, notify), the
// plan (every command), the state database (the amendment to install),
// the provenance index resume checks the inputs against.
var trusted = []string{dirlayout.SettingsFile, dirlayout.PlanFile, dirlayout.StateFile, filepath.Join(provenance.SubDir, provenance.SumFile)}

// CheckOwned proves that the campaign directory dir (absolute), its
// provenance directory with every amendment recorded under it, and the
// files in trusted belong to uid and that neither its group nor others
// may write them; a file among them that is missing is left to the
// caller's own checks. A symbolic link in their place is refused: its
// target's owner is not the directory's. The first problem is returned
// as a *NotOwnedError.
func CheckOwned(dir string, uid int) error {
	if err := checkOwnedPath(dir, dir, uid, true, os.Stat); err != nil {
		return err
	}
	for _, rel := range trusted {
		if err := checkOwnedPath(dir, filepath.Join(dir, rel), uid, false, os.Lstat); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	prov := filepath.Join(dir, provenance.SubDir)
	if err := checkOwnedPath(dir, prov, uid, true, os.Lstat); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	// an amendment's plan becomes plan.json at the install a resume
	// finishes: every file under amendments/ is as trusted as the plan
	amends := filepath.Join(prov, "amendments")
	err := filepath.WalkDir(amends, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == amends {
				return filepath.SkipDir
			}
			return err
		}
		return checkOwnedPath(dir, path, uid, d.IsDir(), os.Lstat)
	})
	if errors.Is(err, filepath.SkipDir) {
		return nil
	}
	return err
}

// checkOwnedPath checks one path of the campaign in dir: it exists as a
// directory (isDir) or a regular file, owned by uid, not writable by its
// group or others.
func checkOwnedPath(dir, path string, uid int, isDir bool, stat func(string) (fs.FileInfo, error)) error {
	fi, err := stat(path)
	if err != nil {
		return err
	}
	kind := "file"
	if isDir {
		kind = "directory"
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return &NotOwnedError{Path: path, Problem: "a symbolic link, not a " + kind,
			Fix: "replace it with the " + kind + " itself (or resume from a copy of the campaign made by you)"}
	case isDir != fi.IsDir() || (!isDir && !fi.Mode().IsRegular()):
		return &NotOwnedError{Path: path, Problem: fmt.Sprintf("a %s, not a %s", typeName(fi.Mode()), kind),
			Fix: "remove it and resume from a copy of the campaign made by you"}
	}
	if err := ownedBy(dir, path, fi, uid); err != nil {
		return err
	}
	if w := fi.Mode().Perm() & 0o022; w != 0 {
		who := "others"
		switch w {
		case 0o020:
			who = "its group"
		case 0o022:
			who = "its group and others"
		}
		return &NotOwnedError{Path: path, Problem: "writable by " + who + fmt.Sprintf(" (mode %04o)", fi.Mode().Perm()),
			Fix: fmt.Sprintf("check its contents (anyone could have changed them), then: chmod go-w %s", path)}
	}
	return nil
}

func typeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// checkOwner refuses path, of the campaign in dir, unless uid owns it.
func checkOwner(dir, path string, uid int) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return ownedBy(dir, path, fi, uid)
}

// ownedBy refuses fi, path's, unless uid owns it.
func ownedBy(dir, path string, fi fs.FileInfo, uid int) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return &NotOwnedError{Path: path, Problem: "of an owner that cannot be read", Fix: "keep the campaign on a file system that records owners"}
	}
	if int(st.Uid) != uid {
		return &NotOwnedError{Path: path, Problem: fmt.Sprintf("owned by uid %d, not by uid %d (who runs this)", st.Uid, uid),
			Fix: fmt.Sprintf("check its contents (%s: workdir and notify; %s: the commands), then run as uid %d, or take it over: chown -R %d %s",
				dirlayout.SettingsFile, dirlayout.PlanFile, st.Uid, uid, dir)}
	}
	return nil
}
