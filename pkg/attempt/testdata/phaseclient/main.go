// Command phaseclient is the load client of pkg/attempt's tests: it runs
// no load, and writes the phase lines, the result and the exit status a
// test scripts, at the times it scripts them.
//
//	phaseclient [-result JSON] [-write REL=TEXT]... [-exit N] STEP...
//
// Each STEP is, in order:
//
//	PHASE      append the line {"phase": PHASE, "t": now} to $WARDEN_PHASE_FILE
//	PHASE@-S   the same line, its time S seconds before now
//	+S         sleep S seconds
//	hang       sleep until a signal ends the process
//
// -result is written to $WARDEN_ATTEMPT_DIR/client/result.json and each
// -write to $WARDEN_ATTEMPT_DIR/REL before the first step; -exit is the
// exit status once the steps are done.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

type writes []string

func (w *writes) String() string     { return strings.Join(*w, ",") }
func (w *writes) Set(v string) error { *w = append(*w, v); return nil }

func main() {
	result := flag.String("result", "", "the client's result.json")
	code := flag.Int("exit", 0, "exit status")
	var files writes
	flag.Var(&files, "write", "REL=TEXT: a file of the attempt directory")
	flag.Parse()
	dir := os.Getenv("WARDEN_ATTEMPT_DIR")
	if *result != "" {
		files = append(files, "client/result.json="+*result)
	}
	for _, w := range files {
		rel, text, _ := strings.Cut(w, "=")
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			fail(err)
		}
	}
	for _, step := range flag.Args() {
		switch {
		case step == "hang":
			for {
				time.Sleep(time.Hour)
			}
		case strings.HasPrefix(step, "+"):
			s, err := strconv.ParseFloat(step[1:], 64)
			if err != nil {
				fail(err)
			}
			time.Sleep(time.Duration(s * float64(time.Second)))
		default:
			phase, ago, _ := strings.Cut(step, "@-")
			at := time.Now()
			if ago != "" {
				s, err := strconv.ParseFloat(ago, 64)
				if err != nil {
					fail(err)
				}
				at = at.Add(-time.Duration(s * float64(time.Second)))
			}
			line(phase, at)
		}
	}
	os.Exit(*code)
}

// line appends one phase line, fsynced, as a load client does.
func line(phase string, at time.Time) {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	b, _ := json.Marshal(map[string]any{"phase": phase, "t": at.UTC().Format(time.RFC3339Nano), "mono_ns": ts.Nano()})
	f, err := os.OpenFile(os.Getenv("WARDEN_PHASE_FILE"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		fail(err)
	}
	if err := f.Sync(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "phaseclient:", err)
	os.Exit(3)
}
