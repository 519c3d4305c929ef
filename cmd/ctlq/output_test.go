package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/state"
)

// runIn runs ctlq in cwd and returns its stdout, stderr and exit code.
func runIn(t *testing.T, cwd string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(ctlqBin, args...)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "WARDEN_DIR=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// ctlq report -o json (or table) writes no file of that name: it is
// refused, exit 2, saying why.
func TestReportRefusesFormatAsFile(t *testing.T) {
	dir := campaignDir(t, state.CampaignComplete)
	for _, name := range []string{"json", "table"} {
		cwd := t.TempDir()
		out, errs, code := runIn(t, cwd, "report", "-d", dir, "-o", name)
		if code != exitOther || !strings.Contains(errs, "not a format") || out != "" {
			t.Fatalf("report -o %s: exit %d, stdout %q, stderr %q", name, code, out, errs)
		}
		if _, err := os.Stat(filepath.Join(cwd, name)); !os.IsNotExist(err) {
			t.Fatalf("report -o %s wrote a file named %s (%v)", name, name, err)
		}
	}
	cwd := t.TempDir()
	if _, errs, code := runIn(t, cwd, "report", "-d", dir, "-o", "./json"); code != 0 {
		t.Fatalf("report -o ./json: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(cwd, "json")); err != nil {
		t.Fatalf("report -o ./json wrote no file: %v", err)
	}
}

// Under -o json an error is a JSON document on stdout with its schema,
// the message and the exit code, which stays the command's own.
func TestJSONErrors(t *testing.T) {
	notCampaign := t.TempDir()
	dir := campaignDir(t, state.CampaignStopped)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"status", "-d", notCampaign, "-o", "json"}, exitOther, "is not a campaign directory"},
		{[]string{"show", "no.such.run", "-d", dir, "-o", "json"}, exitOther, `no run "no.such.run"`},
		{[]string{"runs", "-o", "json"}, exitOther, "no campaign directory"},
		{[]string{"events", "-d", notCampaign, "-o", "json"}, exitOther, "is not a campaign directory"},
	} {
		out, errs, code := runIn(t, t.TempDir(), tc.args...)
		var doc struct {
			Schema   int    `json:"schema"`
			Error    string `json:"error"`
			ExitCode int    `json:"exit_code"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || code != tc.code || doc.Schema != errorSchema ||
			doc.ExitCode != code || doc.Error == "" || !strings.Contains(doc.Error, tc.msg) || !strings.Contains(errs, doc.Error) {
			t.Errorf("%v: exit %d, %v, stdout %q, stderr %q", tc.args, code, err, out, errs)
		}
	}
	// without -o json the error stays text, stdout empty
	if out, errs, code := runIn(t, t.TempDir(), "status", "-d", notCampaign); out != "" || code != exitOther || !strings.Contains(errs, "not a campaign") {
		t.Fatalf("status text error: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
