package main

import (
	"context"
	"sync/atomic"
	"time"
)

// drainStall is the server's --stall-from-request misbehaviour: from the
// Nth generation request on, each waits --stall-s seconds before its first
// token, so the requests a client still has in flight when its admission
// stops keep its drain going (a server that is slow to finish its last
// requests, or hangs on them).
type drainStall struct {
	from  int     // first request (1-based) that stalls; 0: none
	stall float64 // seconds each stalled request waits
	n     atomic.Int64
}

// serverStall is the API parent's stall, set by its flags.
var serverStall drainStall

// flagSet is what the stall's flags are added to (the server's flags).
type flagSet interface {
	IntVar(p *int, name string, value int, usage string)
	Float64Var(p *float64, name string, value float64, usage string)
}

func addDrainStallFlags(f flagSet) {
	f.IntVar(&serverStall.from, "stall-from-request", 0, "misbehave: from this generation request on (1-based; 0 never), each waits --stall-s before its first token")
	f.Float64Var(&serverStall.stall, "stall-s", 0, "with --stall-from-request: seconds each stalled request waits")
}

// hold makes a stalled request wait, or returns the context's error.
func (s *drainStall) hold(ctx context.Context) error {
	if s.from <= 0 || s.stall <= 0 || s.n.Add(1) < int64(s.from) {
		return nil
	}
	t := time.NewTimer(time.Duration(s.stall * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
