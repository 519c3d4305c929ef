package phasefile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The watcher sees a phase once its whole line is there, keeps the first
// time of each, counts the profile windows, takes the successes from Done,
// and passes over a line that does not decode or whose time does not
// parse.
func TestWatcherFollowsAppends(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "phases.jsonl")
	w := NewWatcher(path)
	defer w.Close()
	w.Poll() // no file yet: nothing seen, no error
	if !w.At(Warmup).IsZero() || w.Profiles() != 0 {
		t.Fatal("a phase seen before the file exists")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(s string) {
		t.Helper()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	at := func(s int) string { return t0.Add(time.Duration(s) * time.Second).Format(time.RFC3339Nano) }
	write(`{"phase":"warmup","t":"` + at(0) + `"}` + "\n" + `{"phase":"clean","t":"` + at(5))
	w.Poll()
	if !w.At(Warmup).Equal(t0) || !w.At(Clean).IsZero() {
		t.Fatalf("warmup %v clean %v: the incomplete clean line was taken, or warmup missed", w.At(Warmup), w.At(Clean))
	}
	write(`","index":1}` + "\n" + `{"phase":"profile","t":"` + at(9) + `","index":1}` + "\n" +
		`not json` + "\n" + `{"phase":"drain","t":"yesterday"}` + "\n" +
		`{"phase":"profile","t":"` + at(20) + `","index":2}` + "\n" + `{"phase":"clean","t":"` + at(30) + `","index":2}` + "\n")
	w.Poll()
	if !w.At(Clean).Equal(t0.Add(5*time.Second)) || !w.At(Profile).Equal(t0.Add(9*time.Second)) || w.Profiles() != 2 {
		t.Fatalf("clean %v profile %v profiles %d", w.At(Clean), w.At(Profile), w.Profiles())
	}
	if !w.At(Drain).IsZero() {
		t.Fatal("a drain line whose time does not parse was taken")
	}
	if _, ok := w.Successes(); ok {
		t.Fatal("successes before a done line")
	}
	write(`{"phase":"done","t":"` + at(40) + `","successes":17}` + "\n")
	w.Poll()
	if n, ok := w.Successes(); !ok || n != 17 {
		t.Fatalf("successes %d %v, want 17", n, ok)
	}
}
