#!/usr/bin/env bash
# The Slurm executor's overhead per attempt: the demo campaign run locally
# and on the local test cluster (scripts/slurm-cluster.sh up), and for each
# the time from an attempt's creation to its server's exec (bench/stepgap).
# On Slurm that adds srun, the step's start on a node and the node-side
# runner's own start to the local path. Set ROUNDS to repeat the pair.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2}
make -s build
go build -o bin/stepgap ./bench/stepgap
mkdir -p _demo_manifests
bin/loadgen materialize --id short --input-uniform 4:16 --output-fixed 8 --arrival steady \
  --num-requests 6000 --workload-seed 20261130 --out _demo_manifests/short.jsonl >/dev/null
bin/loadgen materialize --id long --input-uniform 4:16 --output-fixed 64 --arrival burst:8 \
  --num-requests 2000 --workload-seed 20261130 --out _demo_manifests/long.jsonl >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  bin/controller start -f protocols/demo.yaml -d "$work/local$round" --gpu-backend fake --foreground 2>/dev/null
  bin/controller start -f protocols/demo.yaml -d "$work/slurm$round" --gpu-backend fake --executor slurm --foreground 2>/dev/null
  bin/stepgap "$work/local$round" "$work/slurm$round"
done
