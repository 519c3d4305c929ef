//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether this is a failpoints build.
const Enabled = true

var (
	mu   sync.Mutex // guards hits
	hits = map[string]int{}
)

// Hit kills the process with SIGKILL when name is the armed failpoint
// (and this is the armed hit).
func Hit(name string) {
	if !known(name) {
		panic(fmt.Sprintf("failpoint %q is not in failpoint.Names", name))
	}
	want, ok := os.LookupEnv(EnvVar)
	if !ok {
		return
	}
	target, nth := want, 1
	if i := strings.LastIndexByte(want, '@'); i >= 0 {
		if n, err := strconv.Atoi(want[i+1:]); err == nil {
			target, nth = want[:i], n
		}
	}
	if target != name {
		return
	}
	mu.Lock()
	hits[name]++
	fire := hits[name] == nth
	mu.Unlock()
	if fire {
		fmt.Fprintf(os.Stderr, "failpoint %s: killing the process\n", name)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; wait for it
	}
}
