package gates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each marker is found in the end of either output file; one beyond the
// searched tail is not; and docs/stop-conditions.md names exactly the
// markers the code looks for.
func TestServerOOM(t *testing.T) {
	t.Parallel()
	for _, m := range oomMarkers {
		for _, name := range []string{"server.err", "server.out"} {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, name), []byte("loading\n"+string(m)+": tried to allocate 2 GiB\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := ServerOOM(dir); got != string(m) {
				t.Errorf("%s holding %q: ServerOOM %q", name, m, got)
			}
		}
	}
	dir := t.TempDir()
	early := "CUDA out of memory\n" + strings.Repeat("x", oomTail+1)
	if err := os.WriteFile(filepath.Join(dir, "server.err"), []byte(early), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ServerOOM(dir); got != "" {
		t.Errorf("a marker before the last %d bytes was found: %q", oomTail, got)
	}
	doc, err := os.ReadFile("../../docs/stop-conditions.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "| 2 | GPU OOM |") {
			row = l
		}
	}
	if n := strings.Count(row, "`") / 2; n-1 != len(oomMarkers) { // the markers and the reason `oom`
		t.Errorf("docs/stop-conditions.md's GPU OOM row names %d markers, the code has %d: %s", n-1, len(oomMarkers), row)
	}
	for _, m := range oomMarkers {
		if !strings.Contains(row, "`"+string(m)+"`") {
			t.Errorf("docs/stop-conditions.md's GPU OOM row does not name %q", m)
		}
	}
}
