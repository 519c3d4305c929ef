package attempt

import (
	"errors"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/endlog"
	"warden/pkg/launch"
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
