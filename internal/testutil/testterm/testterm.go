// Package testterm runs a command on a pseudo-terminal for tests, as a
// terminal would: it keeps what the command draws and answers the queries
// a terminal answers, the background colour (OSC 11) and the cursor
// position (CSI 6n). Without answers a terminal library waits seconds for
// them before it draws.
package testterm

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"time"

	"github.com/creack/pty"
)

// Term is a command started on a pseudo-terminal of 40 rows and 120
// columns.
type Term struct {
	f      *os.File
	mu     sync.Mutex
	out    bytes.Buffer
	copied chan struct{}
}

// Start starts cmd on a new pseudo-terminal and copies what it writes
// until the command closes its side or Close is called.
func Start(cmd *exec.Cmd) (*Term, error) {
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		return nil, err
	}
	t := &Term{f: f, copied: make(chan struct{})}
	go func() {
		defer close(t.copied)
		t.answer()
	}()
	return t, nil
}

// answer copies the terminal's output and answers its queries; it ends
// with the read error (EIO when the command has exited).
func (t *Term) answer() {
	buf := make([]byte, 32<<10)
	for {
		n, err := t.f.Read(buf)
		chunk := buf[:n]
		t.mu.Lock()
		t.out.Write(chunk)
		t.mu.Unlock()
		if bytes.Contains(chunk, []byte("\x1b]11;?")) {
			t.f.Write([]byte("\x1b]11;rgb:0000/0000/0000\x1b\\"))
		}
		if bytes.Contains(chunk, []byte("\x1b[6n")) {
			t.f.Write([]byte("\x1b[1;1R"))
		}
		if err != nil {
			return
		}
	}
}

// Wait waits for cmd, the command started on the terminal, to exit; when
// it has not exited within d it kills it, waits for it and returns false.
func (t *Term) Wait(cmd *exec.Cmd, d time.Duration) bool {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
		return true
	case <-time.After(d):
		cmd.Process.Kill()
		<-exited
		return false
	}
}

// Output is what the command has drawn so far.
func (t *Term) Output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.String()
}

// Close closes the terminal, waits for the copy to end and returns all
// that the command drew. It may be called more than once.
func (t *Term) Close() string {
	t.f.Close()
	<-t.copied
	return t.Output()
}

var csi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// Plain is s without its control sequences (CSI).
func Plain(s string) string { return csi.ReplaceAllString(s, "") }
