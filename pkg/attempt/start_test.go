package attempt_test

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"testing"

	"warden/pkg/attempt"
	"warden/pkg/dirlayout"
	"warden/pkg/record"
	"warden/pkg/state"
	"warden/protocols"
)

// happy is the path of an attempt that completes.
const happy = "reserved preflight starting ready measuring stopping cleanup validating complete"

// startFailed is the path of an attempt whose start failed with reason
// once it may have started a process: through stopping and cleanup.
func startFailed(reason string) string {
	return "reserved preflight starting stopping:" + reason + " cleanup failed:" + reason
}

// readyFailed is the path of an attempt that failed with reason once its
// server was ready.
func readyFailed(reason string) string {
	return "reserved preflight starting ready stopping:" + reason + " cleanup failed:" + reason
}

// startCases are the start's outcomes (start.go, launch.go): the launch
// variables and environment, the server's start, its readiness, the
// listener on its port and its effective configuration.
var startCases = []phaseCase{
	{
		name: "a needed run's directory not given",
		prep: func(h *harness) { h.run.NeedVars = map[string]string{"NEED_SATURATION_DIR": "p0.saturation"} },
		path: "reserved preflight failed:harness-error",
		check: func(h *harness) {
			h.wantDetail("run p1.saturation needs p0.saturation: no result directory given")
			h.nothingStarted()
		},
	},
	{
		name: "a needed run's directory not resolved",
		prep: func(h *harness) {
			h.run.NeedVars = map[string]string{"NEED_SATURATION_DIR": "p0.saturation"}
			h.env.NeedDirs = func(protocols.Run) (map[string]string, error) {
				return nil, errors.New("run p0.saturation is not done")
			}
		},
		path: "reserved preflight failed:harness-error",
		check: func(h *harness) {
			h.wantDetail("run p0.saturation is not done")
			h.nothingStarted()
		},
	},
	{
		name: "a needed run's directory exported",
		prep: func(h *harness) {
			h.run.NeedVars = map[string]string{"NEED_SATURATION_DIR": "p0.saturation"}
			h.env.NeedDirs = func(protocols.Run) (map[string]string, error) {
				return map[string]string{"NEED_SATURATION_DIR": "/results/p0"}, nil
			}
			h.run.Client = shell(`test "${NEED_SATURATION_DIR}" = /results/p0 && exec ` + phaseClientBin + ` drain drained done`)
		},
		path: happy,
	},
	{
		name: "environment.json cannot be written",
		prep: func(h *harness) {
			if err := os.MkdirAll(filepath.Join(h.adir, "environment.json", "in-the-way"), 0o755); err != nil {
				h.t.Fatal(err)
			}
		},
		path: startFailed("harness-error"),
		check: func(h *harness) {
			h.wantDetail("environment.json")
			h.nothingStarted()
		},
	},
	{
		name: "the record of the start refused",
		prep: func(h *harness) { h.refuseAt(state.Starting) },
		path: "starting!",
		check: func(h *harness) {
			h.wantDetail("no space left on device")
			h.nothingStarted()
		},
	},
	{
		name: "server command does not expand",
		prep: func(h *harness) {
			h.run.Server.Command = protocols.CommandSpec{Argv: []string{standinBin, "server", "${NO_SUCH_VARIABLE}"}}
		},
		path: startFailed("harness-error"),
		check: func(h *harness) {
			h.wantDetail("start server: ", "NO_SUCH_VARIABLE")
			h.nothingStarted()
		},
	},
	{
		name: "server cannot be started",
		prep: func(h *harness) {
			h.run.Server.Command = protocols.CommandSpec{Argv: []string{filepath.Join(h.t.TempDir(), "no-such-server")}}
		},
		path: startFailed("harness-error"),
		check: func(h *harness) {
			h.wantDetail("start server: ")
			h.nothingStarted()
		},
	},
	{
		name: "client started with the server cannot be started",
		prep: func(h *harness) {
			h.run.ClientStart = "at-start"
			h.run.Client = protocols.CommandSpec{Argv: []string{filepath.Join(h.t.TempDir(), "no-such-client")}}
		},
		path: startFailed("harness-error"),
		check: func(h *harness) {
			h.wantDetail("start client: ")
			if got := h.rec.signalsTo("server"); !strings.HasPrefix(got, "SIGTERM/pid") {
				h.t.Fatalf("server signals %q: want it stopped through its API parent", got)
			}
			h.chargedOnce()
		},
	},
	{
		// the client's start is recorded at once, beside the server's,
		// never with the transition to measuring
		name: "client starts with the server",
		prep: func(h *harness) {
			h.run.ClientStart = "at-start"
			h.at(state.Measuring, func(rep record.Report) {
				if len(rep.Procs) != 0 {
					h.t.Errorf("measuring records processes %+v: the client started with the server is recorded at its start", rep.Procs)
				}
			})
		},
		path: happy,
		check: func(h *harness) {
			ps := h.rec.procs()
			if len(ps) != 2 || ps[0].Role != "server" || ps[1].Role != "client" {
				h.t.Fatalf("processes %+v", ps)
			}
		},
	},
	{
		// a client started once the server is ready is recorded in the
		// transition to measuring that follows its start
		name: "client starts once the server is ready",
		prep: func(h *harness) {
			h.at(state.Measuring, func(rep record.Report) {
				if len(rep.Procs) != 1 || rep.Procs[0].Role != "client" {
					h.t.Errorf("measuring records processes %+v, want the client", rep.Procs)
				}
			})
		},
		path: happy,
		check: func(h *harness) {
			if s, ok := h.rec.entered(state.Measuring); !ok || s.From != state.Ready {
				h.t.Fatalf("measuring entered from %s (%v), want ready", s.From, ok)
			}
			if s, _ := h.rec.entered(state.Ready); s.Figures["startup_s"] <= 0 {
				h.t.Fatalf("ready recorded with figures %v, want its startup_s", s.Figures)
			}
		},
	},
	{
		// any run id the plan accepts keeps containment: a leaf cgroup
		// name too long or odd is hashed (the campaign's own cgroup, named
		// after the protocol, is the controller's)
		name: "a run id of 121 characters keeps containment",
		prep: func(h *harness) {
			h.withCgroups()
			h.run.ID = "p" + strings.Repeat("x", 109) + ".saturation"
			h.adir = dirlayout.AttemptDir(h.dir, h.run.ID, 1)
		},
		path: happy,
		check: func(h *harness) {
			if !h.env.Cgroups.Available() {
				h.t.Logf("cgroup v2 is not writable here (%s): containment by process group", h.env.Cgroups.Mode())
				return
			}
			for _, p := range h.rec.procs() {
				if p.Cgroup == "" {
					h.t.Errorf("%s pid %d is in no cgroup although cgroup v2 is writable", p.Role, p.PID)
				}
			}
		},
	},
	{
		name: "stopped while the server starts",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--load-s", "30")
			h.stopAt(state.Starting, nil)
		},
		path: "reserved preflight starting interrupted:interrupted",
		check: func(h *harness) {
			h.wantDetail("stopped while the server was starting")
			h.chargedOnce()
		},
	},
	{
		name: "budget cap while the server starts",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--load-s", "30")
			h.stopAt(state.Starting, attempt.ErrBudgetExhausted)
		},
		path: "reserved preflight starting interrupted:budget-exhausted",
		check: func(h *harness) {
			h.wantDetail("the campaign's GPU time reached its cap: stopped while the server was starting")
			h.chargedOnce()
		},
	},
	{
		// (its engine holds no GPU memory: one that held some and died
		// before a sample's look at the attempt's groups saw it would be
		// judged another's, see exitServer)
		name: "server exits before ready",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--load-s", "30", "--crash-after", "0.1", "--gpu-mem-mib", "0")
		},
		path: startFailed("server-exit"),
		check: func(h *harness) {
			h.wantDetail("server exited before it was ready (exit code 1)")
			if e, ok := h.rec.exitOf("server"); !ok || e.Code != 1 {
				h.t.Fatalf("server exit %+v (%v)", e, ok)
			}
			h.chargedOnce()
		},
	},
	{
		// seed 002 stop condition 2: GPU OOM
		name: "OOM in its output",
		prep: func(h *harness) {
			h.run.Server.Command = shell(`echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2; exit 1`)
		},
		path: startFailed("oom"),
		check: func(h *harness) {
			h.wantDetail("server exited before it was ready (exit code 1)", `its output says "CUDA out of memory"`)
		},
	},
	{
		name: "ready timeout",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--never-healthy")
			h.run.Server.ReadyTimeoutS = 1
		},
		path: startFailed("server-not-ready"),
		check: func(h *harness) {
			h.wantDetail("server not ready within 1 s")
			if got := h.rec.signalsTo("server"); !strings.HasPrefix(got, "SIGTERM/pid") {
				h.t.Fatalf("server signals %q", got)
			}
			h.chargedOnce()
		},
	},
	{
		// A server that binds its port late (SGLang binds after loading
		// its model; the stand-in with --listen-after never binds here)
		// leaves the port free after preflight. Another process that takes
		// it answers the readiness probe; the listener gate finds its
		// socket is not the attempt's, before any client measures it.
		name: "listener impostor",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--listen-after", filepath.Join(h.t.TempDir(), "never"))
			h.run.Server.ReadyTimeoutS = 60
			h.at(state.Starting, func(record.Report) { h.takePort() })
		},
		path:  startFailed("harness-error"),
		gates: "preflight:pass cpu-local:pass port:pass listener:fail cleanup:pass gpu-processes:pass",
		check: func(h *harness) {
			v := h.gate("listener")
			if !strings.Contains(v.Detail, "impostor") || !strings.Contains(v.Detail, "pid "+strconv.Itoa(os.Getpid())) || v.Figures["impostor_pid"] != float64(os.Getpid()) {
				h.t.Fatalf("listener gate %+v, want a fail naming pid %d", v, os.Getpid())
			}
			h.wantDetail("impostor")
		},
	},
	{
		// SGLang-Omni moves to another port when its port is busy, unless
		// SGLANG_OMNI_STRICT_PORT=1, which the sglang-omni kind sets
		// (docs/servers.md): the port taken between the port gate and the
		// server's bind, the strict server exits and the run fails
		// server-exit, naming the port, instead of a server serving
		// elsewhere while another process answers on its port.
		name: "strict port taken after the port gate",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--port-fallback", "--gpu-mem-mib", "0")
			h.run.Server.Env = map[string]string{"SGLANG_OMNI_STRICT_PORT": "1"}
			// a holder that answers nothing: the exit, not the listener
			// gate, is what ends the attempt
			h.at(state.Starting, func(record.Report) { h.holdPort() })
		},
		path: startFailed("server-exit"),
		check: func(h *harness) {
			h.wantDetail("server exited before it was ready (exit code 1)")
			b, _ := os.ReadFile(filepath.Join(h.adir, "server.err"))
			if out := string(b); !strings.Contains(out, "SGLANG_OMNI_STRICT_PORT=1 forbids falling back") {
				h.t.Fatalf("server output %q, want the strict port's refusal", out)
			}
		},
	},
	{
		// without the strict port the server serves elsewhere and the
		// process on its port answers the probe: the listener gate is then
		// the only guard, and it holds
		name: "port taken after the port gate, the server moved",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--port-fallback")
			h.at(state.Starting, func(record.Report) { h.takePort() })
		},
		path:  startFailed("harness-error"),
		gates: "preflight:pass cpu-local:pass port:pass listener:fail cleanup:pass gpu-processes:pass",
		check: func(h *harness) {
			if v := h.gate("listener"); !strings.Contains(v.Detail, "impostor") || v.Figures["impostor_pid"] != float64(os.Getpid()) {
				h.t.Fatalf("listener gate %+v, want a fail naming pid %d", v, os.Getpid())
			}
		},
	},
	{
		name: "listener is the server's own",
		path: happy,
		check: func(h *harness) {
			if v := h.gate("listener"); v.Verdict != state.VerdictPass || v.Figures["listeners"] < 1 || v.Figures["port"] != float64(h.port) {
				h.t.Fatalf("listener gate %+v", v)
			}
		},
	},
	{
		// seed 002 stop condition 1: the effective values differ
		name: "config mismatch in the startup log",
		prep: func(h *harness) {
			h.run.Server.Expect = []protocols.ExpectSpec{{Name: "batched", Pattern: `max_num_batched_tokens=2048\b`}}
		},
		path:  readyFailed("config-mismatch"),
		gates: "preflight:pass cpu-local:pass port:pass listener:pass effective-config:fail cleanup:pass gpu-processes:pass",
		check: func(h *harness) { h.wantDetail("max_num_batched_tokens") },
	},
	{
		// the effective configuration read from the server's own API
		// (vLLM's /server_info?config_format=json, as the stand-in serves
		// it), beside a log pattern that matches
		name: "config reported otherwise by the server",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--max-num-seqs", "64", "--report-max-num-seqs", "1024")
			h.run.Server.Expect = append(h.run.Server.Expect, maxNumSeqs64)
		},
		path:  readyFailed("config-mismatch"),
		gates: "preflight:pass cpu-local:pass port:pass listener:pass effective-config:pass effective-config:fail cleanup:pass gpu-processes:pass",
		check: func(h *harness) {
			if v := h.gate("effective-config"); !strings.Contains(v.Detail, "is 1024, want 64") {
				h.t.Fatalf("effective-config gate %+v", v)
			}
		},
	},
	{
		name: "config as the server reports it",
		prep: func(h *harness) {
			h.run.Server.Command = standinServer("--max-num-seqs", "64")
			h.run.Server.Expect = append(h.run.Server.Expect, maxNumSeqs64)
		},
		path: happy,
		check: func(h *harness) {
			if v := h.gate("effective-config"); v.Verdict != state.VerdictPass || v.Figures["max_num_seqs"] != 64 {
				h.t.Fatalf("effective-config gate %+v", v)
			}
			b, err := os.ReadFile(filepath.Join(h.adir, "server-config.json"))
			if err != nil || !json.Valid(b) {
				h.t.Fatalf("the server's configuration was not kept: %v %q", err, b)
			}
		},
	},
	{
		// fail closed: a configuration that cannot be read is no match
		name: "config cannot be read",
		prep: func(h *harness) {
			h.run.Server.ConfigEndpoint = "/no-such-endpoint"
			h.run.Server.Expect = []protocols.ExpectSpec{maxNumSeqs64}
		},
		path:  readyFailed("config-mismatch"),
		gates: "preflight:pass cpu-local:pass port:pass listener:pass effective-config:error cleanup:pass gpu-processes:pass",
		check: func(h *harness) { h.wantDetail("the server's configuration could not be read") },
	},
	{
		name: "no config endpoint",
		prep: func(h *harness) {
			h.run.Server.ConfigEndpoint = ""
			h.run.Server.Expect = []protocols.ExpectSpec{maxNumSeqs64}
		},
		path: readyFailed("config-mismatch"),
		check: func(h *harness) {
			h.wantDetail("the server's configuration could not be read", "server standin has no config endpoint")
		},
	},
}

// maxNumSeqs64 expects the scheduler's max_num_seqs of 64 in the server's
// configuration.
var maxNumSeqs64 = protocols.ExpectSpec{Name: "max_num_seqs", Path: "vllm_config.scheduler_config.max_num_seqs", Equals: json.RawMessage("64")}

func TestStart(t *testing.T) {
	t.Parallel()
	runCases(t, startCases)
}

// takePort listens on the attempt's port from the test's process and
// answers every request 200, until the test ends: another process that
// took the port after the port gate.
func (h *harness) takePort() {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(h.port))
	if err != nil {
		h.t.Errorf("take the attempt's port: %v", err)
		return
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })}
	go srv.Serve(ln)
	h.t.Cleanup(func() { srv.Close() })
}

// holdPort listens on the attempt's port from the test's process and
// answers nothing (connections wait in its backlog), until the test ends.
func (h *harness) holdPort() {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(h.port))
	if err != nil {
		h.t.Errorf("take the attempt's port: %v", err)
		return
	}
	h.t.Cleanup(func() { ln.Close() })
}
