package endlog_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"warden/pkg/endlog"
)

func recordErr(t *testing.T, dir string, next uint64, run string, n int, at time.Time) error {
	t.Helper()
	l, err := endlog.Open(dir)
	if err != nil {
		return err
	}
	defer l.Close()
	if next > 0 {
		l.SetNext(next)
	}
	return l.Record(run, n, at)
}

// The end log is allocated once, keeps its records across opens and, when
// full, reuses its oldest slot; a slot that is not a record makes it
// unreadable, and resume then charges up to the resume.
func TestLog(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(1_700_000_000, 123)
	if err := recordErr(t, dir, 0, "p1.saturation", 1, t0); err != nil {
		t.Fatal(err)
	}
	if err := recordErr(t, dir, 0, "p2.saturation", 2, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// the last slot, then the first again (p1's record is overwritten)
	if err := recordErr(t, dir, endlog.Slots-1, "p3.saturation", 1, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := recordErr(t, dir, 0, "p4.saturation", 1, t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	ends, err := endlog.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 3 {
		t.Fatalf("%d records, want 3 (p1's slot reused): %v", len(ends), ends)
	}
	fi, err := os.Stat(filepath.Join(dir, endlog.File))
	if err != nil || fi.Size() != 256*endlog.Slots {
		t.Fatalf("end log size %v %v", fi, err)
	}
	if err := os.WriteFile(filepath.Join(dir, endlog.File), []byte("not a record"+string(make([]byte, 244))), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := endlog.Read(dir); err == nil {
		t.Fatal("a damaged end log was read without an error")
	}
}
