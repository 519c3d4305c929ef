package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/loadgen"
)

// oneRequestManifest writes a manifest of one request (row, a JSON line)
// into a new directory and opens it; the directory serves as the result
// directory too.
func oneRequestManifest(t *testing.T, row string) (dir, path string, m *loadgen.Manifest) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(path, []byte(row+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := loadgen.OpenManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return dir, path, m
}

// parseRun parses loadgen run's flags, base then args, into the
// configuration config builds from them.
func parseRun(t *testing.T, m *loadgen.Manifest, base []string, args ...string) (loadgen.Config, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "run"}
	var f runFlags
	bindRunFlags(cmd, &f)
	if err := cmd.ParseFlags(append(append([]string{}, base...), args...)); err != nil {
		t.Fatal(err)
	}
	return config(cmd, f, m)
}

// refusedWith says whether err is a refusal (exit 2) that says want.
func refusedWith(err error, want string) bool {
	var ee *cli.ExitError
	return err != nil && strings.Contains(err.Error(), want) && errors.As(err, &ee) && ee.Code == 2
}
