package record_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/record"
	"warden/pkg/state"
)

// memory keeps what a Record wrote, as the campaign's database would; err,
// when set, refuses every write.
type memory struct {
	reports []record.Report
	signals []state.Signal
	err     error
}

func (m *memory) Transition(_ string, _ int, rep record.Report) error {
	if m.err != nil {
		return m.err
	}
	m.reports = append(m.reports, rep)
	m.signals = append(m.signals, rep.Signals...)
	return nil
}

func (m *memory) ProcStarted(string, int, state.Proc) error { return m.err }

func (m *memory) Signals(string, int) ([]state.Signal, error) {
	return append([]state.Signal(nil), m.signals...), m.err
}

func newRecord(t *testing.T, m *memory, diskFull *int64) (*record.Record, string) {
	t.Helper()
	dir := t.TempDir()
	adir := filepath.Join(dir, "runs", "p1", "a1")
	if err := os.MkdirAll(adir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := record.Config{Recorder: m, Dir: dir, Log: zerolog.Nop(), Now: time.Now}
	if diskFull != nil {
		cfg.DiskFull = func() (int64, string) {
			return *diskFull, "ran out of space (ENOSPC): write state.db: no space left on device"
		}
	}
	return record.New(cfg, "p1", 1, adir), adir
}

// What is noted goes with the next transition, once; the attempt's own
// figures go with every one.
func TestTransitionCarriesTheNotesOnce(t *testing.T) {
	m := &memory{}
	r, adir := newRecord(t, m, nil)
	r.NoteProc(state.Proc{Role: "client", PID: 11, Argv: []string{"client"}})
	r.NoteExit(state.Exit{Role: "server", PID: 10})
	r.NoteSignals(launch.SignalRecord{Role: "server", PID: 10, Signal: "SIGTERM"})
	r.Gate(gates.Verdict{Gate: "cleanup", Verdict: gates.Pass})
	r.NoteCharge(12.5, "server start to cleanup")
	r.SetFigure("gpu_seconds", 12.5)
	if err := r.Transition(state.Cleanup, "", "proving cleanup", nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Transition(state.Validating, "", "validating", nil); err != nil {
		t.Fatal(err)
	}
	first, second := m.reports[0], m.reports[1]
	if len(first.Procs) != 1 || len(first.Exits) != 1 || len(first.Signals) != 1 || len(first.Gates) != 1 || len(first.Ledger) != 1 || first.Ledger[0].Kind != state.LedgerCharge {
		t.Fatalf("first transition %+v: want the process, exit, signal, gate and charge noted", first)
	}
	if len(second.Procs)+len(second.Exits)+len(second.Signals)+len(second.Gates)+len(second.Ledger) != 0 {
		t.Fatalf("second transition %+v carries notes written already", second)
	}
	if second.AttemptFigures["gpu_seconds"] != 12.5 || r.State() != state.Validating || r.PendingSignals() != 0 {
		t.Fatalf("figures %v, state %s, pending signals %d", second.AttemptFigures, r.State(), r.PendingSignals())
	}
	b, err := os.ReadFile(filepath.Join(adir, "gates.jsonl"))
	if err != nil || !strings.Contains(string(b), `"cleanup"`) {
		t.Fatalf("gates.jsonl %q, %v: want the gate's line", b, err)
	}
}

// A state passed through goes with the next transition, once, and is
// where the attempt is until then.
func TestPassGoesWithTheNextTransition(t *testing.T) {
	m := &memory{}
	r, _ := newRecord(t, m, nil)
	before := time.Now()
	r.Pass(state.Reserved, "reserved", map[string]float64{"x": 1})
	after := time.Now()
	if r.State() != state.Reserved || len(m.reports) != 0 {
		t.Fatalf("after Pass: state %s, %d reports written", r.State(), len(m.reports))
	}
	for _, to := range []state.AttemptState{state.Preflight, state.Starting} {
		if err := r.Transition(to, "", string(to), nil); err != nil {
			t.Fatal(err)
		}
	}
	if th := m.reports[0].Through; len(th) != 1 || th[0].To != state.Reserved || th[0].Message != "reserved" || th[0].Figures["x"] != 1 ||
		th[0].At.Before(before) || th[0].At.After(after) {
		t.Fatalf("the first transition carries %+v, want the state passed through, with its figures and the time it was passed", th)
	}
	if th := m.reports[1].Through; len(th) != 0 {
		t.Fatalf("the second transition carries %+v again", th)
	}
}

// A transition that cannot be written keeps the notes for the next one and
// the state where it was.
func TestRefusedTransitionKeepsTheNotes(t *testing.T) {
	m := &memory{err: errors.New("no space left on device")}
	r, _ := newRecord(t, m, nil)
	r.NoteSignals(launch.SignalRecord{Role: "client", PID: 11, Signal: "SIGKILL"})
	if err := r.Transition(state.Stopping, "", "stopping", nil); err == nil {
		t.Fatal("a refused transition returned no error")
	}
	if r.PendingSignals() != 1 || r.State() != "" {
		t.Fatalf("pending signals %d, state %q: want the signal kept and no state", r.PendingSignals(), r.State())
	}
	if _, err := r.Signals(); err == nil {
		t.Fatal("Signals hid the recorder's error")
	}
	m.err = nil
	if err := r.Transition(state.Stopping, "", "stopping", nil); err != nil || len(m.reports[0].Signals) != 1 {
		t.Fatalf("retry: %v, %+v", err, m.reports)
	}
}

// Signals are those recorded, then those noted for the next transition.
func TestSignalsRecordedThenPending(t *testing.T) {
	m := &memory{}
	r, _ := newRecord(t, m, nil)
	r.NoteSignals(launch.SignalRecord{Role: "server", Signal: "SIGTERM"})
	if err := r.Transition(state.Stopping, "", "stopping", nil); err != nil {
		t.Fatal(err)
	}
	r.NoteSignals(launch.SignalRecord{Role: "server", Signal: "SIGKILL"})
	sigs, err := r.Signals()
	if err != nil || len(sigs) != 2 || sigs[0].Signal != "SIGTERM" || sigs[1].Signal != "SIGKILL" {
		t.Fatalf("signals %+v, %v", sigs, err)
	}
}

// A failure while the campaign directory ran out of space is the
// harness's; one without, or an end that is not a failure, keeps its
// reason.
func TestEndClassesAFailureInAFullDirectory(t *testing.T) {
	var full int64
	m := &memory{}
	r, _ := newRecord(t, m, &full)
	reason, detail, err := r.End(state.Failed, state.ReasonClientFailed, "client exit code 1", nil)
	if err != nil || reason != state.ReasonClientFailed || detail != "client exit code 1" {
		t.Fatalf("without a full disk: %s %q %v", reason, detail, err)
	}
	r, _ = newRecord(t, m, &full)
	full++
	reason, detail, err = r.End(state.Failed, state.ReasonClientFailed, "client exit code 1", nil)
	if err != nil || reason != state.ReasonHarnessError || !strings.Contains(detail, "client-failed") || !strings.Contains(detail, "no space left") {
		t.Fatalf("with a full disk: %s %q %v", reason, detail, err)
	}
	r, _ = newRecord(t, m, &full)
	full++
	if reason, _, _ := r.End(state.Quarantined, state.ReasonDrainQuarantine, "drain", nil); reason != state.ReasonDrainQuarantine {
		t.Fatalf("a quarantine became %s", reason)
	}
}

// A refused write still queued when the attempt fails (a state.json
// written in the background) is counted before the failure is classed:
// End flushes the queued files first.
func TestEndFlushesQueuedFilesBeforeClassing(t *testing.T) {
	var full int64
	m := &memory{}
	dir := t.TempDir()
	cfg := record.Config{Recorder: m, Dir: dir, Log: zerolog.Nop(), Now: time.Now,
		DiskFull: func() (int64, string) {
			return full, "ran out of space (ENOSPC): write state.json: no space left on device"
		},
		FlushFiles: func() { full++ }, // the queued write is refused as it is flushed
	}
	r := record.New(cfg, "p1", 1, filepath.Join(dir, "a1"))
	reason, detail, err := r.End(state.Failed, state.ReasonClientFailed, "client exit code 1", nil)
	if err != nil || reason != state.ReasonHarnessError || !strings.Contains(detail, "client-failed") {
		t.Fatalf("a failure with a refused write queued: %s %q %v, want harness-error", reason, detail, err)
	}
	if reason, _, _ := r.End(state.Complete, "", "", nil); reason != "" || full != 1 {
		t.Fatalf("an end that is no failure flushed (%d flushes) or got reason %q", full, reason)
	}
}

// The readable logs are appended beneath the campaign directory only, and
// never through a link a child planted.
func TestAppendLineStaysBeneath(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	record.AppendLine(dir, filepath.Join(outside, "x.log"), "escaped", zerolog.Nop())
	if _, err := os.Stat(filepath.Join(outside, "x.log")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a path outside the campaign directory was written: %v", err)
	}
	target := filepath.Join(outside, "target")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "commands.log")); err != nil {
		t.Fatal(err)
	}
	record.AppendLine(dir, filepath.Join(dir, "commands.log"), "through a link", zerolog.Nop())
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Fatalf("the link was followed: %q", b)
	}
	record.AppendJSONLine(dir, filepath.Join(dir, "gates.jsonl"), map[string]string{"gate": "drain"}, zerolog.Nop())
	if b, err := os.ReadFile(filepath.Join(dir, "gates.jsonl")); err != nil || string(b) != "{\"gate\":\"drain\"}\n" {
		t.Fatalf("gates.jsonl %q, %v", b, err)
	}
}

// TestStoreWritesTheReport: one transition report lands in the store with
// what came with it, and a started process with its command.
func TestStoreWritesTheReport(t *testing.T) {
	s, err := state.Open(filepath.Join(t.TempDir(), "state.db"), state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateCampaign(state.Campaign{ID: "c", State: state.CampaignRunning, BudgetCapGPUHours: 1}, []state.Run{{ID: "r", ExpectedS: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewAttempt("r", "", nil); err != nil {
		t.Fatal(err)
	}
	p := state.Proc{Role: "server", PID: 7, Argv: []string{"srv", "--x"}}
	if err := record.StoreProc(s, "r", 1, p); err != nil {
		t.Fatal(err)
	}
	rep := record.Report{To: state.Reserved, Message: "reserved", AttemptFigures: map[string]float64{"gpu_seconds": 2},
		Procs: []state.Proc{{Role: "client", PID: 8, Argv: []string{"cli", "--y"}}}, Exits: []state.Exit{{Role: "client", PID: 8, Code: 0}}}
	if err := record.Store(s, "r", 1, rep); err != nil {
		t.Fatal(err)
	}
	a, err := s.Attempt("r", 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != state.Reserved || a.Figures["gpu_seconds"] != 2 || len(a.Exits) != 1 || len(a.Procs) != 2 || a.Procs[1].PID != 8 ||
		len(a.Commands) != 2 || a.Commands[0][1] != "--x" || a.Commands[1][1] != "--y" {
		t.Fatalf("attempt %+v", a)
	}
}

// Seal notes a digest of each evidence file there is, for the next
// transition: the processes' output and every regular file of the
// client's result directory; a planted FIFO or link, or a file a child
// made unreadable, is skipped.
func TestSealNotesTheEvidence(t *testing.T) {
	m := &memory{}
	r, adir := newRecord(t, m, nil)
	if err := os.MkdirAll(filepath.Join(adir, "client", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"client.out": "ok\n", "client/result.json": "{}", "client/sub/events.jsonl": "{}\n"} {
		if err := os.WriteFile(filepath.Join(adir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(adir, "client", "planted.fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(adir, "client.err")); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != 0 { // root reads it anyway
		if err := os.WriteFile(filepath.Join(adir, "server.out"), []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Seal(); err != nil {
		t.Fatal(err)
	}
	if err := r.Transition(state.Cleanup, "", "proving cleanup", nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range m.reports[0].Evidence {
		got = append(got, e.Path)
	}
	want := []string{"client.out", "client/result.json", "client/sub/events.jsonl"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("sealed %v, want %v", got, want)
	}
	a := state.Attempt{Dir: adir, Evidence: m.reports[0].Evidence}
	if errs := a.DamagedEvidence(); len(errs) != 0 {
		t.Fatalf("fresh evidence damaged: %v", errs)
	}
}

// A child that leaves a socket where its output file or its result
// directory should be does not make the evidence a storage fault: there
// is nothing to seal, as for a FIFO.
func TestSealPassesOverSockets(t *testing.T) {
	m := &memory{}
	r, adir := newRecord(t, m, nil)
	for _, name := range []string{"client.err", "client"} {
		l, err := net.Listen("unix", filepath.Join(adir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	if err := os.WriteFile(filepath.Join(adir, "client.out"), []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Seal(); err != nil {
		t.Fatalf("Seal with sockets planted: %v", err)
	}
	if err := r.Transition(state.Cleanup, "", "proving cleanup", nil); err != nil {
		t.Fatal(err)
	}
	if ev := m.reports[0].Evidence; len(ev) != 1 || ev[0].Path != "client.out" {
		t.Fatalf("sealed %+v, want client.out alone", ev)
	}
}
