package testports

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"warden/pkg/launch"
)

// Parallel callers in one process never get the same port.
func TestDistinctInProcess(t *testing.T) {
	var wg sync.WaitGroup
	got := make([][]int, 8)
	for i := range got {
		wg.Go(func() { got[i] = Free(t, 20) })
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, ps := range got {
		if len(ps) != 20 {
			t.Fatalf("asked for 20 ports, got %d", len(ps))
		}
		for _, p := range ps {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}

// childEnv names, in the child process, the ports its parent handed out.
const childEnv = "TESTPORTS_PARENT_PORTS"

// Another process cannot claim a port this one handed out, and can claim
// one it did not.
func TestClaimedAcrossProcesses(t *testing.T) {
	ports := Free(t, 3)
	var s []string
	for _, p := range ports {
		s = append(s, strconv.Itoa(p))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildClaims$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(s, ","))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, p := range ports {
		if !strings.Contains(string(out), "port "+strconv.Itoa(p)+" claimed: false") {
			t.Errorf("the child could claim port %d the parent holds:\n%s", p, out)
		}
	}
	if !strings.Contains(string(out), "fresh ports: 2") {
		t.Errorf("the child got no fresh ports of its own:\n%s", out)
	}
}

// TestChildClaims is the child of TestClaimedAcrossProcesses; it does
// nothing when run by itself.
func TestChildClaims(t *testing.T) {
	list := os.Getenv(childEnv)
	if list == "" {
		t.Skip("the child half of TestClaimedAcrossProcesses")
	}
	f, err := os.OpenFile(filepath.Join(os.TempDir(), LockFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range strings.Split(list, ",") {
		p, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := claim(f, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("port %d claimed: %v", p, ok)
	}
	t.Logf("fresh ports: %d", len(Free(t, 2)))
}

// The ports handed out are neither ephemeral nor ones a controller under
// test may choose for port: auto.
func TestOutsideServerPorts(t *testing.T) {
	elo, ehi := launch.EphemeralPorts()
	slo, shi := launch.ServerPorts()
	lo, hi := Range()
	if lo == slo && hi == shi {
		t.Skipf("no room outside the ephemeral range %d-%d and the server ports %d-%d on this host", elo, ehi, slo, shi-1)
	}
	for _, p := range Free(t, 50) {
		if p >= elo && p <= ehi {
			t.Errorf("port %d is in the ephemeral range %d-%d", p, elo, ehi)
		}
		if p >= slo && p < shi {
			t.Errorf("port %d is one port: auto may choose (%d-%d)", p, slo, shi-1)
		}
	}
}
