package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/atomicfile"
)

// engineExitTimeout bounds the parent's wait for its engine after telling it
// to exit; then the parent kills it.
const engineExitTimeout = 10 * time.Second

// serverConfig holds the flags of "standin server".
type serverConfig struct {
	host             string
	port             int
	portFile         string
	model            string
	shutdownTimeoutS float64
	tokenMS          float64
	maxRunning       int
	effectiveConfig  []string
	holdPort         bool
	neverHealthy     bool
	rewriteEnviron   bool // misbehave: overwrite the initial environment, as setproctitle does
	listenAfter      string
	reusePort        bool
	info             serverInfo
	engine           engineConfig
	layer1           layer1Config
	layer2           layer2Config
	misbehave        misbehaveConfig
	kind             kindConfig
}

func newServerCmd() *cobra.Command {
	var cfg serverConfig
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a STAND-IN inference server (tests and demos only; not a real inference server)",
		Long: `Run a STAND-IN inference server for Warden's tests and demos. It is NOT a real
inference server: it answers OpenAI-shaped completions with placeholder tokens,
one every --token-ms, and runs no model.

As a process it behaves like vLLM: an API parent that starts an engine child
(this binary again) in the same process group. The engine claims fake GPU
memory on each GPU in $CUDA_VISIBLE_DEVICES when $WARDEN_FAKE_GPU_DIR is set;
the memory is released when the engine dies. /health answers 503 while the
engine "loads" (--load-s) and 200 after. On SIGTERM the parent stops accepting
requests, drains in-flight ones for up to --shutdown-timeout, tells the engine
to exit, waits for it, and exits 0. Prompts are never logged.

Endpoints: GET /health, GET /v1/models, POST /v1/completions
({model, prompt, max_tokens, stream, stream_options}), POST /v1/chat/completions
({model, messages, max_tokens, stream, stream_options}), POST /start_profile
and POST /stop_profile (200, empty body; Layer-2 traces with --traces-dir),
GET /metrics (the running-requests gauge of the server kind).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("port") {
				p, ok := os.LookupEnv("WARDEN_PORT")
				if !ok {
					return errors.New("server: --port or $WARDEN_PORT is required")
				}
				port, err := strconv.Atoi(p)
				if err != nil {
					return fmt.Errorf("server: $WARDEN_PORT=%q: %w", p, err)
				}
				cfg.port = port
			}
			return runServer(cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.host, "host", "127.0.0.1", "address to listen on")
	f.IntVar(&cfg.port, "port", 0, "port to listen on (default $WARDEN_PORT; 0 picks a free port, see --port-file)")
	f.StringVar(&cfg.portFile, "port-file", "", "write the bound port to this file (atomically) once listening")
	f.StringVar(&cfg.model, "model", "standin", "model name served")
	f.Float64Var(&cfg.shutdownTimeoutS, "shutdown-timeout", 5, "seconds to drain in-flight requests after SIGTERM")
	f.Float64Var(&cfg.tokenMS, "token-ms", 1, "milliseconds per generated token")
	f.IntVar(&cfg.maxRunning, "max-running", 0, "requests generating at once; the rest wait in arrival order (0: no bound): a capacity of max-running x 1000 / (output tokens x token-ms) requests/s")
	f.StringArrayVar(&cfg.effectiveConfig, "effective-config", nil, "line to print to stdout at startup, like a real server's effective configuration (repeatable)")
	f.IntVar(&cfg.engine.gpuMemMiB, "gpu-mem-mib", 0, "fake GPU memory the engine claims on each GPU in $CUDA_VISIBLE_DEVICES (needs $WARDEN_FAKE_GPU_DIR)")
	f.Float64Var(&cfg.engine.loadS, "load-s", 0.5, "seconds of \"loading\" before /health answers 200")
	// Misbehaviour.
	f.BoolVar(&cfg.engine.ignoreSIGTERM, "ignore-sigterm", false, "misbehave: parent and engine ignore SIGTERM")
	f.Float64Var(&cfg.engine.crashAfterS, "crash-after", 0, "misbehave: parent and engine exit with code 1 after this many seconds (0: never)")
	f.BoolVar(&cfg.engine.setsidGrandchild, "setsid-grandchild", false, "misbehave: the engine leaves a process in a new session that holds fake GPU memory until killed")
	f.StringVar(&cfg.listenAfter, "listen-after", "", "bind the port only once this file exists, as SGLang binds after loading its model (a SIGTERM while waiting exits 0)")
	f.BoolVar(&cfg.engine.escapeCgroup, "escape-cgroup", false, "misbehave: the --setsid-grandchild escapee moves itself out of the attempt's cgroup, into the one two levels up, as a root daemon can")
	addReusePortFlag(f, &cfg.reusePort)
	f.BoolVar(&cfg.holdPort, "hold-port", false, "misbehave: a child inherits the listening socket and keeps the port bound after shutdown")
	f.IntVar(&cfg.info.maxNumSeqs, "max-num-seqs", 1024, "the scheduler's max_num_seqs it reports (vLLM's /server_info, SGLang's /get_server_info as max_running_requests)")
	f.IntVar(&cfg.info.maxNumBatchedTokens, "max-num-batched-tokens", 8192, "the scheduler's max_num_batched_tokens it reports")
	f.IntVar(&cfg.info.reportMaxNumSeqs, "report-max-num-seqs", -1, "misbehave: report this max_num_seqs instead of --max-num-seqs")
	f.BoolVar(&cfg.neverHealthy, "never-healthy", false, "misbehave: /health answers 503 forever")
	f.BoolVar(&cfg.rewriteEnviron, "rewrite-environ", false, "misbehave: the API parent overwrites its initial environment's memory, as setproctitle does (/proc/PID/environ holds no entry)")
	f.BoolVar(&cfg.engine.engineSurvives, "engine-survives", false, "misbehave: on SIGTERM the parent exits but the engine stays, holding its GPU memory")
	addDrainStallFlags(f)
	addStreamFlags(f)
	f.IntVar(&cfg.engine.fork, "fork", 0, "misbehave: the engine starts this many sleeping children in the process group, left behind at exit")
	// Seed 002's artifacts.
	f.StringVar(&cfg.layer1.dir, "layer1-dir", "", "write a Layer-1 stream (layer1.jsonl and its sidecar layer1.jsonl.footer.json) here")
	f.Float64Var(&cfg.layer1.stepsPerS, "steps-per-s", 50, "Layer-1 records (engine steps) per second")
	f.Float64Var(&cfg.layer1.flushS, "flush-interval-s", 1, "Layer-1 flush interval: records are appended and the sidecar replaced this often")
	f.StringVar(&cfg.layer1.brk, "layer1-break", "", "misbehave: break the Layer-1 stream: drop, gap, partial, no-sidecar, stale; no-footer ends without a footer but with a fresh sidecar")
	addLayer1MisbehaveFlags(f, &cfg.layer1.misbehave)
	f.Uint64Var(&cfg.layer1.vary, "layer1-vary", 0, "when not 0, the seed of steps whose shapes vary as a saturated short-prompt pattern's do (200-256 decodes, 0-4 prefills of 128-512 tokens), instead of the real traces' three in turn")
	f.StringVar(&cfg.layer2.dir, "traces-dir", "", "write Layer-2 traces here on /stop_profile (none written if empty)")
	f.IntVar(&cfg.layer2.tp, "tp", 1, "TP ranks: trace files written per profile window")
	f.StringVar(&cfg.layer2.brk, "layer2-break", "", "misbehave: break every Layer-2 window: "+strings.Join(layer2Breaks, ", "))
	f.StringVar(&cfg.layer2.shift, "layer2-shift", "", "FAMILY=DELTA: add kernel time of FAMILY (a v1 family of the learned kernels) so that its window share rises by DELTA")
	bindMisbehave(cmd, &cfg.misbehave)
	addProfilerFlags(f, &cfg.layer2.sched)
	addKindFlags(f, &cfg.kind)
	return cmd
}

// runningSlots is the api's bound on requests generating at once; nil
// for none.
func runningSlots(n int) chan struct{} {
	if n <= 0 {
		return nil
	}
	return make(chan struct{}, n)
}

// server is a running API parent.
type server struct {
	cfg  serverConfig
	log  *logger
	api  *api
	http *http.Server
	// served receives Serve's result once it returns.
	served chan error
	// abort cancels the context of every request.
	abort context.CancelFunc
	eng   *engineHandle
	// layer1 is the Layer-1 stream, closed (footer, final sidecar) only
	// by a graceful shutdown; nil when none is written.
	layer1 *layer1Writer
}

func runServer(cfg serverConfig) error {
	log := newLogger("server")
	sigs := make(chan os.Signal, 1)
	if cfg.engine.ignoreSIGTERM {
		signal.Ignore(syscall.SIGTERM)
		signal.Notify(sigs, syscall.SIGINT)
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	}
	defer signal.Stop(sigs)

	if cfg.rewriteEnviron {
		if err := rewriteEnviron(); err != nil {
			return fmt.Errorf("server: %w", err)
		}
		log.Info("initial environment overwritten (--rewrite-environ)")
	}
	for _, line := range cfg.effectiveConfig {
		fmt.Println(line)
	}

	if cfg.listenAfter != "" {
		log.Info("loading: the port is bound once the file exists (--listen-after)", "file", cfg.listenAfter)
		if !waitForFile(cfg.listenAfter, sigs) {
			log.Info("signalled while loading; exiting")
			return nil
		}
	}
	ln, err := listen(cfg, log)
	if err != nil {
		return fmt.Errorf("server: listen: %w", err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	log.Info("listening; this is a STAND-IN server, not a real inference server", "addr", ln.Addr().String())
	if cfg.holdPort {
		holder, err := holdListener(ln.(*net.TCPListener))
		if err != nil {
			return fmt.Errorf("server: %w", err)
		}
		log.Info("a child holds the listening socket (--hold-port)", "holder_pid", holder.Process.Pid)
		// Reaped here while the parent lives; left behind when it exits.
		go func() { _ = holder.Wait() }()
	}
	if cfg.portFile != "" {
		if err := atomicfile.WriteFile(cfg.portFile, []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
			return fmt.Errorf("server: port file: %w", err)
		}
	}

	eng, err := startEngine(cfg.engine)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	log.Info("engine started", "engine_pid", eng.cmd.Process.Pid)

	if err := errors.Join(cfg.layer1.validate(), cfg.layer2.validate(), cfg.misbehave.validate(), cfg.kind.validate()); err != nil {
		_ = eng.stop(engineExitTimeout)
		return fmt.Errorf("server: %w", err)
	}
	var l1 *layer1Writer
	if cfg.layer1.dir != "" {
		if l1, err = startLayer1(cfg.layer1); err != nil {
			_ = eng.stop(engineExitTimeout)
			return fmt.Errorf("server: %w", err)
		}
	}

	// Request contexts derive from hard; abort cancels them all when the
	// drain runs out of time.
	hard, abort := context.WithCancel(context.Background())
	defer abort()
	s := &server{cfg: cfg, log: log, served: make(chan error, 1), abort: abort, eng: eng, layer1: l1}
	s.api = &api{
		model:         cfg.model,
		info:          cfg.info,
		tokenInterval: time.Duration(cfg.tokenMS * float64(time.Millisecond)),
		slots:         runningSlots(cfg.maxRunning),
		healthy: func() bool {
			return !cfg.neverHealthy && eng.loaded.Load()
		},
		profiler: &profiler{cfg: cfg.layer2, l1: l1},
		kind:     cfg.kind,
	}
	s.api.running.lag = cfg.kind.gauge
	s.http = &http.Server{
		Handler:           cfg.misbehave.wrap(s.api, l1.watchProfile(s.api.handler())),
		BaseContext:       func(net.Listener) context.Context { return hard },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       cfg.kind.idleTimeout(),
	}
	// Shutdown runs this after closing the listener.
	s.http.RegisterOnShutdown(func() { log.Info("stopped accepting connections; draining in-flight requests") })
	// Ends when the HTTP server is shut down or closed.
	go func() { s.served <- s.http.Serve(ln) }()
	return s.run(sigs)
}

// run waits for the engine to be ready and for a reason to stop.
func (s *server) run(sigs <-chan os.Signal) error {
	var crash <-chan time.Time
	if s.cfg.engine.crashAfterS > 0 {
		t := time.NewTimer(seconds(s.cfg.engine.crashAfterS))
		defer t.Stop()
		crash = t.C
	}
	ready := s.eng.ready
	for {
		select {
		case <-ready:
			ready = nil
			if s.cfg.neverHealthy {
				s.log.Info("engine ready; /health stays 503 (--never-healthy)")
			} else {
				s.log.Info("engine ready; healthy")
			}
		case sig := <-sigs:
			s.log.Info("shutting down on signal", "signal", sig.String(), "shutdown_timeout_s", s.cfg.shutdownTimeoutS)
			return s.shutdown()
		case <-s.eng.done:
			s.abort()
			s.http.Close()
			<-s.served
			return fmt.Errorf("server: engine exited unexpectedly: %w", s.eng.err)
		case <-crash:
			return &cli.ExitError{Code: 1, Err: errors.New("server: crashing as asked (--crash-after)")}
		case err := <-s.served:
			_ = s.eng.stop(engineExitTimeout)
			return fmt.Errorf("server: serve: %w", err)
		}
	}
}

// shutdown drains in-flight requests for up to the shutdown timeout, aborts
// the rest, then tells the engine to exit and waits for it.
func (s *server) shutdown() error {
	idle := s.api.inflight.close()
	ctx, cancel := context.WithTimeout(context.Background(), seconds(s.cfg.shutdownTimeoutS))
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		s.log.Warn("drain timed out; aborting in-flight requests", "err", err)
		s.abort()
		s.http.Close()
	}
	<-s.served
	<-idle
	if s.layer1 != nil {
		if err := s.layer1.close(); err != nil {
			s.log.Warn("layer1 stream", "err", err)
		}
	}
	s.log.Info("requests drained; telling the engine to exit")
	if s.cfg.engine.engineSurvives {
		s.eng.control.Close()
		s.log.Warn("not waiting for the engine (--engine-survives)")
		return nil
	}
	if err := s.eng.stop(engineExitTimeout); err != nil {
		return fmt.Errorf("server: stop engine: %w", err)
	}
	s.log.Info("engine exited; bye")
	return nil
}

// listen binds the server's port. With --port-fallback a busy port is
// replaced by a free one, as SGLang-Omni's launcher does
// (_find_available_port: a warning, then another port), unless
// $SGLANG_OMNI_STRICT_PORT is "1", which makes the busy port an error.
func listen(cfg serverConfig, log *logger) (net.Listener, error) {
	addr := net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port))
	ln, err := listenTCP(addr, cfg.reusePort)
	if err == nil || !cfg.kind.portFallback || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	if strings.TrimSpace(os.Getenv("SGLANG_OMNI_STRICT_PORT")) == "1" {
		return nil, fmt.Errorf("port %d is already in use on %s and SGLANG_OMNI_STRICT_PORT=1 forbids falling back: %w", cfg.port, cfg.host, err)
	}
	log.Warn("port already in use; using another (--port-fallback)", "port", cfg.port)
	return listenTCP(net.JoinHostPort(cfg.host, "0"), cfg.reusePort)
}

// holdListener starts a sleeping child that inherits the listening socket,
// so that the port stays bound after this process exits.
func holdListener(ln *net.TCPListener) (*exec.Cmd, error) {
	f, err := ln.File()
	if err != nil {
		return nil, fmt.Errorf("hold port: %w", err)
	}
	defer f.Close()
	cmd, err := startSleeper(f)
	if err != nil {
		return nil, fmt.Errorf("hold port: %w", err)
	}
	// Passing f to a child put the socket, shared with ln, in blocking
	// mode; the listener needs it non-blocking again.
	rc, err := ln.SyscallConn()
	if err == nil {
		var nbErr error
		err = rc.Control(func(fd uintptr) { nbErr = syscall.SetNonblock(int(fd), true) })
		err = errors.Join(err, nbErr)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("hold port: restore non-blocking mode: %w", err)
	}
	return cmd, nil
}

// waitForFile polls for path until it exists (true) or a signal arrives
// on sigs (false).
func waitForFile(path string, sigs <-chan os.Signal) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		select {
		case <-sigs:
			return false
		case <-tick.C:
		}
	}
}
