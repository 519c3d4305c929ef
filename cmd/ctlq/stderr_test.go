package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/state"
	"warden/pkg/views"
)

// failedClient adds a failed attempt of a.moderate whose client exited 2
// and whose server was killed, with its directory under runs/, and
// returns the campaign and the attempt directory.
func failedClient(t *testing.T) (dir, adir string) {
	t.Helper()
	dir = campaignDir(t, state.CampaignStopped)
	adir = filepath.Join(dir, "runs", "a.moderate", "a1")
	if err := os.MkdirAll(adir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.NewAttempt("a.moderate", adir, nil); err != nil {
		t.Fatal(err)
	}
	for _, to := range []state.AttemptState{state.Reserved, state.Preflight} {
		if _, err := s.Transition("a.moderate", 1, to, "", "", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	exits := func(a *state.Attempt) error {
		a.Exits = append(a.Exits, state.Exit{Role: "client", PID: 10, Code: 2, At: time.Now()},
			state.Exit{Role: "server", PID: 11, Signal: "SIGKILL", At: time.Now()})
		return nil
	}
	if _, err := s.Transition("a.moderate", 1, state.Failed, state.ReasonClientFailed, "client exit code 2", nil, exits); err != nil {
		t.Fatal(err)
	}
	return dir, adir
}

// A failed client's last stderr lines are in ctlq show, bounded to 20
// lines within 4 KiB, in text and in -o json; a server with no stderr
// file says so.
func TestShowFailedProcessStderr(t *testing.T) {
	dir, adir := failedClient(t)
	var b strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, "client line %02d\n", i)
	}
	b.WriteString("error: manifest data/m.jsonl: no such file\n")
	if err := os.WriteFile(filepath.Join(adir, "client.err"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "show", "a.moderate", "-d", dir)
	if code != 0 || !strings.Contains(out, "attempt 1 client stderr ("+filepath.Join(adir, "client.err")+", last 20 lines):") ||
		!strings.Contains(out, "  | error: manifest data/m.jsonl: no such file") || !strings.Contains(out, "  | client line 12") ||
		strings.Contains(out, "client line 11") || !strings.Contains(out, "attempt 1 server stderr") || !strings.Contains(out, "not shown: no such file") {
		t.Fatalf("show: exit %d:\n%s", code, out)
	}
	out, code = run(t, "show", "a.moderate", "-d", dir, "-o", "json")
	var doc struct {
		StderrTails []views.StderrTail `json:"stderr_tails"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || len(doc.StderrTails) != 2 {
		t.Fatalf("show -o json: exit %d, %v:\n%s", code, err, out)
	}
	if c := doc.StderrTails[0]; c.Role != "client" || len(c.Lines) != views.StderrTailLines || !c.Truncated || c.Lines[19] != "error: manifest data/m.jsonl: no such file" {
		t.Fatalf("client tail %+v", c)
	}

	// long lines: no more than the last 4 KiB is shown
	long := strings.Repeat("x", 1000) + "\n"
	if err := os.WriteFile(filepath.Join(adir, "client.err"), []byte("START\n"+strings.Repeat(long, 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ = run(t, "show", "a.moderate", "-d", dir, "-o", "json")
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range doc.StderrTails[0].Lines {
		n += len(l) + 1
	}
	if n > views.StderrTailBytes || n == 0 || strings.Contains(out, "START") {
		t.Fatalf("long lines: %d bytes shown, bound %d", n, views.StderrTailBytes)
	}
}

// A stderr that holds private text, one that is a link to a private
// input, and any when the private inputs cannot be read: none is shown,
// a note says why, and no private text reaches the output.
func TestShowStderrNeverPrivate(t *testing.T) {
	prompt := privatePrompt
	dir, adir := failedClient(t)
	manifest := recordPrivateManifest(t, dir)
	errFile := filepath.Join(adir, "client.err")
	if err := os.WriteFile(errFile, []byte("traceback\nbad request: "+prompt[10:80]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := run(t, "show", "a.moderate", "-d", dir)
	if !strings.Contains(out, "not shown: it holds private text (sha256:") || strings.Contains(out, prompt[30:50]) || strings.Contains(out, "traceback") {
		t.Fatalf("private text in stderr:\n%s", out)
	}
	if err := os.Remove(errFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(manifest, errFile); err != nil {
		t.Fatal(err)
	}
	out, _ = run(t, "show", "a.moderate", "-d", dir)
	if !strings.Contains(out, "attempt 1 client stderr") || !strings.Contains(out, "not shown: ") || strings.Contains(out, "discharge") {
		t.Fatalf("stderr a link to a private input:\n%s", out)
	}
	if err := os.Remove(errFile); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(errFile, []byte("plain failure\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(manifest, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(manifest, 0o600)
	if os.Geteuid() == 0 {
		t.Skip("root reads a mode-0 file")
	}
	out, _ = run(t, "show", "a.moderate", "-d", dir)
	if !strings.Contains(out, "not shown: the private inputs cannot be read to check it") || strings.Contains(out, "plain failure") {
		t.Fatalf("private inputs unreadable:\n%s", out)
	}
}

// The report shows the same tail in its own section.
func TestReportFailedProcessStderr(t *testing.T) {
	dir, adir := failedClient(t)
	if err := os.WriteFile(filepath.Join(adir, "client.err"), []byte("early line\nerror: manifest <data/m.jsonl> missing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	html := reportPage(t, dir)
	if !strings.Contains(html, "<h2>Failed processes&#39; stderr</h2>") && !strings.Contains(html, "<h2>Failed processes' stderr</h2>") {
		t.Fatal("the report has no stderr section")
	}
	if !strings.Contains(html, "early line\nerror: manifest &lt;data/m.jsonl&gt; missing") || !strings.Contains(html, "not shown: no such file") {
		t.Fatalf("the report's stderr section lacks the client's tail or the server's note")
	}
}
