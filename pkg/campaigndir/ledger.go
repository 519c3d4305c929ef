package campaigndir

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/launch"
	"warden/pkg/provenance"
	"warden/protocols"
)

// LedgerTimeout bounds each ledger command; LedgerGrace is how long one
// that passed it has after SIGTERM before SIGKILL.
const (
	LedgerTimeout = 2 * time.Minute
	LedgerGrace   = 5 * time.Second
)

// LedgerEntry records one ledger command's run, in
// DIR/provenance/ledger/index.json.
type LedgerEntry struct {
	Argv     []string `json:"argv"`
	Output   string   `json:"output"` // file under provenance/ledger
	ExitCode int      `json:"exit_code"`
	Signal   string   `json:"signal,omitempty"`
	Error    string   `json:"error,omitempty"`
	SHA256   string   `json:"sha256"`
}

// RunLedger runs the protocol's ledger commands (versions, pip freeze, git
// revision and diff) in workdir, through the launcher like every other
// child, and keeps their output (standard output and error together)
// under DIR/provenance/ledger, read-only, with an index. A command that
// fails is recorded, not fatal: the record says what could not be
// learned; a line for it goes to log.
func RunLedger(l *launch.Launcher, dir, workdir string, cmds []protocols.CommandSpec, vars map[string]string, log io.Writer) error {
	if len(cmds) == 0 {
		return nil
	}
	ldir := filepath.Join(dir, provenance.SubDir, "ledger")
	if err := atomicfile.MkdirAll(ldir, 0o755); err != nil {
		return err
	}
	var entries []LedgerEntry
	for i, c := range cmds {
		argv, err := c.Expand(vars)
		if err != nil {
			return fmt.Errorf("ledger command %d: %w", i+1, err)
		}
		name := fmt.Sprintf("%02d-%s.txt", i+1, filepath.Base(argv[0]))
		e := LedgerEntry{Argv: argv, Output: name}
		path := filepath.Join(ldir, name)
		tmp := path + ".partial"
		os.Remove(tmp)
		p, err := l.Start(launch.Spec{
			Role: "ledger", Argv: argv, Dir: workdir, StdoutPath: tmp, StderrPath: tmp,
			Stop: launch.StopOptions{Grace: LedgerGrace, GroupGrace: LedgerGrace},
		})
		if err != nil {
			e.ExitCode, e.Error = -1, err.Error()
			if werr := os.WriteFile(tmp, nil, 0o444); werr != nil {
				return werr
			}
		} else {
			timer := time.NewTimer(LedgerTimeout)
			select {
			case <-p.Done():
			case <-timer.C:
				e.Error = fmt.Sprintf("ended after %s", LedgerTimeout)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				p.Shutdown(ctx)
				cancel()
				<-p.Done()
			}
			timer.Stop()
			ex := p.Exit()
			e.ExitCode, e.Signal = ex.Code, ex.Signal
		}
		if e.ExitCode != 0 || e.Signal != "" || e.Error != "" {
			fmt.Fprintf(log, "ledger: %s exited %d %s %s (recorded)\n", strings.Join(argv, " "), e.ExitCode, e.Signal, e.Error)
		}
		if err := os.Chmod(tmp, 0o444); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		if err := atomicfile.SyncDir(ldir); err != nil {
			return err
		}
		if e.SHA256, err = provenance.HashFile(path); err != nil {
			return err
		}
		entries = append(entries, e)
	}
	return atomicfile.WriteJSON(filepath.Join(ldir, "index.json"), entries, 0o444)
}
