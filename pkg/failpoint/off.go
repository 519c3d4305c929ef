//go:build !failpoints

package failpoint

// Enabled reports whether this is a failpoints build.
const Enabled = false

// Hit does nothing outside a failpoints build.
func Hit(string) {}
