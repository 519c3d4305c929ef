#!/usr/bin/env python3
"""How often a pattern passes seed 002's representativeness rule on
scripts/gpu_server.py's scheduler, without a GPU.

The rule: for scheduled tokens, prefill fraction and decode batch size,
SMD = (mean_profile - mean_clean) / pooled_sd over a window's eight active
steps against the adjacent clean segment's steps (a constant feature by
exact equality); |SMD| > 0.25 in either of the two windows invalidates the
load point. This script runs the engine's own Engine.schedule (the same
code, imported) on token counts alone, under a closed loop (saturation: a
deep queue, so step timing plays no part) or a steady open loop (moderate:
arrivals in continuous time against steps of a fixed length with an
optional jitter), and places a clean segment and two 2+8 windows at random
starts. It prints the fraction of trials in which both windows pass, and
the median of the worst |SMD|.

  bench/smd-sim.py --input 128:512 --output 64                 # the old P01s at saturation
  bench/smd-sim.py --input 1009 --output 16 --load moderate --rate-per-step 1.2
"""
import argparse
import collections
import math
import os
import random
import statistics
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import gpu_server  # noqa: E402  (the scheduler under test)


def lengths(spec):
    lo, _, hi = spec.partition(":")
    lo, hi = int(lo), int(hi or lo)
    return lambda rng: rng.randint(lo, hi)


def smd(p, c):
    """Seed 002's SMD; a constant feature on both sides compares exactly."""
    if len(set(p)) == 1 and len(set(c)) == 1:
        return 0.0 if p[0] == c[0] else math.inf
    mp, mc = statistics.fmean(p), statistics.fmean(c)
    vp, vc = statistics.variance(p), statistics.variance(c)
    pooled = math.sqrt(((len(p) - 1) * vp + (len(c) - 1) * vc) / (len(p) + len(c) - 2))
    if pooled == 0:
        return 0.0 if mp == mc else math.inf
    return (mp - mc) / pooled


def simulate(a, rng):
    """The feature series (scheduled tokens, prefill fraction, decode batch)
    of a.steps engine steps."""
    inp, out = lengths(a.input), lengths(a.output)
    eng = types.SimpleNamespace(args=types.SimpleNamespace(max_num_batched_tokens=a.max_num_batched_tokens,
                                                           max_num_seqs=a.max_num_seqs),
                                running=[], waiting=collections.deque())
    new = lambda: gpu_server.Request(0, [1] * inp(rng), out(rng), True)  # noqa: E731
    if a.load == "saturation":
        eng.waiting.extend(new() for _ in range(a.concurrency))
    t, next_arrival, feats = 0.0, 0.0, []
    for _ in range(a.steps):
        if a.load == "moderate":
            t += 1 + rng.uniform(-a.jitter, a.jitter)  # one step, in steps
            while next_arrival <= t:
                eng.waiting.append(new())
                next_arrival += 1 / a.rate_per_step
        sched, _ = gpu_server.Engine.schedule(eng)
        tpre = tdec = 0
        for r, n in sched:  # what Engine.step does with the schedule
            if r.computed < len(r.prompt):
                tpre += n
                r.computed += n
                if r.computed == len(r.prompt):
                    r.output.append(0)
            else:
                tdec += 1
                r.output.append(0)
        done = [r for r in eng.running if len(r.output) >= r.max_tokens]
        eng.running = [r for r in eng.running if len(r.output) < r.max_tokens]
        if a.load == "saturation":
            eng.waiting.extend(new() for _ in done)  # the closed loop's next requests
        feats.append((tpre + tdec, tpre / (tpre + tdec) if tpre + tdec else 0.0, tdec))
    return feats


def trial(feats, a, rng):
    span = a.clean_steps + 2 * (a.gap + 10)
    start = rng.randrange(a.steps // 4, len(feats) - span)
    clean = feats[start:start + a.clean_steps]
    w, worst = start + a.clean_steps + a.gap, 0.0
    for _ in range(2):
        active = feats[w + 2:w + 10]  # 2 warm-up steps, 8 active
        for i in range(3):
            worst = max(worst, abs(smd([f[i] for f in active], [f[i] for f in clean])))
        w += 10 + a.gap
    return worst


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", default="128:512", help="prompt tokens: N or LO:HI (uniform)")
    p.add_argument("--output", default="64", help="output tokens: N or LO:HI (uniform)")
    p.add_argument("--load", choices=("saturation", "moderate"), default="saturation")
    p.add_argument("--concurrency", type=int, default=256, help="closed-loop streams at saturation")
    p.add_argument("--rate-per-step", type=float, default=0.6, help="steady arrivals per step at moderate")
    p.add_argument("--jitter", type=float, default=0.0, help="each step's length varies by up to this fraction")
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--clean-steps", type=int, default=20, help="steps in the adjacent clean segment")
    p.add_argument("--gap", type=int, default=35, help="steps between the segment and a window, and between windows")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--seed", type=int, default=20261201)
    a = p.parse_args()
    rng = random.Random(a.seed)
    feats = simulate(a, rng)
    worst = sorted(trial(feats, a, rng) for _ in range(a.trials))
    passed = sum(1 for w in worst if w <= 0.25)
    print("%s load, input %s, output %s: both windows pass in %d of %d trials (%.0f%%); median worst |SMD| %.2f"
          % (a.load, a.input, a.output, passed, a.trials, 100.0 * passed / a.trials, worst[len(worst) // 2]))


if __name__ == "__main__":
    main()
