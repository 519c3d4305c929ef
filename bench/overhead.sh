#!/usr/bin/env bash
# Per-run overhead: N runs of a stand-in server that is ready at once and a
# client that exits at once, through the controller (every transition
# fsynced), against a plain bash loop doing the same process work (start the
# server in its own group, poll its health with curl, run the client, kill
# the group, wait). Prints runs per second for both and their ratio;
# ROUNDS=3 times both three times in turn and prints each round; TIMELINE=1
# prints, after each controller round, the median of each transition.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-200}
# CONTROLLER: the controller binary to time (default: the one make builds),
# e.g. an older build to compare with.
CONTROLLER=${CONTROLLER:-bin/controller}
PORT=${PORT:-18590}
# SKIP_BUILD=1: use the binaries already in bin/ (for a machine without go).
[ -n "${SKIP_BUILD:-}" ] || make -s build
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT; [ -n "${KEEP:-}" ] && trap - EXIT

values=""
for i in $(seq -f "%03g" 1 "$N"); do values="$values{id: r$i}, "; done
cat > "$work/overhead.yaml" <<YAML
warden: 1
name: overhead
workdir: $PWD
host: {gpus: 1, cpus: 1}
budget: {cap_gpu_hours: 100}
slots: [{name: s0, gpus: [0], cpus: "0", port: $PORT}]
regimes: [{name: solo, concurrency: 1}]
classes: [{name: c, drain_allowance_s: 10, watchdog_s: 20}]
cleanup: {timeout_s: 10}
servers:
  - {name: standin, kind: standin, command: [bin/standin, server, --port, "\${PORT}", --load-s, "0", --shutdown-timeout, "0"], shutdown_grace_s: 5, group_grace_s: 1}
loads:
  - {name: quick, kind: smoke, expected_s: 1, client: [bin/standin, client, --warmup-s, "0", --measure-s, "0.01", --drain-s, "0"]}
axes: [{name: run, values: [${values%, }]}]
phases: [{name: all, kind: smoke, matrix: {run: all}, loads: [quick]}]
YAML
# every value of the axis
sed -i "s/matrix: {run: all}/matrix: {run: [$(seq -f "r%03g" 1 "$N" | paste -sd, -)]}/" "$work/overhead.yaml"

# ROUNDS: how many times to time both, in turn (controller, loop, ...), so
# that a machine whose speed drifts is compared pair by pair.
ROUNDS=${ROUNDS:-1}
rate() { echo "$1 $2" | awk -v n="$N" '{printf "%.2f", n/($2-$1)}'; }

# Each round's campaign gets a directory of its own, all removed at exit:
# removing the last one's thousands of files just before a round made the
# file system's inode allocation slower for the next (ext4 passes over
# recently freed inodes), so a round ran slower the more rounds came before.
rounds_run=0
controller() {
  rounds_run=$((rounds_run + 1))
  camp="$work/camp.$rounds_run"
  local start end
  start=$(date +%s.%N)
  "$CONTROLLER" start --foreground --gpu-backend fake -f "$work/overhead.yaml" -d "$camp" >/dev/null 2>"$work/controller.err"
  end=$(date +%s.%N)
  ctl=$(rate "$start" "$end")
  complete=$(bin/ctlq runs -d "$camp" --state complete -o json | grep -c '"id"' || true)
  # TIMELINE=1: where each round's runs spent their time (bench/timeline.py)
  if [ -n "${TIMELINE:-}" ]; then python3 bench/timeline.py "$camp"; fi
}

loop() {
  local start end i pid
  start=$(date +%s.%N)
  for i in $(seq 1 "$N"); do
    setsid bin/standin server --port "$PORT" --load-s 0 --shutdown-timeout 0 >/dev/null 2>&1 &
    pid=$!
    until curl -fs "http://127.0.0.1:$PORT/health" >/dev/null; do sleep 0.01; done
    WARDEN_PORT=$PORT bin/standin client --warmup-s 0 --measure-s 0.01 --drain-s 0 >/dev/null 2>&1 || true
    kill -TERM -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    while kill -0 -- "-$pid" 2>/dev/null; do sleep 0.01; done
  done
  end=$(date +%s.%N)
  loop=$(rate "$start" "$end")
}

ratios=""
for r in $(seq 1 "$ROUNDS"); do
  controller
  loop
  ratio=$(echo "$ctl $loop" | awk '{printf "%.2f", $1/$2}')
  ratios="$ratios $ratio"
  [ "$ROUNDS" -gt 1 ] && echo "round $r: controller $ctl runs/s, bash loop $loop runs/s, ratio $ratio"
done

echo "runs: $N (controller completed $complete)"
echo "controller: $ctl runs/s (every transition fsynced)"
echo "bash loop:  $loop runs/s"
echo "controller/bash loop: $(echo $ratios | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {if (NR == 1) print v[1]; else printf "min %s median %s max %s over %d rounds\n", v[1], v[int((NR+1)/2)], v[NR], NR}')"
