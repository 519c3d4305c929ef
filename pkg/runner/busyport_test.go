package runner_test

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/pkg/outcome"
	"warden/pkg/runner"
	"warden/pkg/state"
)

// TestBusyPortWaitsBeforeTheRerun (issue 39, friction 4): another
// process holds the slot's port. The attempt fails harness-error naming
// that process (its pid and command); the exact rerun waits for the port
// on the runner's clock (outcome.PortBackoff's first step here, when the
// holder let it go) instead of milliseconds later, and completes.
func TestBusyPortWaitsBeforeTheRerun(t *testing.T) {
	t.Parallel()
	c := newCampaign(t, protocol{patterns: 1, retries: 1})
	port := c.plan.Slots[0].Port
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var waits []time.Duration
	rn := c.newRunnerWith(func(cfg *runner.Config) {
		cfg.After = func(d time.Duration) <-chan time.Time {
			waits = append(waits, d)
			l.Close() // the holder lets it go while the rerun waits
			ch := make(chan time.Time, 1)
			ch <- time.Now()
			return ch
		}
	})
	c.start(rn).wait(t)
	c.wantAttempts("p1.saturation", failed(state.ReasonHarnessError), ok)
	g := c.gate("p1.saturation", 1, "port")
	want := fmt.Sprintf("port %d is in use: ", port)
	holder := fmt.Sprintf("; held by pid %d (", os.Getpid())
	if g.Verdict != state.VerdictFail || !strings.Contains(g.Detail, want) || !strings.Contains(g.Detail, holder) || g.Figures["holder_pid"] != float64(os.Getpid()) {
		t.Fatalf("attempt 1's port gate %+v, want %q...%q", g, want, holder)
	}
	if len(waits) != 1 || waits[0] != outcome.PortBackoff[0] {
		t.Fatalf("waits before the rerun %v, want the backoff's first step %v", waits, outcome.PortBackoff[0])
	}
	c.wantComplete()
	c.wantClean()
}
