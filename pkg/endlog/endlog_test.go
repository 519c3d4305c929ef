package endlog_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// Attempts end at once: every record of concurrent Records keeps its own
// sequence number and slot, so a later open's next record reuses none.
func TestConcurrentRecords(t *testing.T) {
	dir := t.TempDir()
	l, err := endlog.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 16
	t0 := time.Unix(1_700_000_000, 0)
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				errs <- l.Record(fmt.Sprintf("p%d.saturation", w), i+1, t0.Add(time.Duration(i)*time.Second))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	raw, err := os.ReadFile(filepath.Join(dir, endlog.File))
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string]bool{}
	for i := 0; i+256 <= len(raw); i += 256 {
		if f := strings.Fields(string(raw[i : i+256])); len(f) == 4 {
			if seqs[f[0]] {
				t.Fatalf("sequence %s written twice", f[0])
			}
			seqs[f[0]] = true
		}
	}
	if len(seqs) != writers*each {
		t.Fatalf("%d records, want %d", len(seqs), writers*each)
	}
	// a later open appends after them all
	if err := recordErr(t, dir, 0, "late.saturation", 1, t0); err != nil {
		t.Fatal(err)
	}
	ends, err := endlog.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != writers*each+1 {
		t.Fatalf("%d attempts with an end after one more open, want %d", len(ends), writers*each+1)
	}
}
