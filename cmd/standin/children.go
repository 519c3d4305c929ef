package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// The helpers in this file are the extra processes that the misbehaviour
// flags leave behind. Each is this binary re-executed under a hidden
// subcommand, since a Go program cannot fork without exec.

// waitForSignal blocks until one of sigs arrives and returns it.
func waitForSignal(sigs ...os.Signal) os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, sigs...)
	defer signal.Stop(c)
	return <-c
}

// selfCommand returns a command that runs this binary with args, with the
// caller's stdout and stderr.
func selfCommand(args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	return cmd, nil
}

func newSleeperCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "sleeper",
		Short:  "internal: sleep until SIGTERM, SIGINT or SIGKILL (--fork children, --hold-port holder)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			// Fds passed by the starter (the --hold-port listener) stay
			// open, unused, until the process ends.
			sig := waitForSignal(syscall.SIGTERM, syscall.SIGINT)
			newLogger("sleeper").Info("exiting on signal", "signal", sig.String())
			return nil
		},
	}
}

// startSleeper starts a sleeper in the caller's process group, passing it
// the extra files (they become fds 3, 4, ...). The returned command is
// running; the caller decides whether to wait for it.
func startSleeper(extra ...*os.File) (*exec.Cmd, error) {
	cmd, err := selfCommand("sleeper")
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = extra
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sleeper: %w", err)
	}
	return cmd, nil
}

func newEscapeCmd() *cobra.Command {
	var mib int
	cmd := &cobra.Command{
		Use:    "escape",
		Short:  "internal: first fork of --setsid-grandchild; starts an orphan in this new session and exits",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runEscape(mib)
		},
	}
	cmd.Flags().IntVar(&mib, "gpu-mem-mib", 0, "fake GPU memory the orphan claims on each visible GPU")
	return cmd
}

// runEscape runs in a new session (its starter set Setsid). It starts the
// orphan, waits until the orphan has claimed its memory, and returns without
// waiting for it: once this process exits, the orphan belongs to no process
// of the server's group or session.
func runEscape(mib int) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("escape: pipe: %w", err)
	}
	defer r.Close()
	cmd, err := selfCommand("orphan", "--gpu-mem-mib", fmt.Sprint(mib), "--notify-fd", "3")
	if err != nil {
		w.Close()
		return err
	}
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("escape: start orphan: %w", err)
	}
	line, readErr := bufio.NewReader(r).ReadString('\n')
	if line != "claimed\n" {
		// The orphan failed before claiming; it has exited or will.
		waitErr := cmd.Wait()
		return fmt.Errorf("escape: orphan did not claim its memory: %w", errors.Join(readErr, waitErr))
	}
	newLogger("escape").Info("orphan started in a new session", "orphan_pid", cmd.Process.Pid)
	return nil
}

// startEscape starts the first fork of --setsid-grandchild in a new session
// and waits for it: it exits as soon as its orphan holds its memory.
func startEscape(mib int) error {
	cmd, err := selfCommand("escape", "--gpu-mem-mib", fmt.Sprint(mib))
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("setsid grandchild: %w", err)
	}
	return nil
}

func newOrphanCmd() *cobra.Command {
	var mib, notifyFD int
	cmd := &cobra.Command{
		Use:    "orphan",
		Short:  "internal: --setsid-grandchild process; claims fake GPU memory and sleeps until killed",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runOrphan(mib, notifyFD)
		},
	}
	cmd.Flags().IntVar(&mib, "gpu-mem-mib", 0, "fake GPU memory to claim on each visible GPU")
	cmd.Flags().IntVar(&notifyFD, "notify-fd", -1, "fd on which to write \"claimed\" once the memory is claimed")
	return cmd
}

func runOrphan(mib, notifyFD int) error {
	log := newLogger("orphan")
	gpus, err := claimVisibleGPUs(mib, "orphan")
	if err != nil {
		return err
	}
	log.Info("holding fake GPU memory outside the server's process group", "gpus", gpus, "mib", mib)
	if notifyFD >= 0 {
		f := os.NewFile(uintptr(notifyFD), "notify")
		_, err := f.WriteString("claimed\n")
		f.Close()
		if err != nil {
			return fmt.Errorf("orphan: notify: %w", err)
		}
	}
	sig := waitForSignal(syscall.SIGTERM, syscall.SIGINT)
	log.Info("exiting on signal", "signal", sig.String())
	return nil
}
