#!/usr/bin/env bash
# Supervision cost: the controller's own CPU time (utime+stime from
# /proc/PID/stat) while one run measures for MEASURE_S seconds (default 60),
# with the GPU sampler taking a sample every SAMPLE_S seconds (default 1,
# the protocol default; 0 switches it off). The sampler runs inside the
# controller, so its reads count; its own read time is printed too.
# The measured interval is read from the client's phase file, so this
# script adds no work to the controller while it measures.
set -euo pipefail
cd "$(dirname "$0")/.."
MEASURE_S=${MEASURE_S:-60}
SAMPLE_S=${SAMPLE_S:-1}
PORT=${PORT:-18591}
make -s build
work=$(mktemp -d)
trap 'bin/controller stop -d "$work/camp" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
cat > "$work/supervise.yaml" <<YAML
warden: 1
name: supervise
workdir: $PWD
host: {gpus: 1, cpus: 1}
budget: {cap_gpu_hours: 100}
sample_interval_s: $SAMPLE_S
slots: [{name: s0, gpus: [0], cpus: "0", port: $PORT}]
regimes: [{name: solo, concurrency: 1}]
classes: [{name: c, drain_allowance_s: 30, watchdog_s: 60}]
servers:
  - {name: standin, kind: standin, command: [bin/standin, server, --port, "\${PORT}", --load-s, "0.2", --gpu-mem-mib, "1024"]}
loads:
  - {name: measure, kind: saturation, expected_s: $((MEASURE_S + 30)), client: [bin/standin, client, --warmup-s, "1", --measure-s, "$MEASURE_S", --drain-s, "5", --concurrency, "4"]}
axes: [{name: run, values: [{id: one}]}]
phases: [{name: all, kind: primary, matrix: {run: one}, loads: [measure]}]
YAML
bin/controller start --gpu-backend fake -f "$work/supervise.yaml" -d "$work/camp" >/dev/null
pid=$(cat "$work/camp/controller.lock")
phases="$work/camp/runs/one.measure/a1/phases.jsonl"
tick=$(getconf CLK_TCK)
cpu() { awk '{ split($0, a, ") "); split(a[2], f, " "); print f[12] + f[13] }' "/proc/$pid/stat"; }
until grep -q '"clean"' "$phases" 2>/dev/null; do sleep 0.2; done
c0=$(cpu); t0=$(date +%s.%N)
until grep -q '"drain"' "$phases" 2>/dev/null; do sleep 0.5; done
c1=$(cpu); t1=$(date +%s.%N)
echo "$c0 $c1 $t0 $t1 $tick" | awk '{ cpu = ($2 - $1) / $5; wall = $4 - $3;
  printf "measured interval: %.1f s wall\ncontroller CPU:    %.3f s (utime+stime)\nsupervision cost:  %.4f%% of one core (target < 0.2%%)\n", wall, cpu, 100 * cpu / wall }'
until ! kill -0 "$pid" 2>/dev/null; do sleep 0.5; done
bin/ctlq status -d "$work/camp" | sed -n 2p
python3 - "$work/camp/runs/one.measure/a1/state.json" "$SAMPLE_S" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))["attempt"].get("figures", {})
n, mean = f.get("samples", 0), f.get("sampler_read_mean_ms", 0)
print(f"GPU sampler:       every {sys.argv[2]} s, {n:.0f} samples, {mean:.3f} ms mean read (its own cost, included above)")
PY
