package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"warden/internal/cli"
	"warden/pkg/amend"
	"warden/pkg/api"
	"warden/pkg/attempt"
	"warden/pkg/campaigndir"
	"warden/pkg/connlimit"
	"warden/pkg/dirlayout"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/metrics"
	"warden/pkg/notify"
	"warden/pkg/runner"
	"warden/pkg/state"
	"warden/pkg/views"
)

// daemonOptions come from the command line.
type daemonOptions struct {
	dir        string
	foreground bool
	readyFD    int // when >= 0, "ok PID\n" or "error: ...\n" is written here once
	backend    string
	boot       launch.BootIDSource
	metrics    metricsOptions
	// retryShared launches the runs held for a cause they share with a
	// failed run (runner.Config.RetrySharedCause).
	retryShared bool
}

// runDaemon takes the campaign, reconciles what a previous controller left,
// and executes runs until the campaign completes, stops, or the controller
// is asked to stop.
func runDaemon(opts daemonOptions) (err error) {
	ready := launch.NewReady(opts.readyFD)
	defer func() {
		if err != nil {
			ready.Fail(err)
		}
	}()

	apiMax, metricsMax, err := reserveResources()
	if err != nil {
		return err
	}

	dir, err := filepath.Abs(opts.dir)
	if err != nil {
		return err
	}
	// a stop signal from the start: one that comes while the controller
	// starts up (controller stop of a resume that reconciles) stops it
	// before it launches anything
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	lock, err := campaigndir.Lock(dir)
	if err != nil {
		return err
	}
	defer lock.Release()

	logFile, log, err := openDaemonLog(dir, opts.foreground)
	if err != nil {
		return err
	}
	defer logFile.Close()

	c, err := campaigndir.Open(dir, opts.backend)
	if err != nil {
		return err
	}
	defer c.Store.Close()

	gpus, gpuDesc, err := openHostGPUs(c.Settings)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reaper, err := startReaper(ctx)
	if err != nil {
		return err
	}
	defer reaper.Close()
	camp, finished, err := takeCampaign(dir, c, log)
	if err != nil {
		return err
	}
	if finished {
		ready.OK(os.Getpid())
		return nil
	}
	rn, cg, err := newCampaignRunner(dir, c, camp, gpus, reaper, opts, log)
	if err != nil {
		return err
	}
	log.Info().Str("dir", dir).Str("gpus", gpuDesc).Str("cgroups", cg.Mode()).Str("protocol", c.Plan.Protocol.Name).Msg("controller starting")

	var notifier *notify.Notifier
	if ns := c.Settings.Notify; ns != nil {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		// a supervisor of its own runs each notification: a controller
		// killed meanwhile leaves none unbounded
		notifier, err = notify.New(notify.Config{Command: ns.Command, TimeoutS: ns.TimeoutS, Dir: dir, Store: c.Store, Log: log,
			Launcher: &launch.Launcher{Reaper: reaper, Cgroups: cg, Boot: opts.boot}, Supervisor: []string{self, "notify-run"}})
		if err != nil {
			return fmt.Errorf("%s: notify: %w", dirlayout.Settings(dir), err)
		}
	}
	if n, err := notify.EndLeftovers(dir, opts.boot); err != nil {
		return fmt.Errorf("end the notifications a dead controller left: %w", err)
	} else if n > 0 {
		log.Warn().Int("processes", n).Msg("ended what a dead controller's notification left running")
	}
	deadBefore := camp.ControllerDied() // Reconcile records it
	if err := rn.Reconcile(ctx); err != nil {
		return err
	}
	if deadBefore {
		if d, _ := notify.DeathOf(camp, 0, false); notifiedBefore(dir, d) {
			log.Info().Int("controller_pid", camp.ControllerPID).Msg("the dead controller was notified by controller check already")
		} else {
			notifier.DeadAtResume(camp, fmt.Sprintf("controller pid %d found dead at resume; its last heartbeat %s", camp.ControllerPID, camp.Heartbeat.UTC().Format(time.RFC3339)))
		}
	}
	defer notifier.Wait()
	if err := rn.Claim(os.Getpid()); err != nil {
		return err
	}

	srv, err := serveAPI(dir, c, rn, apiMax, log)
	if err != nil {
		return err
	}
	defer srv.Close()

	mout := opts.metrics.Outputs
	mout.MaxConns = metricsMax
	stopMetrics, err := metrics.Serve(ctx, mout, c.Store, log)
	if err != nil {
		return err
	}
	defer stopMetrics()

	defer stopOnSignal(ctx, rn, sigs, log)()
	defer cancel()

	ready.OK(os.Getpid())
	return runCampaign(ctx, rn, cg, notifier, log)
}

// runCampaign runs the campaign until it ends, notifies its end (a nil
// notifier does nothing) and waits for the notifications beside it, then
// removes the campaign's empty cgroups, the notifications' among them.
func runCampaign(ctx context.Context, rn *runner.Runner, cg *launch.Manager, notifier *notify.Notifier, log zerolog.Logger) error {
	err := rn.Run(ctx)
	notifier.AtEnd()
	notifier.Wait()
	if cg != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cg.Cleanup(cctx)
		ccancel()
	}
	log.Info().Err(err).Msg("controller exiting")
	return err
}

// reserveResources fixes the controller's own CPU use and reserves the
// descriptors its listeners may hold: apiMax and metricsMax connections.
func reserveResources() (apiMax, metricsMax int, err error) {
	// A fixed GOMAXPROCS also stops the runtime's periodic re-reading of
	// the CPU quota; the controller needs no more than two.
	runtime.GOMAXPROCS(min(2, runtime.NumCPU()))
	if apiMax, metricsMax, err = listenerCaps(); err != nil {
		return 0, 0, err
	}
	_, err = connlimit.Reserve(apiMax+metricsMax, descriptorReserve)
	return apiMax, metricsMax, err
}

// openHostGPUs opens this host's GPUs for a campaign that runs here, and
// says which they are; a Slurm campaign's GPUs are read on its nodes.
func openHostGPUs(set campaigndir.Settings) (attempt.GPUs, string, error) {
	if set.SlurmConfig() != nil {
		return nil, "on the Slurm nodes (" + set.GPUBackend + ")", nil
	}
	return set.OpenGPUs()
}

// startReaper makes the controller the subreaper of every process its
// attempts start, and starts the one reaper that collects their exits
// until ctx ends.
func startReaper(ctx context.Context) (*launch.Reaper, error) {
	if err := launch.BecomeSubreaper(); err != nil {
		return nil, err
	}
	reaper := launch.NewReaper()
	if err := reaper.Start(ctx); err != nil {
		return nil, err
	}
	return reaper, nil
}

// openDaemonLog opens the campaign's controller log for appending and the
// logger that writes to it (and to standard error in the foreground).
func openDaemonLog(dir string, foreground bool) (*os.File, zerolog.Logger, error) {
	logFile, err := os.OpenFile(dirlayout.Log(dir), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, zerolog.Logger{}, fmt.Errorf("open log: %w", err)
	}
	var out = zerolog.MultiLevelWriter(logFile)
	if foreground {
		out = zerolog.MultiLevelWriter(logFile, stderrLog(os.Stderr))
	}
	return logFile, zerolog.New(out).With().Timestamp().Int("pid", os.Getpid()).Logger(), nil
}

// takeCampaign checks that the campaign recorded in c is the directory's
// and records its GPU backend where an older record lacks it. finished: the
// campaign is complete or frozen, with nothing to reconcile or run.
func takeCampaign(dir string, c campaigndir.Opened, log zerolog.Logger) (camp state.Campaign, finished bool, err error) {
	set, store := c.Settings, c.Store
	camp, err = store.Campaign()
	if err != nil {
		return camp, false, err
	}
	if err := campaigndir.CheckBelongs(dir, set, c.Plan, camp); err != nil {
		return camp, false, err
	}
	if camp.GPUBackend == "" {
		// recorded before the campaign record named its backend
		if err := store.UpdateCampaign(func(cp *state.Campaign) error { cp.GPUBackend = set.GPUBackend; return nil }); err != nil {
			return camp, false, err
		}
	}
	if set.GPUBackend == "fake" {
		log.Warn().Str("fake_gpu_dir", set.FakeGPUDir).Msg("fake GPUs: the GPU gates read files; nothing measured is a GPU's")
	}
	if camp.State == state.CampaignComplete || camp.State == state.CampaignFrozen {
		log.Info().Msg("campaign complete; nothing to resume")
		return camp, true, nil
	}
	return camp, false, nil
}

// newCampaignRunner builds the campaign's runner: its containment (a
// cgroup manager unless the campaign turned cgroups off), the launcher on
// reaper, the private inputs' index and the executor the settings name.
func newCampaignRunner(dir string, c campaigndir.Opened, camp state.Campaign, gpus attempt.GPUs, reaper *launch.Reaper, opts daemonOptions, log zerolog.Logger) (*runner.Runner, *launch.Manager, error) {
	set, plan, boot := c.Settings, c.Plan, opts.boot
	var cg *launch.Manager
	if set.Cgroups != "off" {
		// Containment is never off silently: a manager that cannot be made
		// is an error; where cgroup v2 is not there or not writable, the
		// manager says so (Mode) and every attempt's processes record no
		// cgroup, which ctlq show reports.
		var err error
		if cg, err = launch.NewManager(launch.CgroupName(camp.ID)); err != nil {
			return nil, nil, fmt.Errorf("cgroups: %w", err)
		}
		if !cg.Available() {
			log.Warn().Str("cgroups", cg.Mode()).Msg("cgroups unavailable; containing processes by process group and session only")
		}
	}
	if boot == nil {
		boot = launch.BootIDFromEnv()
	}
	private, err := gates.CampaignPrivateIndex(dir, plan.PrivacyMinLeakBytes)
	if err != nil {
		return nil, nil, err
	}
	fakeDir := ""
	if set.GPUBackend == "fake" {
		fakeDir = set.FakeGPUDir
	}
	rn, err := runner.New(runner.Config{
		Dir: dir, Plan: plan, Store: c.Store, GPUs: gpus, Launcher: &launch.Launcher{Reaper: reaper, Cgroups: cg, Boot: boot},
		Cgroups: cg, Boot: boot, Now: time.Now, Log: log, UID: os.Getuid(), Workdir: set.Workdir, ProtocolPath: set.ProtocolPath,
		FakeGPUDir: fakeDir, Private: private, Slurm: set.SlurmConfig(), RetrySharedCause: opts.retryShared,
	})
	return rn, cg, err
}

// serveAPI serves the campaign's query API on its socket: status from the
// store, and stop, amend and freeze through the runner.
func serveAPI(dir string, c campaigndir.Opened, rn *runner.Runner, maxConns int, log zerolog.Logger) (io.Closer, error) {
	set, store := c.Settings, c.Store
	onAmend := func(req api.AmendRequest) (json.RawMessage, error) {
		res, plan, err := amend.Amend(campaigndir.Amendable(dir, set, store), amend.Request(req))
		if err != nil {
			return nil, err
		}
		if plan != nil {
			rn.Reload(plan)
		}
		return json.Marshal(res)
	}
	onFreeze := func(req api.FreezeRequest) error {
		if req.ID == "" || req.Reason == "" {
			return errors.New("freeze: --id and --reason are required")
		}
		cp, err := store.Campaign()
		if err != nil {
			return err
		}
		log.Info().Str("amendment", req.ID).Msg("freeze requested: ending in-flight runs")
		rn.Freeze(amend.FreezeAmendment(req.ID, req.Reason, req.UID, cp.ProtocolSHA256, time.Now()))
		return nil
	}
	sv := &api.Server{
		Store: store, Dir: dir, Now: time.Now, Stop: rn.Stop, Amend: onAmend, Freeze: onFreeze,
		Controller: func() api.Controller {
			cp, _ := store.Campaign()
			return api.Controller{PID: os.Getpid(), Heartbeat: cp.Heartbeat}
		},
	}
	sv.MaxConns = maxConns
	return sv.Listen(func(err error) { log.Error().Err(err).Msg("api server") })
}

// stopOnSignal stops the runner on the first signal of sigs (SIGTERM,
// SIGINT or SIGHUP, notified since the controller began) until ctx ends:
// one that came during start-up stops it at once, before the runner
// launches anything. The function it returns waits for the watcher.
func stopOnSignal(ctx context.Context, rn *runner.Runner, sigs <-chan os.Signal, log zerolog.Logger) (wait func()) {
	select {
	case s := <-sigs:
		log.Info().Str("signal", s.String()).Msg("stopping on a signal that came while starting")
		rn.Stop()
		return func() {}
	default:
	}
	var sigWG sync.WaitGroup
	sigWG.Add(1)
	go func() {
		defer sigWG.Done()
		select {
		case s := <-sigs:
			log.Info().Str("signal", s.String()).Msg("stopping on signal")
			rn.Stop()
		case <-ctx.Done():
		}
	}()
	return sigWG.Wait
}

// stderrLog is where a foreground controller also logs: readable, coloured
// lines for a person at a terminal, recorded text in them escaped; JSON lines, with no escape sequences,
// for anything else (systemd's journal, a pipe, a file).
func stderrLog(f *os.File) io.Writer {
	if cli.IsTerminal(f) {
		return views.ConsoleLog(f, time.TimeOnly, os.Getenv("NO_COLOR") != "")
	}
	return f
}

// bootIDFileEnv names a file whose content replaces the kernel's boot id.
const bootIDFileEnv = launch.BootIDFileEnv

// descriptorReserve is how many open files the controller keeps beyond its
// listeners' caps, for stopping and reclaiming what it started: pidfds,
// cgroup files, /proc reads, logs and the database.
const descriptorReserve = 256

// MaxConnsEnv, when set, caps both the socket's and the metrics
// listener's connections at its value instead of api.DefaultMaxConns and
// metrics.DefaultMaxConns (tests use small caps).
const MaxConnsEnv = "WARDEN_MAX_CONNS"

// listenerCaps returns the connection caps of the socket and the metrics
// listener.
func listenerCaps() (apiMax, metricsMax int, err error) {
	v := os.Getenv(MaxConnsEnv)
	if v == "" {
		return api.DefaultMaxConns, metrics.DefaultMaxConns, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, 0, fmt.Errorf("%s=%q: want a whole number of connections, at least 1", MaxConnsEnv, v)
	}
	return n, n, nil
}

// notifiedBefore says whether death d of the campaign's controller was
// notified already (controller check): the resume does not notify it
// again.
func notifiedBefore(dir string, d notify.Death) bool {
	prior, ok, err := notify.ReadNotified(dir)
	return err == nil && ok && prior.Same(d)
}
