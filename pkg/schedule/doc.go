// Package schedule is the campaign's scheduling policy: Decide, a pure
// function of what the records and the campaign loop know (a View), says
// what to launch now (units of runs on free slots, under the regime in
// force, with the budget reserved for them) and whether the campaign must
// stop, and why. The loop (pkg/runner) reads the View, calls Decide and
// carries the Decision out. What the end of one attempt means for its run
// is pkg/outcome's policy, which Decide reads through each UnitEnd.
//
// It does no I/O: the layout test holds it to importing no os, net, io,
// os/exec, syscall, bbolt or launcher, and to knowing no attempt or
// campaign loop. Every decision is a value a test can compare.
//
// # Order of a decision
//
//	not running                           -> nothing
//	a unit ended failed for good          -> Stop (the outcome policy's reason)
//	units ended past the stop thresholds  -> Stop (quarantined or failed fraction)
//	runs recorded unlike the plan's       -> Err
//	  (capacity points judged unlike done)
//	a co-location gate that erred once    -> Launch its block again
//	every phase's runs done               -> Complete, once nothing is active
//	a co-location phase                   -> Launch its blocks
//	a matrix phase:
//	  a gate that keeps erring            -> Stop (gate-error)
//	  no regime authorized                -> Stop (no-regime)
//	  the wave on the free slots          -> Launch (and the regime, if new);
//	    a capacity point only once its search (Search) calls for it, at
//	    the rate the search decided
//	nothing to launch, nothing active,
//	  runs awaiting an amendment          -> Stop (awaiting-amendment)
//	the budget refuses the wave           -> Stop (budget)
package schedule
