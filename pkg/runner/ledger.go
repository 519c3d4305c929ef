package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/renameio/v2"

	"warden/pkg/provenance"
	"warden/protocols"
)

// ledgerEntry records one ledger command's run.
type ledgerEntry struct {
	Argv     []string `json:"argv"`
	Output   string   `json:"output"` // file under provenance/ledger
	ExitCode int      `json:"exit_code"`
	Error    string   `json:"error,omitempty"`
	SHA256   string   `json:"sha256"`
}

// runLedger runs the protocol's ledger commands (versions, pip freeze, git
// revision and diff) in the workdir and keeps their output under
// DIR/provenance/ledger. A command that fails is recorded, not fatal: the
// record says what could not be learned. It runs in the starting command,
// before the controller detaches, so its children are waited for by
// os/exec and never meet the daemon's reaper.
func runLedger(dir, workdir string, cmds []protocols.CommandSpec, vars map[string]string, log io.Writer) error {
	if len(cmds) == 0 {
		return nil
	}
	ldir := filepath.Join(dir, provenance.SubDir, "ledger")
	if err := os.MkdirAll(ldir, 0o755); err != nil {
		return err
	}
	var entries []ledgerEntry
	for i, c := range cmds {
		argv, err := expandSpec(c, vars)
		if err != nil {
			return fmt.Errorf("ledger command %d: %w", i+1, err)
		}
		name := fmt.Sprintf("%02d-%s.txt", i+1, filepath.Base(argv[0]))
		e := ledgerEntry{Argv: argv, Output: name}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = workdir
		out, err := cmd.CombinedOutput()
		cancel()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			e.ExitCode = ee.ExitCode()
		case err != nil:
			e.ExitCode, e.Error = -1, err.Error()
		}
		if e.ExitCode != 0 {
			fmt.Fprintf(log, "ledger: %s exited %d %s (recorded)\n", strings.Join(argv, " "), e.ExitCode, e.Error)
		}
		path := filepath.Join(ldir, name)
		if err := renameio.WriteFile(path, out, 0o444); err != nil {
			return err
		}
		if e.SHA256, err = provenance.HashFile(path); err != nil {
			return err
		}
		entries = append(entries, e)
	}
	return writeJSONFile(filepath.Join(ldir, "index.json"), entries, 0o444)
}

func expandSpec(c protocols.CommandSpec, vars map[string]string) ([]string, error) {
	if c.Shell != "" {
		s, err := protocols.Expand(c.Shell, vars)
		return []string{"/bin/sh", "-c", s}, err
	}
	out := make([]string, len(c.Argv))
	for i, a := range c.Argv {
		s, err := protocols.Expand(a, vars)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}
