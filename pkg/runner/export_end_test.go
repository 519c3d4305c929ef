package runner

import (
	"errors"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/launch"
	"warden/protocols"
)

// RecordEnd writes one record to dir's end log, as a controller that
// proved attempt n of run gone at t but could not record its end does.
func RecordEnd(dir, run string, n int, t time.Time) error {
	l, err := openEndLog(dir)
	if err != nil {
		return err
	}
	defer l.close()
	return l.record(run, n, t)
}

// EndLogSlots is how many records the end log keeps.
const EndLogSlots = endSlots

// ReadEndLog is readEndLog, keyed "run/aN".
func ReadEndLog(dir string) (map[string]time.Time, error) {
	m, err := readEndLog(dir)
	out := map[string]time.Time{}
	for k, v := range m {
		out[k] = v
	}
	return out, err
}

// SkipEndLogTo makes the next record of dir's end log the one of sequence
// seq, as after seq records.
func SkipEndLogTo(dir string, seq uint64, run string, n int, t time.Time) error {
	l, err := openEndLog(dir)
	if err != nil {
		return err
	}
	defer l.close()
	l.next = seq
	return l.record(run, n, t)
}

// HarnessEndOf starts argv through l as attempt 1 of run's server, in a
// runner on dir whose end log is open, then ends the attempt as a
// controller that cannot record its transition does (harness), and
// returns the time its processes were proven gone by.
func HarnessEndOf(l *launch.Launcher, dir, run string, argv []string) (time.Time, error) {
	c := &Runner{dir: dir, starter: l, log: zerolog.Nop(), now: time.Now}
	var err error
	if c.ends, err = openEndLog(dir); err != nil {
		return time.Time{}, err
	}
	defer c.ends.close()
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
