package attempt_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"warden/pkg/attempt"
	"warden/pkg/endlog"
	"warden/pkg/launch"
)

// testReaper is the one reaper of the test process: it owns every child's
// exit status, so nothing else may wait for children once it runs (see
// launch.Reaper).
var testReaper *launch.Reaper

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if err := launch.BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testReaper = launch.NewReaper()
	if err := testReaper.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := testReaper.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

// A controller whose transition cannot be recorded (harness) ends the
// attempt's processes and writes when they were proven gone to the end
// log: after the server's exit, before harness returned.
func TestHarnessRecordsProvenEnd(t *testing.T) {
	dir := t.TempDir()
	before := time.Now()
	after, err := attempt.HarnessEndOf(&launch.Launcher{Reaper: testReaper}, dir, "p1.saturation", []string{"sleep", "1000"})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := endlog.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 1 {
		t.Fatalf("end records %v, want one", ends)
	}
	for _, at := range ends {
		if at.Before(before) || at.After(after) {
			t.Fatalf("end recorded at %v, not between the start %v and harness's return %v", at, before, after)
		}
	}
}
