package gates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDisk(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	now := time.Now()
	cases := []struct {
		name             string
		free, artifacts  uint64
		minFree, maxArts *float64
		pass             bool
		detail           string
	}{
		{"no limits", 1, 1 << 40, nil, nil, true, ""},
		{"enough free", 200e9, 1e9, f(100), f(8), true, ""},
		{"too little free", 99e9, 1e9, f(100), f(8), false, "99.0 GB free on the campaign's file system, below the 100.0 GB minimum"},
		{"artifacts over", 200e9, 8.5e9, f(100), f(8), false, "the public artifacts (the runs and the provenance copies) hold 8.500 GB, more than the 8 GB limit"},
		{"artifacts at the limit", 200e9, 8e9, f(100), f(8), true, ""},
	}
	for _, tc := range cases {
		v := Disk(tc.free, tc.artifacts, tc.minFree, tc.maxArts, now)
		if v.Passed() != tc.pass || !strings.Contains(v.Detail, tc.detail) {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
}

// ArtifactBytes sums the regular files under each directory apart: a
// sparse copy counts its apparent size, a link is not followed, a missing
// directory holds nothing.
func TestArtifactBytes(t *testing.T) {
	runs, prov := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(runs, "r1", "a1"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(runs, "r1", "a1", "x"), make([]byte, 1000), 0o644)
	f, err := os.Create(filepath.Join(prov, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(3 << 20)
	f.Close()
	os.Symlink("/etc/passwd", filepath.Join(prov, "link"))
	got := ArtifactBytes(runs, prov, filepath.Join(prov, "absent"))
	if got[0] != 1000 || got[1] != 3<<20 || got[2] != 0 || Total(got) != 1000+3<<20 {
		t.Fatalf("sizes %v", got)
	}
}
