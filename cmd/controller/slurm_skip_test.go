package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// slurmSkipped counts the tests requireSlurm skipped for want of a
// cluster. A plain go test shows nothing of a passing package's output,
// so the count is also appended to the file $WARDEN_SLURM_SKIP_NOTE names
// (make test prints it after the run).
var slurmSkipped atomic.Int64

// noteSlurmSkips reports n skipped Slurm tests on stderr and, when path is
// set, appends the same line to path.
func noteSlurmSkips(n int64, path string) error {
	if n == 0 {
		return nil
	}
	line := fmt.Sprintf("warden/cmd/controller: %d Slurm test(s) skipped: no Slurm cluster with nodes n1 and n2 answers and WARDEN_SLURM is not 1 (scripts/slurm-cluster.sh up makes one)\n", n)
	fmt.Fprint(os.Stderr, line)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line)
	return errors.Join(err, f.Close())
}

// A skip is counted, and the note names the count; none is written when
// nothing was skipped.
//
// Serial: it sets PATH and WARDEN_SLURM for the process (t.Setenv) and
// takes its probe's count back from the process-wide skip counter.
func TestSkippedSlurmNote(t *testing.T) {
	path := filepath.Join(t.TempDir(), "note")
	if err := noteSlurmSkips(0, path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a note with nothing skipped (%v)", err)
	}
	if err := noteSlurmSkips(3, path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "3 Slurm test(s) skipped") {
		t.Fatalf("note %q, %v", b, err)
	}
	// requireSlurm where sinfo fails and no cluster is expected: a skip,
	// counted (the probe's count taken back after, so that it is not
	// reported as a skipped test)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "sinfo"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("WARDEN_SLURM", "")
	before := slurmSkipped.Load()
	skipped := false
	t.Run("probe", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		requireSlurm(t)
	})
	after := slurmSkipped.Load()
	slurmSkipped.Add(before - after)
	if !skipped || after != before+1 {
		t.Fatalf("requireSlurm without a cluster: skipped %v, counted %d", skipped, after-before)
	}
}
