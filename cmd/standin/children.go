package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"warden/internal/mountinfo"

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
	return internalCmd("sleeper", "sleep until SIGTERM, SIGINT or SIGKILL (--fork children, --hold-port holder)", func() error {
		// Fds passed by the starter (the --hold-port listener) stay
		// open, unused, until the process ends.
		sig := waitForSignal(syscall.SIGTERM, syscall.SIGINT)
		newLogger("sleeper").Info("exiting on signal", "signal", sig.String())
		return nil
	})
}

// internalCmd is a hidden subcommand that the stand-in starts of itself,
// never people: its use, what it does (its help says "internal: " first)
// and its run.
func internalCmd(use, what string, run func() error) *cobra.Command {
	return &cobra.Command{
		Use:    use,
		Short:  "internal: " + what,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE:   func(*cobra.Command, []string) error { return run() },
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
	var leave bool
	cmd := internalCmd("escape", "first fork of --setsid-grandchild; starts an orphan in this new session and exits", func() error {
		return runEscape(mib, leave)
	})
	cmd.Flags().IntVar(&mib, "gpu-mem-mib", 0, "fake GPU memory the orphan claims on each visible GPU")
	cmd.Flags().BoolVar(&leave, "leave-cgroup", false, "the orphan moves itself out of its cgroup first")
	return cmd
}

// runEscape runs in a new session (its starter set Setsid). It starts the
// orphan, waits until the orphan has claimed its memory, and returns without
// waiting for it: once this process exits, the orphan belongs to no process
// of the server's group or session.
func runEscape(mib int, leave bool) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("escape: pipe: %w", err)
	}
	defer r.Close()
	args := []string{"orphan", "--gpu-mem-mib", fmt.Sprint(mib), "--notify-fd", "3"}
	if leave {
		args = append(args, "--leave-cgroup")
	}
	cmd, err := selfCommand(args...)
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
func startEscape(mib int, leave bool) error {
	args := []string{"escape", "--gpu-mem-mib", fmt.Sprint(mib)}
	if leave {
		args = append(args, "--leave-cgroup")
	}
	cmd, err := selfCommand(args...)
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
	var leave bool
	cmd := internalCmd("orphan", "--setsid-grandchild process; claims fake GPU memory and sleeps until killed", func() error {
		if leave {
			if err := leaveCgroup(); err != nil {
				return fmt.Errorf("orphan: %w", err)
			}
		}
		return runOrphan(mib, notifyFD)
	})
	cmd.Flags().IntVar(&mib, "gpu-mem-mib", 0, "fake GPU memory to claim on each visible GPU")
	cmd.Flags().IntVar(&notifyFD, "notify-fd", -1, "fd on which to write \"claimed\" once the memory is claimed")
	cmd.Flags().BoolVar(&leave, "leave-cgroup", false, "move this process into the cgroup two levels above its own before anything else")
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

// leaveCgroup moves this process into the cgroup two levels above its own
// (from a campaign's leaf, past its campaign root, into the cgroup the
// controller runs in): what a root daemon that escapes its supervisor's
// cgroup does. It finds the cgroup2 mount in /proc/self/mountinfo.
func leaveCgroup() error {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	var own string
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" || own == "/" {
		return fmt.Errorf("leave cgroup: no cgroup v2 path to leave (%q)", own)
	}
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if m.FSType != "cgroup2" {
			continue
		}
		// the path of own is relative to the mount's root
		rel, ok := strings.CutPrefix(own, strings.TrimSuffix(m.Root, "/"))
		if !ok {
			continue
		}
		target := filepath.Join(m.Point, filepath.Dir(filepath.Dir(rel)), "cgroup.procs")
		if err := os.WriteFile(target, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("leave cgroup: %w", err)
		}
		newLogger("orphan").Info("moved out of its cgroup (--escape-cgroup)", "from", own, "to", filepath.Dir(target))
		return nil
	}
	return errors.New("leave cgroup: no cgroup2 mount holds " + own)
}
