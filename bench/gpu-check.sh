#!/usr/bin/env bash
# The check on a real GPU (by hand, on a machine with an NVIDIA GPU, from a
# tree where `make build` ran and bin/nvmlgpu.test was built with
# `go test -c -o bin/nvmlgpu.test ./pkg/gpu/nvmlgpu`):
#  A. protocols/gpu-smoke.yaml through NVML: three runs of the GPU stand-in
#     server (parent and engine child both hold CUDA memory); preflight,
#     cleanup and energy figures come from NVML;
#  B. the same protocol with another user's process holding GPU memory:
#     the campaign stops at preflight;
#  C. NVML read costs (go test benchmarks).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
work=$(mktemp -d)
nvidia-smi --query-gpu=name,uuid,memory.used,power.draw --format=csv | tee "$out/nvidia-smi.txt"

echo "== A: three runs through NVML"
start=$(date +%s.%N)
bin/controller start -f protocols/gpu-smoke.yaml -d "$work/A" --gpu-backend nvml --foreground > "$out/A-controller.txt" 2>&1
rc=$?; echo "controller exit $rc; wall $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
bin/ctlq status -d "$work/A" | tee "$out/A-status.txt"
bin/ctlq runs -d "$work/A" | tee "$out/A-runs.txt"
bin/ctlq show -d "$work/A" r2.load | tee "$out/A-show-r2.txt"
for r in r1 r2 r3; do
  python3 - "$work/A/runs/$r.load/a1" <<'PY'
import json, sys
d = sys.argv[1]
a = json.load(open(d + "/state.json"))["attempt"]
f = a.get("figures", {})
pre = json.load(open(d + "/preflight.json"))["gpus"][0]
print(a["run_id"], a["state"], "uuid", pre.get("uuid"), "pre-used MiB", pre.get("memory_used_mib"),
      "power limit W", pre.get("power_limit_w"), "temp C", pre.get("temperature_c"), "MIG", pre.get("mig_mode"))
print("  figures:", {k: round(v, 3) for k, v in sorted(f.items())})
for l in open(d + "/gates.jsonl"):
    g = json.loads(l)
    print("  gate", g["gate"], g["verdict"], g.get("detail", ""), g.get("figures", {}))
PY
done | tee "$out/A-figures.txt"
cp -r "$work/A/runs/r2.load/a1" "$out/A-r2-attempt" 2>/dev/null

echo "== B: another user's process on the GPU"
python3 -c "import torch,time; x=torch.empty(2*2**30//4, device='cuda'); print('held', flush=True); time.sleep(300)" > "$work/foreign.out" 2>&1 &
fpid=$!
if command -v setpriv >/dev/null; then
  kill $fpid; wait $fpid 2>/dev/null
  setpriv --reuid=65534 --regid=65534 --clear-groups python3 -c "import torch,time; x=torch.empty(2*2**30//4, device='cuda'); print('held', flush=True); time.sleep(300)" > "$work/foreign.out" 2>&1 &
  fpid=$!
fi
for i in $(seq 1 120); do grep -q held "$work/foreign.out" && break; sleep 0.5; done
echo "foreign process $fpid (uid $(awk '/^Uid/{print $2}' /proc/$fpid/status)): $(cat "$work/foreign.out")"
bin/controller start -f protocols/gpu-smoke.yaml -d "$work/B" --gpu-backend nvml --foreground > "$out/B-controller.txt" 2>&1
bin/ctlq status -d "$work/B" | tee "$out/B-status.txt"; echo "ctlq status exit ${PIPESTATUS[0]}"
bin/ctlq show -d "$work/B" r1.load | tee "$out/B-show-r1.txt"
kill $fpid; wait $fpid 2>/dev/null

echo "== C: NVML read costs"
bin/nvmlgpu.test -test.run 'TestReal' -test.v -test.bench 'Real' -test.benchtime 200x 2>&1 | grep -E 'ok|PASS|FAIL|Benchmark|---' | tee "$out/C-bench.txt"
rm -rf "$work"
