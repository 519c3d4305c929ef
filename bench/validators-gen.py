#!/usr/bin/env python3
"""Inputs of bench/validators.sh, deterministic.

  validators-gen.py layer1 DIR N          # DIR/layer1.jsonl (N schema-v1 records), its sidecar, signals.json
  validators-gen.py layer2 SRC DIR BYTES  # DIR/rank0_w<k>.pt.trace.json.gz from SRC's two windows, each up to BYTES of JSON

The Layer-1 records are as wide as a real one (the seed's counters and
histograms), their values drawn from a seeded generator. Each Layer-2 trace
keeps its window's ProfilerSteps and execute annotations once and repeats
every other event as many whole times as BYTES of JSON hold, each copy with its own
correlation ids: the same kernels launched again at the same times, so the
window's shares, its join to Layer 1 and its verdict stay those of SRC.
"""
import gzip
import glob
import json
import os
import random
import sys

WALL_NS = 1783936800 * 10**9  # 2026-07-13 10:00:00 UTC


def layer1(out, n):
    rng = random.Random(1)
    p = os.path.join(out, "layer1.jsonl")
    with open(p, "w", buffering=1 << 20) as f:
        for i in range(n):
            r = rng.randrange
            f.write(
                '{"schema":1,"step":%d,"model_executed":true,"submit_mono_ns":%d,"complete_mono_ns":%d,'
                '"num_scheduled_reqs":%d,"num_prefill_reqs":%d,"num_decode_reqs":%d,"prefill_tokens":%d,"decode_tokens":%d,'
                '"chunked_prefill_class":"%s","chunk_size_hist":[%d,%d,%d,%d],"context_len_hist":[%d,%d,%d,%d,%d,%d],'
                '"num_waiting_reqs":%d,"num_running_reqs":%d,"num_deferred_reqs":%d,"num_preemptions":0,"kv_cache_usage":%.4f,'
                '"prefix_cache_queries":%d,"prefix_cache_hits":%d,"cuda_graph_hit":true,"runtime_mode":"FULL",'
                '"unpadded_tokens":200,"bucket_tokens":256,"padding_tokens":56}\n'
                % (i, i * 20_000_000, i * 20_000_000 + 15_000_000, r(256), r(8), r(256), r(8192), r(256),
                   ("none", "chunked")[r(2)], r(9), r(9), r(9), r(9), r(99), r(99), r(99), r(99), r(99), r(99),
                   r(500), r(256), r(4), rng.random(), r(256), r(256)))
    with open(p + ".footer.json", "w") as f:
        json.dump({"encoded_records": n, "written_records": n, "dropped_records": 0, "last_step_index": n - 1,
                   "wall_time_unix_ns": WALL_NS, "flush_interval_s": 1.0, "final": False}, f)
    with open(os.path.join(out, "signals.json"), "w") as f:
        json.dump([{"at": "2026-07-13T10:00:00.4Z", "role": "server", "target": "group", "pid": 1, "signal": "SIGKILL"}], f)


def layer2(src, out, size):
    for k, path in enumerate(sorted(glob.glob(os.path.join(src, "rank0_w*.pt.trace.json.gz")))[:2]):
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        once, rest = [], []
        for e in doc.pop("traceEvents"):
            n = e.get("name", "")
            (once if n.startswith("ProfilerStep#") or n.startswith("execute_") else rest).append(e)
        head = json.dumps(doc)[:-1] + ', "traceEvents": [\n'
        parts, total, c = [], len(head), 0
        evs = [json.dumps(e) for e in once]
        while True:
            part = ",\n".join(evs)
            if parts and total + len(part) + 2 > size:
                break
            parts.append(part)
            total += len(part) + 2
            c += 1
            evs = []
            for e in rest:
                a = e.get("args")
                if isinstance(a, dict) and isinstance(a.get("correlation"), int):
                    e = dict(e, args=dict(a, correlation=a["correlation"] + c * 10**7))
                evs.append(json.dumps(e))
        dst = os.path.join(out, "rank0_w%d.pt.trace.json.gz" % k)
        with gzip.open(dst, "wt", compresslevel=6) as f:
            f.write(head + ",\n".join(parts) + "\n]}\n")


if __name__ == "__main__":
    if sys.argv[1] == "layer1":
        layer1(sys.argv[2], int(sys.argv[3]))
    else:
        layer2(sys.argv[2], sys.argv[3], int(sys.argv[4]))
