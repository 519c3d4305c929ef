package main

import (
	"errors"
	"net/http"

	"warden/pkg/contract"
)

// Layer-1 misbehaviour beyond the accounting breaks: records whose figures
// break a rule of the seed's timeline while the stream itself stays valid.
//
//	--layer1-queue-after-profile N: from the first /stop_profile on, every
//	record's num_waiting_reqs is N (otherwise 1), so the waiting queue never
//	returns to its clean-segment median in a recovery.

type layer1Misbehave struct {
	queueAfterProfile int64
}

// int64Flags is the part of a flag set the switches register with.
type int64Flags interface {
	Int64Var(p *int64, name string, value int64, usage string)
}

func addLayer1MisbehaveFlags(f int64Flags, m *layer1Misbehave) {
	f.Int64Var(&m.queueAfterProfile, "layer1-queue-after-profile", 0,
		"misbehave: from the first /stop_profile on, every Layer-1 record's num_waiting_reqs is this (0: off)")
}

func (m layer1Misbehave) validate() error {
	if m.queueAfterProfile < 0 {
		return errors.New("--layer1-queue-after-profile must not be negative")
	}
	return nil
}

// apply changes one record as the switches ask; profileStop is when the
// first /stop_profile returned (CLOCK_MONOTONIC), 0 before.
func (m layer1Misbehave) apply(rec *contract.Layer1Record, profileStop int64) {
	if m.queueAfterProfile > 0 && profileStop > 0 && rec.SubmitMonoNS >= profileStop {
		rec.NumWaitingReqs = m.queueAfterProfile
	}
}

// watchProfile wraps the API's handler to note when the first
// /stop_profile returned. A nil writer watches nothing.
func (w *layer1Writer) watchProfile(h http.Handler) http.Handler {
	if w == nil {
		return h
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(rw, r)
		if r.Method == http.MethodPost && r.URL.Path == "/stop_profile" {
			w.mu.Lock()
			if w.profileStop == 0 {
				// steps are generated under mu only once their submit time
				// has come, so every step submitted from now on sees it
				w.profileStop = w.clock.Now()
			}
			w.mu.Unlock()
		}
	})
}
