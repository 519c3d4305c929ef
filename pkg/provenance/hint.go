package provenance

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// MissingHint tells, for each recorded input that is missing (deleted or
// moved) or no longer a regular file, where its copy is: provenance keeps
// one copy of every public input, named by its recorded SHA-256, so the
// hint points at the exact content recorded for that path. A private
// input has no copy, and the hint says so. err is what Verify returned;
// the hint is "" or starts with "; ", to follow its summary.
func MissingHint(campaignDir string, err error) string {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var recorded []Entry // read at the first error that needs it
	lookup := func(path, sum string) Entry {
		if recorded == nil {
			recorded, _ = Read(campaignDir)
		}
		for _, r := range recorded {
			if r.Path == path {
				return r
			}
		}
		return Entry{Path: path, SHA256: sum}
	}
	var hints []string
	for _, e := range errs {
		var entry Entry
		var ce *ChangedError
		var nr *NotRegularError
		switch {
		case errors.As(e, &ce) && ce.Now == "":
			entry = lookup(ce.Path, ce.Recorded)
			entry.SHA256 = ce.Recorded // the hash the error names
		case errors.As(e, &nr):
			if entry = lookup(nr.Path, ""); entry.SHA256 == "" {
				continue // not a recorded path
			}
		default:
			continue
		}
		if cp, ok := CopyOf(campaignDir, entry); ok {
			hints = append(hints, fmt.Sprintf("restore %s from its copy %s", entry.Path, cp))
		} else if entry.Private {
			hints = append(hints, fmt.Sprintf("%s is private: hashed only, no copy kept (sha256 %s)", entry.Path, entry.SHA256))
		} else {
			hints = append(hints, fmt.Sprintf("no copy of %s (sha256 %s) is left in %s", entry.Path, entry.SHA256, filepath.Join(campaignDir, SubDir, Files)))
		}
	}
	if len(hints) == 0 {
		return ""
	}
	return "; " + strings.Join(hints, "; ")
}
