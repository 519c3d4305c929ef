package attempt

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"warden/pkg/safefile"
)

// MkdirBeneath creates a directory under the campaign directory, and its
// parents, resolving beneath it: a link a child planted (its run directory
// replaced by a link out of the campaign) fails it instead of being
// followed.
func (c *Env) MkdirBeneath(dir string) error {
	rel, err := filepath.Rel(c.Dir, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%s is not under the campaign directory %s", dir, c.Dir)
	}
	root, err := os.OpenRoot(c.Dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return fmt.Errorf("create %s beneath %s: %w", rel, c.Dir, err)
	}
	return nil
}

// readChildFile reads a file a child wrote (safefile, at most safefile.ChildLimit
// bytes).
func readChildFile(path string) ([]byte, error) { return safefile.ReadFile(path, safefile.ChildLimit) }
