// Package testbin builds the commands a test binary runs, once for the
// whole test binary, into a temporary directory that lives as long as its
// tests.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Run makes a temporary directory named after prefix, builds into it with
// `go build -o DIR/ args...` (args are the go command's flags and
// packages, as it takes them from the test's directory; each binary is
// named after its package's directory), calls tests with the directory
// and removes it once tests returns. It returns tests' exit code for
// os.Exit, or 1, said on stderr, when the directory cannot be made or
// the build fails; tests is not called then. Run starts the go command
// and waits for it, so a test binary that reaps its children starts its
// reaper inside tests.
func Run(prefix string, args []string, tests func(dir string) int) int {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	build := append([]string{"build", "-o", dir + string(filepath.Separator)}, args...)
	if out, err := exec.Command("go", build...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go %s: %v\n%s", strings.Join(build, " "), err, out)
		return 1
	}
	return tests(dir)
}
