package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// rewriteEnviron overwrites the memory that held this process's initial
// environment with zeros, as setproctitle does when it reuses argv and
// environ for a process title: /proc/PID/environ then holds no entry. The
// Go runtime copied the environment at start, so os.Getenv and the
// children's environments are unaffected.
func rewriteEnviron() error {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return err
	}
	// fields after the command name: state is field 3, env_start 50 and
	// env_end 51
	i := bytes.LastIndexByte(stat, ')')
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 49 {
		return fmt.Errorf("rewrite environ: /proc/self/stat has %d fields after the name", len(fields))
	}
	start, err1 := strconv.ParseInt(fields[47], 10, 64)
	end, err2 := strconv.ParseInt(fields[48], 10, 64)
	if err1 != nil || err2 != nil || end <= start {
		return fmt.Errorf("rewrite environ: env_start %q env_end %q", fields[47], fields[48])
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("rewrite environ: %w", err)
	}
	_, err = mem.WriteAt(make([]byte, end-start), start)
	if cerr := mem.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rewrite environ: %w", err)
	}
	env, err := os.ReadFile("/proc/self/environ")
	if err != nil || bytes.IndexByte(env, '=') >= 0 {
		return fmt.Errorf("rewrite environ: /proc/self/environ still holds entries (%v)", err)
	}
	return nil
}
