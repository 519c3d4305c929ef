package runner

import (
	"errors"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/endlog"
	"warden/pkg/launch"
	"warden/protocols"
)

// HarnessEndOf starts argv through l as attempt 1 of run's server, in a
// runner on dir whose end log is open, then ends the attempt as a
// controller that cannot record its transition does (harness), and
// returns the time its processes were proven gone by.
func HarnessEndOf(l *launch.Launcher, dir, run string, argv []string) (time.Time, error) {
	c := &Runner{dir: dir, starter: l, log: zerolog.Nop(), now: time.Now}
	var err error
	if c.ends, err = endlog.Open(dir); err != nil {
		return time.Time{}, err
	}
	defer c.ends.Close()
	a := &attempt{c: c, run: protocols.Run{ID: run}, n: 1}
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
