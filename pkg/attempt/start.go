package attempt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/launch"
	"warden/pkg/safefile"
	"warden/pkg/state"
)

// startServer starts the server (and a client that starts with it),
// waits until it is ready and checks what holds its port and its
// effective configuration. readings are the GPUs before it, the
// sampler's baseline.
func (a *Attempt) startServer(ctx context.Context, readings []gpu.Reading) (Outcome, bool) {
	env := a.env
	envWritten, err := a.prepareCommands()
	if err != nil {
		return a.fail(state.ReasonHarnessError, err.Error()), false
	}
	err = a.rec.Transition(state.Starting, "", "starting server", nil)
	if werr := <-envWritten; err == nil && werr != nil {
		return a.fail(state.ReasonHarnessError, werr.Error()), false
	}
	if err != nil {
		return a.harness(err), false
	}
	a.startSampler(readings)
	srv, err := a.start("server", a.run.Server.Command, a.run.Server.Env)
	if err != nil {
		return a.fail(state.ReasonHarnessError, "start server: "+err.Error()), false
	}
	a.server, a.started = srv, srv.Started
	env.held(a.rec.Key(), len(a.gpuIDs), srv.Started)
	if a.run.ClientStart == "at-start" {
		cl, err := a.start("client", a.run.Client, a.run.Env)
		if err != nil {
			return a.stopThenFail(state.ReasonHarnessError, "start client: "+err.Error()), false
		}
		a.client = cl
	}
	err = a.probeReady(ctx, srv)
	a.recorded()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return a.stopThenInterrupt("stopped while the server was starting"), false
	case errors.Is(err, launch.ErrExited):
		return a.stopThenFail(a.serverExitReason(), fmt.Sprintf("server exited before it was ready (%s)%s", ExitText(srv.Exit()), a.oomNote())), false
	default:
		return a.stopThenFail(state.ReasonServerNotReady, fmt.Sprintf("server not ready within %.0f s: %v", a.run.Server.ReadyTimeoutS, err)), false
	}
	lv := a.checkListener(srv, "it answered the readiness probe")
	a.rec.Gate(lv)
	if !lv.Passed() {
		return a.stopThenFail(state.ReasonHarnessError, lv.Detail), false
	}
	// Ready goes with the next transition (measuring, or stopping when the
	// configuration check fails): the client's start, which it allows, is
	// recorded with measuring too.
	a.rec.Pass(state.Ready, "server healthy", map[string]float64{"startup_s": env.Now().Sub(a.started).Seconds()})
	for _, cv := range a.effectiveConfig(ctx) {
		a.rec.Gate(cv)
		if !cv.Passed() {
			return a.stopThenFail(state.ReasonConfigMismatch, cv.Detail), false
		}
	}
	return Outcome{}, true
}

// checkListener is the listener gate: what answered the readiness probe
// holds the port as the attempt's own process (the server's group or
// session, a descendant, or one its cgroup holds), not another process
// that took the port while a late-binding server loaded; when says when
// a foreign holder was found. A port whose owner cannot be told fails
// closed, as an error.
func (a *Attempt) checkListener(srv *launch.Proc, when string) gates.Verdict {
	v := gates.Verdict{Gate: "listener", Verdict: gates.Pass, Figures: map[string]float64{"port": float64(a.port)}, At: a.env.Now()}
	owners, err := launch.CheckListener(a.port, launch.InAttempt(srv.Identity, srv.Leaf()))
	var imp *launch.ImpostorError
	switch {
	case errors.As(err, &imp):
		v.Verdict, v.Detail = gates.Fail, err.Error()+": "+when
		v.Figures["impostor_pid"] = float64(imp.PID)
	case err != nil:
		v.Verdict, v.Detail = gates.Error, "who holds the port cannot be told: "+err.Error()
	default:
		v.Figures["listeners"] = float64(len(owners))
	}
	return v
}

// listenerAgain is the listener gate again while the client measures (at
// each profile window, and at the end of measuring): a server that binds
// with SO_REUSEPORT, as vLLM does, lets any process of its user join the
// port later and answer part of the requests. A foreign holder, or one
// that cannot be told, fails the run; a pass is counted, not recorded.
func (a *Attempt) listenerAgain(when string) (state.Reason, string) {
	v := a.checkListener(a.server, "it joined the port after readiness, found "+when)
	if a.rec.SetFigure("listener_checks", a.rec.Figure("listener_checks")+1); v.Passed() {
		return "", ""
	}
	a.rec.Gate(v)
	return state.ReasonHarnessError, "listener gate " + when + ": " + v.Detail
}

// probeReady polls the server's health until it answers the expected
// status, the server exits, or the protocol's ready timeout passes: as
// often as launch.ReadyPhases say, then every 250 ms (a real server loads
// for minutes).
func (a *Attempt) probeReady(ctx context.Context, srv *launch.Proc) error {
	readyCtx, cancel := context.WithTimeout(ctx, time.Duration(a.run.Server.ReadyTimeoutS*float64(time.Second)))
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d%s", a.port, a.run.Server.HealthPath)
	return launch.ProbeReady(readyCtx, url, a.run.Server.HealthStatus, 250*time.Millisecond, srv.Done())
}

// configTimeout bounds the request for the server's configuration.
const configTimeout = 30 * time.Second

// effectiveConfig checks the protocol's expected values: the log patterns
// against the server's startup output, the paths against the
// configuration the server reports at its config endpoint (kept as
// server-config.json in the attempt). It returns a verdict for each kind
// the run expects.
func (a *Attempt) effectiveConfig(ctx context.Context) []gates.Verdict {
	var logs []gates.Expect
	var paths []gates.ConfigExpect
	for _, e := range a.run.Server.Expect {
		if e.Path != "" {
			paths = append(paths, gates.ConfigExpect{Name: e.Name, Path: e.Path, Equals: e.Equals})
		} else {
			logs = append(logs, gates.Expect{Name: e.Name, Pattern: e.Pattern})
		}
	}
	var out []gates.Verdict
	if len(logs) > 0 {
		out = append(out, gates.EffectiveConfigDir(a.dir, logs, a.env.Now()))
	}
	if len(paths) > 0 {
		doc, err := a.fetchConfig(ctx)
		if err != nil {
			out = append(out, gates.Verdict{Gate: "effective-config", Verdict: gates.Error, At: a.env.Now(),
				Detail: "the server's configuration could not be read: " + err.Error()})
		} else {
			out = append(out, gates.ServerConfig(doc, paths, a.env.Now()))
		}
	}
	return out
}

// fetchConfig asks the server for its effective configuration and keeps
// the answer in the attempt directory.
func (a *Attempt) fetchConfig(ctx context.Context) ([]byte, error) {
	if a.run.Server.ConfigEndpoint == "" {
		return nil, fmt.Errorf("server %s has no config endpoint", a.run.Server.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, configTimeout)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d%s", a.port, a.run.Server.ConfigEndpoint)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, safefile.ChildLimit))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := atomicfile.WriteFile(filepath.Join(a.dir, "server-config.json"), body, 0o644, atomicfile.NoSync(), atomicfile.Beneath(a.env.Dir)); err != nil {
		a.env.Log.Warn().Err(err).Str("run", a.run.ID).Msg("keep the server's configuration")
	}
	return body, nil
}
