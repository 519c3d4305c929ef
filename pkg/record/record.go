package record

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/safefile"
	"warden/pkg/state"
)

// Report is one record of an attempt, as a node-side runner sends it to
// the controller: one JSON object per line on its standard output. The
// controller is the only writer of the state database; it applies each
// report as it arrives, as it would its own attempt's record.
type Report struct {
	Schema int `json:"schema"`
	// Kind is "step" (the Slurm step's identity, first), "proc" (a
	// process started) or "transition".
	Kind string           `json:"kind"`
	Step *state.SlurmStep `json:"step,omitempty"`
	Proc *state.Proc      `json:"proc,omitempty"`

	// A transition: the state entered, why, and what was noted since the
	// last one (processes started, exits, signals, the attempt's figures,
	// gate verdicts, ledger entries), all recorded in its transaction.
	To             state.AttemptState  `json:"to,omitempty"`
	Procs          []state.Proc        `json:"procs,omitempty"`
	Reason         state.Reason        `json:"reason,omitempty"`
	Message        string              `json:"message,omitempty"`
	Figures        map[string]float64  `json:"figures,omitempty"`
	Exits          []state.Exit        `json:"exits,omitempty"`
	Signals        []state.Signal      `json:"signals,omitempty"`
	AttemptFigures map[string]float64  `json:"attempt_figures,omitempty"`
	Gates          []state.GateVerdict `json:"gates,omitempty"`
	Ledger         []state.LedgerEntry `json:"ledger,omitempty"`
	// EarlyBackground: a background load whose client ended before its
	// target was done.
	EarlyBackground bool `json:"early_background,omitempty"`
	// Evidence are digests of the attempt's evidence files (Seal).
	Evidence []state.EvidenceFile `json:"evidence,omitempty"`
	// Through are the states passed through on the way to To (Pass),
	// each recorded with its event before To's.
	Through []state.Hop `json:"through,omitempty"`
	At      time.Time   `json:"at"`
}

// ReportSchema is the version of Report; the controller refuses a report
// of any other. 2: a transition carries the states passed through
// (Through).
const ReportSchema = 2

// Recorder is where an attempt's records go: the campaign's database when
// the controller runs the attempt itself, the controller's standard input
// when a node-side runner does.
type Recorder interface {
	Transition(run string, n int, rep Report) error
	ProcStarted(run string, n int, p state.Proc) error
	// Signals are the attempt's signals recorded so far.
	Signals(run string, n int) ([]state.Signal, error)
}

// Record is an attempt's record in the making: what is noted of it (exits,
// signals, gate verdicts, ledger entries, its own figures) is written with
// its next transition, in that transition's transaction, rather than one
// write each. The attempt lifecycle keeps one; so does an executor that
// runs the attempt elsewhere and records what it reports.
type Record struct {
	cfg   Config
	runID string
	n     int
	dir   string
	// diskFullSeen is the count of the controller's ENOSPC writes when the
	// attempt was created (Config.DiskFull).
	diskFullSeen int64

	// exits and signals not yet recorded: they are written with the next
	// transition, in its transaction, rather than one transaction each
	pendProcs []state.Proc
	pendExits []state.Exit
	pendSigs  []state.Signal
	// gate verdicts and ledger entries written with the next transition
	pendGates    []state.GateVerdict
	pendLedger   []state.LedgerEntry
	pendEvidence []state.EvidenceFile
	pendHops     []state.Hop
	state        state.AttemptState
	figures      map[string]float64 // the attempt's own figures, written with each transition
	// earlyBackground: this background load's client ended before its
	// target was done
	earlyBackground bool
}

// Config is where a Record goes and what it is written with.
type Config struct {
	// Recorder receives the transitions.
	Recorder Recorder
	// Dir is the campaign directory: gates.jsonl is appended beneath it.
	Dir string
	Log zerolog.Logger
	// Now is the clock (required).
	Now func() time.Time
	// DiskFull is the count of the controller's writes to the campaign
	// directory that the file system refused (no space, an I/O error, a
	// read-only remount), and the last such cause and error: a failure
	// while the count grew is the harness's (End). nil: none are counted.
	DiskFull func() (count int64, last string)
	// StorageFault hears of an evidence file whose fsync failed (Seal): a
	// fault of the campaign's storage, not of the run. nil: nobody
	// listens.
	StorageFault func(error)
	// FlushFiles writes the files derived from the database that are still
	// queued (the attempts' state.json) and asks the file system for a
	// write-back error that only another writer was told of
	// (state.Store.Sync), counting either in DiskFull: End calls it before
	// it classes a failure, so that a refused write queued while the
	// attempt lived, or a client's output lost at write-back, is counted.
	// nil: none are queued.
	FlushFiles func()
}

// New starts the record of attempt n of run, whose directory is dir.
func New(cfg Config, run string, n int, dir string) *Record {
	r := &Record{cfg: cfg, runID: run, n: n, dir: dir}
	r.diskFullSeen, _ = r.diskFull()
	return r
}

func (r *Record) diskFull() (int64, string) {
	if r.cfg.DiskFull == nil {
		return 0, ""
	}
	return r.cfg.DiskFull()
}

// Transition records the attempt's move to state to, with what was noted
// since the last one.
func (r *Record) Transition(to state.AttemptState, reason state.Reason, msg string, figures map[string]float64) error {
	err := r.cfg.Recorder.Transition(r.runID, r.n, Report{To: to, Reason: reason, Message: msg, Figures: figures, EarlyBackground: r.earlyBackground,
		Procs: r.pendProcs, Exits: r.pendExits, Signals: r.pendSigs, AttemptFigures: r.figures, Gates: r.pendGates, Ledger: r.pendLedger, Evidence: r.pendEvidence,
		Through: r.pendHops})
	if err != nil {
		return err
	}
	for _, h := range r.pendHops {
		r.logEntered(h.To, "", h.Message)
	}
	r.pendProcs, r.pendExits, r.pendSigs, r.pendGates, r.pendLedger, r.pendEvidence, r.pendHops = nil, nil, nil, nil, nil, nil, nil
	r.state = to
	r.logEntered(to, reason, msg)
	return nil
}

// logEntered logs the attempt's entry into state to.
func (r *Record) logEntered(to state.AttemptState, reason state.Reason, msg string) {
	r.cfg.Log.Info().Str("run", r.runID).Int("attempt", r.n).Str("to", string(to)).Str("reason", string(reason)).Msg(msg)
}

// Pass notes that the attempt is in the live state to from now, recorded
// with the next transition, in its transaction, with an event of its own
// (its time now, its figures): for a state that authorizes nothing the
// next transition does not (one commit, not two). State says to from
// here.
func (r *Record) Pass(to state.AttemptState, msg string, figures map[string]float64) {
	r.pendHops = append(r.pendHops, state.Hop{To: to, Message: msg, At: r.cfg.Now(), Figures: figures})
	r.state = to
}

// Gate notes a gate's verdict: gates.jsonl at once, the database with the
// attempt's next transition (in its transaction).
func (r *Record) Gate(v gates.Verdict) {
	if v.At.IsZero() {
		v.At = r.cfg.Now()
	}
	r.pendGates = append(r.pendGates, state.GateVerdict{Gate: v.Gate, Run: r.runID, Attempt: r.n, Verdict: v.Verdict, Figures: v.Figures, Detail: v.Detail, At: v.At})
	AppendJSONLine(r.cfg.Dir, filepath.Join(r.dir, "gates.jsonl"), v, r.cfg.Log)
}

// SetFigure notes one of the attempt's own figures.
func (r *Record) SetFigure(k string, v float64) {
	if r.figures == nil {
		r.figures = map[string]float64{}
	}
	r.figures[k] = v
}

// NoteCharge notes a charge of the attempt's GPU time on the ledger.
func (r *Record) NoteCharge(gpuSeconds float64, note string) {
	r.pendLedger = append(r.pendLedger, state.LedgerEntry{Kind: state.LedgerCharge, Run: r.runID, Attempt: r.n, GPUSeconds: gpuSeconds, Note: note})
}

// NoteSignals notes signals sent to the attempt's processes.
func (r *Record) NoteSignals(recs ...launch.SignalRecord) {
	r.pendSigs = append(r.pendSigs, ToSignals(recs)...)
}

// State is the state last recorded; SetState says where the attempt is
// when another writer recorded it.
func (r *Record) State() state.AttemptState      { return r.state }
func (r *Record) SetState(st state.AttemptState) { r.state = st }

// Key names the attempt in the campaign's registries.
func (r *Record) Key() string { return Key(r.runID, r.n) }

// End records the attempt's terminal state to, with figures, and returns
// the reason and detail recorded: a failure while the campaign directory
// ran out of space is the harness's (diskFullClass). An error is the
// transition's: the caller ends the attempt as a harness failure.
func (r *Record) End(to state.AttemptState, reason state.Reason, detail string, figures map[string]float64) (state.Reason, string, error) {
	if to == state.Failed {
		if r.cfg.FlushFiles != nil {
			r.cfg.FlushFiles()
		}
		// the workload may have met the storage's fault before any write
		// of the controller's did: a new write tells
		if err := safefile.ProbeWrite(r.dir); err != nil {
			r.storageFault(fmt.Errorf("the attempt's directory could not take a write when it failed: %w", err))
		}
		reason, detail = r.diskFullClass(reason, detail)
	}
	return reason, detail, r.Transition(to, reason, detail, figures)
}

// Figure is one of the attempt's own figures noted so far (0 when none).
func (r *Record) Figure(k string) float64 { return r.figures[k] }

// NoteProc notes a process started, to be recorded with the next
// transition: for one started just before it, with nothing acting on it
// in between (one transaction, not two).
func (r *Record) NoteProc(p state.Proc) { r.pendProcs = append(r.pendProcs, p) }

// NoteExit notes a process's exit.
func (r *Record) NoteExit(e state.Exit) { r.pendExits = append(r.pendExits, e) }

// PendingSignals is how many signals are noted and not yet recorded.
func (r *Record) PendingSignals() int { return len(r.pendSigs) }

// Signals are the attempt's signals: those recorded, then those noted for
// the next transition.
func (r *Record) Signals() ([]state.Signal, error) {
	recorded, err := r.cfg.Recorder.Signals(r.runID, r.n)
	if err != nil {
		return nil, err
	}
	return append(append([]state.Signal{}, recorded...), r.pendSigs...), nil
}

// SetEarlyBackground notes that this background load's client ended
// before its target was done; EarlyBackground says whether it did.
func (r *Record) SetEarlyBackground()   { r.earlyBackground = true }
func (r *Record) EarlyBackground() bool { return r.earlyBackground }

// diskFullClass classes a failure of an attempt as the harness's when the
// file system refused the controller's own writes to the campaign
// directory (no space: ENOSPC, EDQUOT, blocks or inodes; an I/O error; a
// read-only remount) while the attempt lived (seen is the count when it
// was created): what the workload did then (a client that could not
// create its result directory or got an I/O error, a server that could not
// write its log) says nothing about the workload. The original reason
// stays in the detail; the last refused write's cause ("ran out of space
// (ENOSPC): ...") comes first.
func (r *Record) diskFullClass(reason state.Reason, detail string) (state.Reason, string) {
	count, last := r.diskFull()
	if reason == state.ReasonHarnessError || count == r.diskFullSeen {
		return reason, detail
	}
	return state.ReasonHarnessError, fmt.Sprintf("the campaign directory %s while the attempt ran; its failure %s (%s) is the harness's, not the workload's", last, reason, detail)
}

// Key names attempt n of run in the campaign's registries.
func Key(run string, n int) string { return run + "\x00" + strconv.Itoa(n) }

// ToSignals converts the launcher's signal records to the store's.
func ToSignals(recs []launch.SignalRecord) []state.Signal {
	out := make([]state.Signal, len(recs))
	for i, r := range recs {
		out[i] = state.Signal{At: r.At, Role: r.Role, Target: r.Target, PID: r.PID, Signal: r.Signal}
	}
	return out
}

// AppendLine appends a line to one of the attempt's readable logs
// (commands.log, gates.jsonl). They are copies, for the reader of the
// attempt directory, of what the database records durably with the
// attempt's transitions (its commands, its gate verdicts), so they are not
// fsynced: a power cut may lose their last lines, never a record. The file
// is opened beneath the campaign directory dir, without following a link a
// child planted in its path.
func AppendLine(dir, path, line string, log zerolog.Logger) {
	rel, err := filepath.Rel(dir, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		log.Warn().Err(err).Str("file", path).Msg("append to the attempt's log")
		return
	}
	defer f.Close()
	f.WriteString(line + "\n")
}

// AppendJSONLine appends v, as one JSON line, as AppendLine does.
func AppendJSONLine(dir, path string, v any, log zerolog.Logger) {
	b, err := json.Marshal(v)
	if err == nil {
		AppendLine(dir, path, string(b), log)
	}
}

// ServerProc is the attempt's recorded server process; nil when none was
// recorded.
func ServerProc(a state.Attempt) *state.Proc {
	for i := range a.Procs {
		if a.Procs[i].Role == "server" {
			return &a.Procs[i]
		}
	}
	return nil
}

// Store writes a transition report to the campaign's database in one
// transaction: the state entered, and the exits, signals, figures, gate
// verdicts and ledger entries that came with it.
func Store(s *state.Store, run string, n int, rep Report) error {
	with := state.With{Gates: rep.Gates, Ledger: rep.Ledger, Through: rep.Through}
	_, err := s.TransitionWith(run, n, rep.To, rep.Reason, rep.Message, rep.Figures, func(at *state.Attempt) error {
		for _, p := range rep.Procs {
			addProc(at, p)
		}
		at.Exits = append(at.Exits, rep.Exits...)
		at.Signals = append(at.Signals, rep.Signals...)
		at.Evidence = append(at.Evidence, rep.Evidence...)
		if len(rep.AttemptFigures) > 0 && at.Figures == nil {
			at.Figures = map[string]float64{}
		}
		for k, v := range rep.AttemptFigures {
			at.Figures[k] = v
		}
		return nil
	}, with)
	return err
}

// StoreProc records a started process of the attempt, and its command.
func StoreProc(s *state.Store, run string, n int, p state.Proc) error {
	_, err := s.UpdateAttempt(run, n, func(at *state.Attempt) error {
		addProc(at, p)
		return nil
	})
	return err
}

// addProc adds a started process and its command to the attempt's record.
func addProc(at *state.Attempt, p state.Proc) {
	at.Procs = append(at.Procs, p)
	at.Commands = append(at.Commands, p.Argv)
}
