package attempt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/endlog"
	"warden/pkg/launch"
	"warden/pkg/phasefile"
	"warden/pkg/state"
	"warden/protocols"
)

// HarnessEndOf starts argv through l as attempt 1 of run's server, in a
// campaign on dir whose end log is open, then ends the attempt as a
// controller that cannot record its transition does (harness), and
// returns the time its processes were proven gone by.
func HarnessEndOf(l *launch.Launcher, dir, run string, argv []string) (time.Time, error) {
	env := &Env{Dir: dir, Launcher: l, Log: zerolog.Nop(), Now: time.Now}
	var err error
	if env.Ends, err = endlog.Open(dir); err != nil {
		return time.Time{}, err
	}
	defer env.Ends.Close()
	a := New(env, nil, Spec{Run: protocols.Run{ID: run}, N: 1})
	if a.server, err = l.Start(launch.Spec{Role: "server", Argv: argv, Stop: launch.StopOptions{Grace: time.Second, GroupGrace: time.Second}}); err != nil {
		return time.Time{}, err
	}
	a.harness(errors.New("record transition: no space left on device"))
	select {
	case <-a.server.Done():
	default:
		return time.Time{}, errors.New("the server outlived harness")
	}
	return time.Now(), nil
}

// MeasuredOf runs the measuring of an attempt on port as Execute does
// once its client runs: server and client started through l (the client
// given dir/phases.jsonl as $WARDEN_PHASE_FILE), the client supervised to
// its end (for at most 30 s: then interrupted), the port's holders
// checked again. Both are ended before it
// returns the reason and detail the attempt would fail with ("" when it
// would go on to stop its server and validate) and its listener_checks.
func MeasuredOf(l *launch.Launcher, dir string, port int, server, client []string) (state.Reason, string, float64, error) {
	env := &Env{Dir: dir, Launcher: l, Log: zerolog.Nop(), Now: time.Now}
	a := New(env, nil, Spec{Run: protocols.Run{ID: "r", AdmissionEnd: "phase-file", DrainS: 60, WatchdogS: 120}, N: 1, Dir: dir, Port: port})
	phases := filepath.Join(dir, "phases.jsonl")
	a.vars = map[string]string{"PHASE_FILE": phases}
	stop := func(p *launch.Proc) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = p.Shutdown(ctx)
	}
	var err error
	grace := launch.StopOptions{Grace: 5 * time.Second, GroupGrace: time.Second}
	if a.server, err = l.Start(launch.Spec{Role: "server", Argv: server, Stop: grace}); err != nil {
		return "", "", 0, err
	}
	defer stop(a.server)
	if a.client, err = l.Start(launch.Spec{Role: "client", Argv: client, Env: append(os.Environ(), "WARDEN_PHASE_FILE="+phases), Stop: grace}); err != nil {
		return "", "", 0, err
	}
	defer stop(a.client)
	a.phases = phasefile.NewWatcher(phases)
	defer a.phases.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // interrupted past it
	defer cancel()
	reason, detail := a.measure(ctx)
	return reason, detail, a.rec.Figure("listener_checks"), nil
}
