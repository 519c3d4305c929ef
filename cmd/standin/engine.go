package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"warden/internal/cli"
)

// The engine is the API parent's child, like vLLM's engine core: it is
// started by re-executing this binary as "standin engine", in the parent's
// process group, and it holds the fake GPU memory. Two pipes connect them:
//
//	fd 3 (control, engine reads): EOF means "exit", sent when the parent
//	     closes it or dies, so the engine notices its parent's death at once.
//	fd 4 (ready, engine writes):  "ready\n" once the model is "loaded".
const (
	controlFD = 3
	readyFD   = 4
)

// engineConfig is what the parent passes to the engine on its command line.
type engineConfig struct {
	gpuMemMiB        int
	loadS            float64
	crashAfterS      float64
	ignoreSIGTERM    bool
	setsidGrandchild bool
	escapeCgroup     bool // the --setsid-grandchild escapee also leaves the attempt's cgroup
	engineSurvives   bool
	fork             int
}

func (c *engineConfig) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&c.gpuMemMiB, "gpu-mem-mib", 0, "fake GPU memory to claim on each GPU in $CUDA_VISIBLE_DEVICES (needs $WARDEN_FAKE_GPU_DIR)")
	f.Float64Var(&c.loadS, "load-s", 0.5, "seconds of \"loading\" before the engine reports ready")
	f.Float64Var(&c.crashAfterS, "crash-after", 0, "misbehave: exit with code 1 after this many seconds (0: never)")
	f.BoolVar(&c.ignoreSIGTERM, "ignore-sigterm", false, "misbehave: ignore SIGTERM")
	f.BoolVar(&c.setsidGrandchild, "setsid-grandchild", false, "misbehave: leave a process in a new session that holds fake GPU memory until killed")
	f.BoolVar(&c.escapeCgroup, "escape-cgroup", false, "misbehave: the --setsid-grandchild escapee moves itself out of its cgroup, into the one two levels up (as a root process can)")
	f.BoolVar(&c.engineSurvives, "engine-survives", false, "misbehave: keep running and holding memory when the parent says exit or dies")
	f.IntVar(&c.fork, "fork", 0, "misbehave: start this many sleeping children in the process group, left behind at exit")
}

// args renders the configuration as the engine's command line.
func (c *engineConfig) args() []string {
	args := []string{"engine",
		"--gpu-mem-mib", strconv.Itoa(c.gpuMemMiB),
		"--load-s", strconv.FormatFloat(c.loadS, 'g', -1, 64),
		"--crash-after", strconv.FormatFloat(c.crashAfterS, 'g', -1, 64),
		"--fork", strconv.Itoa(c.fork),
	}
	for _, b := range []struct {
		name string
		on   bool
	}{
		{"--ignore-sigterm", c.ignoreSIGTERM},
		{"--setsid-grandchild", c.setsidGrandchild},
		{"--escape-cgroup", c.escapeCgroup},
		{"--engine-survives", c.engineSurvives},
	} {
		if b.on {
			args = append(args, b.name)
		}
	}
	return args
}

func newEngineCmd() *cobra.Command {
	var cfg engineConfig
	cmd := internalCmd("engine", "the engine child of a stand-in server (started by standin server, not by people)", func() error {
		return runEngine(cfg)
	})
	cfg.addFlags(cmd)
	return cmd
}

func runEngine(cfg engineConfig) error {
	log := newLogger("engine")
	control, ready, err := inheritedPipes()
	if err != nil {
		return err
	}

	sigs := make(chan os.Signal, 1)
	if cfg.ignoreSIGTERM {
		signal.Ignore(syscall.SIGTERM)
		signal.Notify(sigs, syscall.SIGINT)
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	}
	defer signal.Stop(sigs)

	// Ends at EOF: when the parent closes the control pipe or dies.
	parentGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, control)
		close(parentGone)
	}()

	var crash <-chan time.Time
	if cfg.crashAfterS > 0 {
		t := time.NewTimer(seconds(cfg.crashAfterS))
		defer t.Stop()
		crash = t.C
	}

	gpus, err := claimVisibleGPUs(cfg.gpuMemMiB, "engine")
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	log.Info("loading", "gpus", gpus, "gpu_mem_mib", cfg.gpuMemMiB, "load_s", cfg.loadS)
	if err := engineChildren(cfg, log); err != nil {
		return err
	}

	load := time.NewTimer(seconds(cfg.loadS))
	defer load.Stop()
	select {
	case <-load.C:
	case <-parentGone:
		if !cfg.engineSurvives {
			log.Info("parent gone while loading; exiting")
			return nil
		}
	case <-crash:
		return &cli.ExitError{Code: 1, Err: errors.New("engine: crashing as asked (--crash-after)")}
	case sig := <-sigs:
		log.Info("exiting on signal while loading", "signal", sig.String())
		return nil
	}
	_, err = ready.WriteString("ready\n")
	ready.Close()
	if err != nil {
		return fmt.Errorf("engine: report ready: %w", err)
	}
	log.Info("ready")

	for {
		select {
		case <-parentGone:
			if cfg.engineSurvives {
				log.Warn("parent said exit or died; staying and holding GPU memory (--engine-survives)")
				parentGone = nil
				continue
			}
			log.Info("parent said exit or died; exiting")
			return nil
		case <-crash:
			return &cli.ExitError{Code: 1, Err: errors.New("engine: crashing as asked (--crash-after)")}
		case sig := <-sigs:
			log.Info("exiting on signal", "signal", sig.String())
			return nil
		}
	}
}

// inheritedPipes opens the control and ready pipes the server passed
// down, keeping them out of the engine's own children.
func inheritedPipes() (control, ready *os.File, err error) {
	control = os.NewFile(controlFD, "control")
	ready = os.NewFile(readyFD, "ready")
	for _, f := range []*os.File{control, ready} {
		if _, err := f.Stat(); err != nil {
			return nil, nil, fmt.Errorf("engine: fd %d: %w (the engine is started by \"standin server\")", f.Fd(), err)
		}
		// Inherited fds are not close-on-exec; keep them out of the
		// engine's own children, or they would hold the pipes open.
		syscall.CloseOnExec(int(f.Fd()))
	}
	return control, ready, nil
}

// engineChildren starts the children the engine is asked for: --fork
// sleepers in its process group and a --setsid-grandchild escapee.
func engineChildren(cfg engineConfig, log *logger) error {
	for i := 0; i < cfg.fork; i++ {
		child, err := startSleeper()
		if err != nil {
			return fmt.Errorf("engine: fork %d: %w", i, err)
		}
		log.Info("started a sleeping child in the process group (--fork)", "child_pid", child.Process.Pid)
		// Reaped here while the engine lives; orphaned when it exits.
		go func() { _ = child.Wait() }()
	}
	if cfg.setsidGrandchild {
		if err := startEscape(cfg.gpuMemMiB, cfg.escapeCgroup); err != nil {
			return fmt.Errorf("engine: %w", err)
		}
	}
	return nil
}

// engineHandle is the API parent's view of its engine child.
type engineHandle struct {
	cmd *exec.Cmd
	// control is the write end of the control pipe; closing it tells the
	// engine to exit. Used only by the parent's main goroutine.
	control *os.File
	// ready is closed when the engine reports that it has loaded; loaded
	// says so to a reader that must not block (the health handler).
	ready  chan struct{}
	loaded atomic.Bool
	// done is closed when the engine has exited and been reaped.
	done chan struct{}
	// err is the engine's exit status; read it only after done is closed.
	err error
}

// startEngine starts the engine child in the caller's process group.
func startEngine(cfg engineConfig) (*engineHandle, error) {
	controlR, controlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start engine: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		controlR.Close()
		controlW.Close()
		return nil, fmt.Errorf("start engine: %w", err)
	}
	cmd, err := selfCommand(cfg.args()...)
	if err == nil {
		cmd.ExtraFiles = []*os.File{controlR, readyW} // fds 3 and 4
		err = cmd.Start()
	}
	// The child holds its own copies of these ends.
	controlR.Close()
	readyW.Close()
	if err != nil {
		controlW.Close()
		readyR.Close()
		return nil, fmt.Errorf("start engine: %w", err)
	}
	e := &engineHandle{cmd: cmd, control: controlW, ready: make(chan struct{}), done: make(chan struct{})}
	// Ends when the engine closes its end, after reporting or by exiting.
	go func() {
		defer readyR.Close()
		br := bufio.NewReader(readyR)
		if line, _ := br.ReadString('\n'); line == "ready\n" {
			e.loaded.Store(true)
			close(e.ready)
		}
		_, _ = io.Copy(io.Discard, br)
	}()
	// Ends when the engine exits.
	go func() {
		e.err = cmd.Wait()
		close(e.done)
	}()
	return e, nil
}

// stop tells the engine to exit and waits for it up to timeout, then kills
// it and waits.
func (e *engineHandle) stop(timeout time.Duration) error {
	e.control.Close()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.done:
		return e.err
	case <-t.C:
	}
	_ = e.cmd.Process.Kill()
	<-e.done
	return fmt.Errorf("engine did not exit within %v of being told to; killed: %w", timeout, e.err)
}
