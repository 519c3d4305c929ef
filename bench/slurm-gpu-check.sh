#!/usr/bin/env bash
# The Slurm executor's node-side runner on a real GPU, by hand, on a GPU
# machine without Slurm (from a tree where `make build` ran): a shim in
# PATH stands in for srun (it sets the step's variables, SLURM_STEP_GPUS=0,
# and execs the command after "--") and for squeue, sacct and scancel
# (an empty queue). protocols/gpu-smoke.yaml then runs with --executor
# slurm --gpu-backend nvml: preflight, cleanup and energy come from NVML
# in the node-side runner, for the step's GPU only, and the attempt
# records the UUID NVML read. The shim does not test Slurm: the
# two-node cluster tests do (cmd/controller, TestSlurm*).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/slurm-gpu-check}
mkdir -p "$out"
work=$(mktemp -d)
shim="$work/shim"
mkdir -p "$shim"
cat > "$shim/srun" <<'SH'
#!/usr/bin/env bash
while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
export SLURM_JOB_ID=$((RANDOM + 1000)) SLURM_STEP_ID=0 SLURMD_NODENAME=$(hostname -s) SLURM_STEP_GPUS=0 CUDA_VISIBLE_DEVICES=0
exec "$@"
SH
printf '#!/bin/sh\nexit 0\n' > "$shim/squeue"
cp "$shim/squeue" "$shim/sacct"; cp "$shim/squeue" "$shim/scancel"
chmod +x "$shim"/*
nvidia-smi --query-gpu=name,uuid,memory.used --format=csv | tee "$out/nvidia-smi.txt"
PATH="$shim:$PATH" bin/controller start -f protocols/gpu-smoke.yaml -d "$work/S" --gpu-backend nvml --executor slurm --foreground > "$out/controller.txt" 2>&1
echo "controller exit $?"
bin/ctlq status -d "$work/S" | tee "$out/status.txt"
bin/ctlq show -d "$work/S" r1.load | tee "$out/show-r1.txt"
for r in r1 r2 r3; do
  d="$work/S/runs/$r.load/a1"
  echo "== $r"; grep -h '"gate"' "$d/gates.jsonl" | cut -c1-220
  python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['attempt']; print('slurm', a.get('slurm')); print('figures', {k: round(v,3) for k,v in sorted(a.get('figures',{}).items())})" "$d/state.json"
  tail -3 "$d/srun.err"
done | tee "$out/attempts.txt"
rm -rf "$work"
