package launch

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestShutdownUsesSpecStop checks that Proc.Shutdown takes its grace
// periods from Spec.Stop. The child ignores SIGTERM, so every step runs:
// the order and kinds of the signals are asserted, and each grace only as
// a lower bound (a loaded machine makes waits longer, never shorter).
func TestShutdownUsesSpecStop(t *testing.T) {
	const g = 200 * time.Millisecond
	for _, tc := range []struct {
		name string
		stop StopOptions
	}{
		{"zero", StopOptions{}},
		{"grace", StopOptions{Grace: g}},
		{"grace and group grace", StopOptions{Grace: g, GroupGrace: g}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLauncher(t, false)
			dir := t.TempDir()
			spec := childSpec(t, "ignoreterm", dir)
			spec.Stop = tc.stop
			p := start(t, l, spec)
			if p.Stop != tc.stop {
				t.Errorf("Proc.Stop = %+v, want the spec's %+v", p.Stop, tc.stop)
			}
			waitReady(t, filepath.Join(dir, "ready"))
			waitReady(t, filepath.Join(dir, "ready.g"))

			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			recs, err := p.Shutdown(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.Target+" "+r.Signal)
			}
			want := []string{TargetPID + " SIGTERM", TargetGroup + " SIGTERM", TargetGroup + " SIGKILL"}
			if !slices.Equal(got, want) {
				t.Fatalf("signal sequence %q, want %q", got, want)
			}
			if recs[0].PID != p.PID || recs[1].PID != p.PID || recs[2].PID != p.PID {
				t.Errorf("records %+v do not all name pid/pgid %d", recs, p.PID)
			}
			if d := recs[1].At.Sub(recs[0].At); d < tc.stop.Grace {
				t.Errorf("group SIGTERM %v after the leader's, want at least Grace %v", d, tc.stop.Grace)
			}
			if d := recs[2].At.Sub(recs[1].At); d < tc.stop.GroupGrace {
				t.Errorf("SIGKILL %v after the group SIGTERM, want at least GroupGrace %v", d, tc.stop.GroupGrace)
			}
			if st := p.Exit(); st.Signal != "SIGKILL" {
				t.Errorf("leader exit %+v, want SIGKILL", st)
			}
		})
	}
}
