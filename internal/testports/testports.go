// Package testports hands tests loopback ports for the servers they
// start, from launch.ServerPorts (outside the kernel's ephemeral range, so
// that no outgoing connection can be given one between the test's choice
// and the server's bind).
package testports

import (
	"testing"

	"warden/pkg/launch"
)

// Free returns n distinct loopback ports free now.
func Free(t testing.TB, n int) []int {
	t.Helper()
	used := map[int]bool{}
	var ports []int
	for range n {
		p, err := launch.FreePort(used)
		if err != nil {
			t.Fatal(err)
		}
		used[p] = true
		ports = append(ports, p)
	}
	return ports
}
