package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestValidateWaveformCommand: the waveform subcommand as an operator
// runs it: the verdict is the last line, exit 0 whatever it says (a sound
// run passes, a broken one fails, a missing one is an error), 2 for a
// usage error.
func TestValidateWaveformCommand(t *testing.T) {
	c := &campaign{t: t}
	write := func(offset int) string {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "requests"), 0o755)
		os.WriteFile(filepath.Join(dir, "result.json"), []byte(`{"modalities":["text","audio"],"audio_format":{"sample_rate":24000,"channels":1,"bits_per_sample":16},"files":{"requests":["requests/clean-1.jsonl"]}}`), 0o644)
		chunk := func(off int) string {
			return `{"samples":10,"header_samples":10,"sample_rate":24000,"channels":1,"bits_per_sample":16,"offset":` + strconv.Itoa(off) + `}`
		}
		os.WriteFile(filepath.Join(dir, "requests", "clean-1.jsonl"),
			[]byte(`{"id":"r0","class":"success","audio":{"chunks":[`+chunk(0)+`,`+chunk(offset)+`]}}`+"\n"), 0o644)
		return dir
	}
	for _, tc := range []struct {
		dir, verdict string
	}{{write(10), "pass"}, {write(12), "fail"}, {t.TempDir(), "error"}} {
		out, code := c.controller("validate", "waveform", "--result-dir", tc.dir, "-o", "json")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var v map[string]any
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil || code != 0 || v["verdict"] != tc.verdict || len(lines) != 1 {
			t.Fatalf("exit %d, output %s; want exit 0 and one line with %s", code, out, tc.verdict)
		}
	}
	for _, args := range [][]string{{"validate", "waveform"}, {"validate", "waveform", "--result-dir", t.TempDir(), "-o", "yaml"}} {
		if out, code := c.controller(args...); code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", args, code, out)
		}
	}
}
