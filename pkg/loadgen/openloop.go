package loadgen

import (
	"context"
	"math"
)

// openloop.go: an open loop's admission. Dispatchers pace the one
// schedule; admitted requests go to senders that outlive them.

// DispatcherRPS is the open-loop rate one dispatcher is given when
// Config.Dispatchers is 0. A dispatcher spends a few microseconds a
// request (the body, the admission, the sender's start); the senders run
// on every core anyway. Each added dispatcher is one more locked thread
// that must win a scheduler slot back from the senders at each wake-up:
// at 10,000 requests/s on two cores two dispatchers had a 20-30x worse
// p99 schedule error than one, so one carries any rate below this.
const DispatcherRPS = 50000

// SpareProcs is how many Ps (runtime.GOMAXPROCS) a process should add,
// before Run, for a run of c when it runs on procs: one per open-loop
// dispatcher, none for a closed loop. A dispatcher's sleep is a system
// call, whose P goes to the senders meanwhile; with every P busy, the
// dispatcher that wakes waits for one, and its request is late by that
// wait. With a spare P it finds one idle: at 10,000 requests/s on the
// 2-core VM (client on both cores, under other load) the p99 schedule
// error was 3.2-17 ms with three Ps against 4.0-62 ms with two, lower in
// 10 of 11 alternate runs. The process sets it (cmd/loadgen), not Run:
// GOMAXPROCS is the process's.
func (c *Config) SpareProcs(procs int) int {
	if c.Rate == 0 {
		return 0
	}
	return dispatchers(c.Dispatchers, c.Rate, procs)
}

// dispatchers is the number of open-loop dispatchers: n when set, else
// one per DispatcherRPS of rate, between 1 and procs.
func dispatchers(n int, rate float64, procs int) int {
	if n > 0 {
		return n
	}
	return max(1, min(procs, int(math.Ceil(rate/DispatcherRPS))))
}

// dispatch admits dispatcher j's share of an open-loop schedule: every
// request i with i mod k = j, each at its planned time, at most
// MaxConcurrency outstanding over all dispatchers (sem). Each dispatcher
// draws the whole schedule from its own planner of the same class, rate
// and seed, so the k of them follow one sequence of planned times and
// lag is measured against it. It runs on a locked OS thread and sleeps
// with clock_nanosleep until each planned instant; the body of the next
// request is built before its wait.
func (r *run) dispatch(ctx, reqCtx context.Context, sem chan struct{}, j, k int) {
	defer r.wg.Done()
	var p pacer
	p.lock()
	defer p.unlock()
	planner, err := NewPlanner(r.cfg.Arrival, r.cfg.Rate, r.cfg.Seed)
	if err != nil {
		r.signalFatal(err)
		return
	}
	for i := 0; ; i++ {
		planned := r.t0 + int64(planner.Next())
		if i%k != j {
			continue
		}
		if i >= r.m.Len() {
			// Only a request planned before admission ends needs a row.
			if p.waitUntil(ctx, r.stopAdmit, planned) {
				r.signalExhausted()
			}
			return
		}
		if !r.dispatchOne(ctx, reqCtx, &p, sem, i, planned) {
			return
		}
	}
}

// dispatchOne sends request i at planned; false when admission ended.
func (r *run) dispatchOne(ctx, reqCtx context.Context, p *pacer, sem chan struct{}, i int, planned int64) bool {
	body, err := r.body(i)
	if err != nil {
		r.signalFatal(err)
		return false
	}
	if !p.waitUntil(ctx, r.stopAdmit, planned) {
		return false
	}
	select {
	case sem <- struct{}{}:
	default:
		select {
		case sem <- struct{}{}:
		case <-r.stopAdmit:
			return false
		case <-ctx.Done():
			return false
		}
	}
	s := r.admit(i, planned)
	if s == nil {
		<-sem
		return false
	}
	j := sendJob{s: s, body: body, e: r.expect(i), planned: planned}
	select {
	case r.jobs <- j: // an idle sender took it
	default:
		r.wg.Add(1)
		go r.openSender(reqCtx, sem, j)
	}
	return true
}

// sendJob is an admitted open-loop request, handed to a sender.
type sendJob struct {
	s       *slot
	body    []byte
	e       expect
	planned int64
}

// openSender sends j, then each request a dispatcher hands it, until
// admission ends while it is idle. Senders outlive their requests, so
// that a request costs no goroutine start and no stack growth (in the
// profile of a 5,000 requests/s open loop, goroutine starts, ends and
// stack copies were 14% of the client's CPU); a dispatcher starts one
// only when none is idle, so there are at most as many as requests were
// outstanding at once.
func (r *run) openSender(reqCtx context.Context, sem chan struct{}, j sendJob) {
	defer r.wg.Done()
	for {
		r.finish(j.s, r.sendBy(reqCtx, j.body, j.e, j.planned))
		<-sem
		select {
		case j = <-r.jobs:
		case <-r.stopAdmit:
			return
		}
	}
}
