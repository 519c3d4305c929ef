#!/usr/bin/env python3
"""A Python asyncio + aiohttp load client doing loadgen's schedule, for the
side-by-side in bench/loadgen.sh: what the seed's Python helper would have
been (vLLM's bundled generator is aiohttp under asyncio).

Open loop: steady (i/rate) or burst:N (N at once every N/rate) from t0;
each request is sent at its planned time as a task, and the schedule
error is sent - planned. Closed loop: --concurrency workers, each sending
its next request when the previous ends. Every response is a streamed
completion read line by line, each data line parsed as JSON, as a real
client must. Prints one JSON line of figures; never prints response text.
"""
import argparse
import asyncio
import json
import math
import time


def quantile(sorted_v, q):
    if not sorted_v:
        return 0.0
    i = max(int(math.ceil(q * len(sorted_v))) - 1, 0)
    return sorted_v[i]


async def one(session, url, body, stats):
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
            if resp.status != 200:
                await resp.read()
                stats["failed"] += 1
                return
            done = False
            async for line in resp.content:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                json.loads(payload)
            if done:
                stats["completed"] += 1
            else:
                stats["failed"] += 1
    except Exception:
        stats["failed"] += 1


async def open_loop(args, session, url, body):
    loop = asyncio.get_running_loop()
    burst = int(args.arrival.split(":")[1]) if args.arrival.startswith("burst:") else 1
    n = int(args.rate * args.duration)
    lags, tasks = [], []
    stats = {"completed": 0, "failed": 0}
    t0 = loop.time() + 0.05
    for i in range(n):
        planned = t0 + (i // burst) * burst / args.rate
        delay = planned - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(loop.time() - planned)
        tasks.append(asyncio.create_task(one(session, url, body, stats)))
    await asyncio.gather(*tasks)
    lags.sort()
    return {"requests": n, "completed": stats["completed"], "failed": stats["failed"],
            "lag_p50_ms": quantile(lags, 0.5) * 1e3, "lag_p99_ms": quantile(lags, 0.99) * 1e3,
            "lag_max_ms": lags[-1] * 1e3 if lags else 0.0}


async def closed_loop(args, session, url, body):
    loop = asyncio.get_running_loop()
    start = loop.time() + args.warmup
    end = start + args.duration
    stats = {"completed": 0, "failed": 0}
    counted = {"completed": 0}

    async def worker():
        while loop.time() < end:
            before = stats["completed"]
            await one(session, url, body, stats)
            now = loop.time()
            if stats["completed"] > before and start <= now < end:
                counted["completed"] += 1

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return {"completed": counted["completed"], "failed": stats["failed"],
            "completed_rps": counted["completed"] / args.duration, "total_completed": stats["completed"]}


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--mode", choices=["open", "closed"], required=True)
    p.add_argument("--rate", type=float, default=100)
    p.add_argument("--arrival", default="steady")
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--concurrency", type=int, default=256)
    args = p.parse_args()
    import aiohttp
    url = args.base_url + "/v1/completions"
    body = json.dumps({"model": "m", "prompt": [1, 2, 3, 4], "max_tokens": 1, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    conn = aiohttp.TCPConnector(limit=0 if args.mode == "open" else args.concurrency)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as session:
        if args.mode == "open":
            out = await open_loop(args, session, url, body)
        else:
            out = await closed_loop(args, session, url, body)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
