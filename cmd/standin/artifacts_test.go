package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"warden/pkg/contract"
)

// The server's seed-002 artifacts pass Warden's validators, and a break
// switch breaks them.
func TestServerWritesLayer1AndTraces(t *testing.T) {
	for _, tc := range []struct {
		name, l1break, l2break string
		l1, l2                 string // verdicts
	}{
		{name: "intact", l1: "pass", l2: "pass"},
		{name: "broken", l1break: "gap", l2break: "no-kernels", l1: "fail", l2: "fail"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			dir := t.TempDir()
			l1, traces := filepath.Join(dir, "opprof"), filepath.Join(dir, "traces")
			s := h.healthyServer("--load-s", "0", "--layer1-dir", l1, "--flush-interval-s", "0.05", "--steps-per-s", "200",
				"--traces-dir", traces, "--tp", "2", "--layer1-break", tc.l1break, "--layer2-break", tc.l2break)
			waitFor(t, "the sidecar", func() bool {
				_, err := os.Stat(filepath.Join(l1, "layer1.jsonl.footer.json"))
				return err == nil
			})
			// the phase file a load client would write: a clean segment,
			// then each window (its CLOCK_MONOTONIC bounds) and a recovery
			var phases []byte
			phase := func(name string, i int) {
				phases = fmt.Appendf(phases, `{"phase":%q,"t":%q,"mono_ns":%d,"index":%d}`+"\n", name, time.Now().UTC().Format(time.RFC3339Nano), monoNow(), i)
			}
			// the clean segment holds at least 30 steps of its own: the
			// windows' SMD is taken against it, and a segment of a few
			// steps (the stream already had 30 lines when it began, on a
			// loaded machine) is not the engine's mix of shapes
			lines := func() int {
				b, _ := os.ReadFile(filepath.Join(l1, "layer1.jsonl"))
				return bytes.Count(b, []byte("\n"))
			}
			phase("clean", 3)
			before := lines()
			waitFor(t, "clean steps", func() bool { return lines() >= before+30 })
			for w := range 2 {
				phase("profile", w+1)
				s.profileWindow(t)
				phase("recovery", w+1)
			}
			phase("done", 0)
			phasePath := filepath.Join(dir, "phases.jsonl")
			os.WriteFile(phasePath, phases, 0o644)
			if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if ws := s.wait(t); !ws.Exited() || ws.ExitStatus() != 0 {
				t.Fatalf("server ended with %v", ws)
			}
			// a clean close: the footer decides, no signal times needed
			r := contract.Layer1Files(filepath.Join(l1, "layer1.jsonl"), "", "", contract.DefaultLayer1)
			if r.Verdict != tc.l1 || (tc.l1 == "pass" && r.Figures["footer"] != 1) {
				t.Fatalf("layer1: %+v", r)
			}
			o := contract.DefaultLayer2()
			o.TP = 2
			o.Layer1, o.Phases = filepath.Join(l1, "layer1.jsonl"), phasePath
			if r := contract.Layer2Dir(traces, o); r.Verdict != tc.l2 || r.Figures["files"] != 4 {
				t.Fatalf("layer2: %+v", r)
			}
		})
	}
}
