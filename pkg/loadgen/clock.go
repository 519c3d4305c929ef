package loadgen

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Clock maps Go times to CLOCK_MONOTONIC nanoseconds, the clock the
// controller's phase lines and the server's step records use, so that a
// request's times can be joined with theirs. It holds one anchor pair (a
// wall-clock time and the monotonic reading taken with it); every other
// instant is converted through Go's monotonic reading, which on Linux is
// CLOCK_MONOTONIC itself.
type Clock struct {
	wall time.Time // with Go's monotonic reading
	mono int64     // CLOCK_MONOTONIC at wall
}

// NewClock takes the anchor now.
func NewClock() (*Clock, error) {
	var ts unix.Timespec
	wall := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return nil, fmt.Errorf("monotonic clock: %w", err)
	}
	return &Clock{wall: wall, mono: ts.Nano()}, nil
}

// Mono converts t (which must carry Go's monotonic reading, as time.Now
// does) to CLOCK_MONOTONIC nanoseconds.
func (c *Clock) Mono(t time.Time) int64 { return c.mono + int64(t.Sub(c.wall)) }

// Now returns the current CLOCK_MONOTONIC time in nanoseconds.
func (c *Clock) Now() int64 { return c.Mono(time.Now()) }

// Time converts CLOCK_MONOTONIC nanoseconds back to a Go time.
func (c *Clock) Time(mono int64) time.Time { return c.wall.Add(time.Duration(mono - c.mono)) }

// Anchor is the wall-clock time and the monotonic reading taken with it.
func (c *Clock) Anchor() (time.Time, int64) { return c.wall, c.mono }

// sleepSlice bounds one kernel sleep of waitUntil, so that a stop is seen
// within it.
const sleepSlice = 10 * time.Millisecond

// pacer waits until absolute monotonic instants with clock_nanosleep on an
// OS thread of its own: Go's timers wake about half a millisecond late on
// Linux, the kernel's absolute sleep a few tens of microseconds. Its
// methods run on the goroutine that called lock.
type pacer struct{}

// lock pins the calling goroutine to its OS thread for waitUntil; undo
// with unlock.
func (pacer) lock()   { runtime.LockOSThread() }
func (pacer) unlock() { runtime.UnlockOSThread() }

// waitUntil sleeps until CLOCK_MONOTONIC reaches target, or until stop is
// closed or ctx is done (then it returns false).
func (pacer) waitUntil(ctx context.Context, stop <-chan struct{}, target int64) bool {
	for {
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		default:
		}
		var now unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
			return false
		}
		left := target - now.Nano()
		if left <= 0 {
			return true
		}
		until := target
		if left > int64(sleepSlice) {
			until = now.Nano() + int64(sleepSlice)
		}
		ts := unix.NsecToTimespec(until)
		// EINTR (a signal) just loops.
		_ = unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
	}
}
