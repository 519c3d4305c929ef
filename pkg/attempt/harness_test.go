package attempt_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"warden/internal/testbin"
	"warden/internal/testreaper"
	"warden/pkg/attempt"
	"warden/pkg/endlog"
	"warden/pkg/launch"
)

var (
	// testReaper is the one reaper of the test process: it owns every
	// child's exit status, so nothing else may wait for children once it
	// runs (see launch.Reaper).
	testReaper *launch.Reaper
	// standinBin is the stand-in server, built in TestMain.
	standinBin string
)

func TestMain(m *testing.M) {
	// built before the reaper starts: os/exec waits for the go command
	os.Exit(testbin.Run("attempt-test-", []string{"../../cmd/standin"}, func(dir string) int {
		standinBin = filepath.Join(dir, "standin")
		return testreaper.Run(m, &testReaper)
	}))
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
