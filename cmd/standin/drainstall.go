package main

import (
	"context"
	"sync"
	"time"
)

// drainStall is the server's --stall-after-s misbehaviour: a generation
// request that arrives --stall-after-s seconds or more after the first one
// waits --stall-s seconds before its first token, so the requests a client
// still has in flight when its admission stops keep its drain going (a
// server slow to finish its last requests, or hung on them), while the
// earlier ones complete.
type drainStall struct {
	after float64 // seconds after the first request; negative: never
	stall float64 // seconds each stalled request waits

	once  sync.Once
	first time.Time
}

// serverStall is the API parent's stall, set by its flags.
var serverStall = drainStall{after: -1}

// flagSet is what the stall's flags are added to (the server's flags).
type flagSet interface {
	Float64Var(p *float64, name string, value float64, usage string)
}

func addDrainStallFlags(f flagSet) {
	f.Float64Var(&serverStall.after, "stall-after-s", -1, "misbehave: a generation request arriving this many seconds or more after the first one waits --stall-s before its first token (negative: never)")
	f.Float64Var(&serverStall.stall, "stall-s", 0, "with --stall-after-s: seconds each stalled request waits")
}

// hold makes a stalled request wait, or returns the context's error.
func (s *drainStall) hold(ctx context.Context) error {
	if s.after < 0 || s.stall <= 0 {
		return nil
	}
	now := time.Now()
	s.once.Do(func() { s.first = now })
	if now.Sub(s.first) < time.Duration(s.after*float64(time.Second)) {
		return nil
	}
	return sleepCtx(ctx, time.Duration(s.stall*float64(time.Second)))
}
