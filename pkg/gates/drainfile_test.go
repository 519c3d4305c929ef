package gates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The drain's times come from drain.start_mono_ns and drain.end_mono_ns;
// a file that lacks them, has them out of order or is no JSON is refused
// with the reason.
func TestReadDrainTimes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, body, err string }{
		{"ok", `{"drain": {"start_mono_ns": 100, "end_mono_ns": 250}}`, ""},
		{"none", `{"clean": {}}`, "no drain object"},
		{"missing", `{"drain": {"start_mono_ns": 100}}`, "missing"},
		{"backwards", `{"drain": {"start_mono_ns": 300, "end_mono_ns": 250}}`, "before it starts"},
		{"garbage", `{"drain": `, "decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			start, end, err := ReadDrainTimes(path)
			if tc.err == "" {
				if err != nil || start != 100 || end != 250 {
					t.Fatalf("got %d, %d, %v; want 100, 250", start, end, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want an error saying %q", err, tc.err)
			}
		})
	}
	if _, _, err := ReadDrainTimes(filepath.Join(dir, "absent.json")); err == nil {
		t.Fatal("an absent file gave no error")
	}
}
