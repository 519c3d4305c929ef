#!/usr/bin/env bash
# Warden on a real GPU (by hand; CI has none). docs/gpu.md says what each
# mode checks and what was seen.
#
#   bench/gpu-check.sh build    on the build host: the Go binaries with cgo
#                               (NVML), stripped, into bin/ (controller,
#                               loadgen, ctlq, standin, nvmlgpu.test), to be
#                               carried to the GPU machine
#   bench/gpu-check.sh engine   on the GPU machine: scripts/gpu_server.py serve
#                               alone: 64 streams, two profile windows, SIGTERM;
#                               validators on its artifacts
#   bench/gpu-check.sh phase3   on the GPU machine: protocols/gpu-phase3.yaml
#                               through the controller with NVML (4 runs)
#   bench/gpu-check.sh broken   on the GPU machine: a broken variant of it (a 1 s
#                               window budget for ten 400 ms steps, so no
#                               window completes) that profile-windows must fail
#   bench/gpu-check.sh energy   on the GPU machine: pattern F4 of it (2 runs), the
#                               second on a card the first left warm: the idle
#                               settle's reading and the energy check
#   bench/gpu-check.sh power    on the GPU machine: protocols/gpu-power.yaml
#                               (varying patterns, unpadded steps): the power
#                               check's prediction from the burn-in, the
#                               calibrated rule on representative windows and
#                               on a window stalled on purpose, every window
#                               re-judged by the literal rules, trace save times
#   bench/gpu-check.sh smoke    on the GPU machine: protocols/gpu-smoke.yaml
#                               (three stand-in runs through NVML), a foreign
#                               process stopping preflight, NVML read costs
#
# Output goes to $OUT (default /tmp/gpu-check): small text files only.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
backend=${GPU_BACKEND:-nvml}
PY=${PY:-python3}

build() {
  export CGO_ENABLED=1 CGO_CFLAGS=${CGO_CFLAGS:-'-O2 -Wno-deprecated-declarations'}
  go build -trimpath -ldflags '-s -w' -o bin/ ./cmd/controller ./cmd/loadgen ./cmd/ctlq ./cmd/standin || exit 1
  go test -c -trimpath -ldflags '-s -w' -o bin/nvmlgpu.test ./pkg/gpu/nvmlgpu || exit 1
  ls -l bin/
}

# engine: the engine alone, its artifacts through the validators.
engine() {
  local w=/tmp/warden-gpu-engine port=18790
  rm -rf "$w"; mkdir -p "$w"
  local cfg='{"profiler":"torch","torch_profiler_dir":"'$w'/traces","torch_profiler_with_stack":true,"torch_profiler_record_shapes":true,"torch_profiler_use_gzip":true,"wait_iterations":0,"warmup_iterations":2,"active_iterations":8}'
  local t0; t0=$(date +%s.%N)
  VLLM_OPPROF_DIR=$w/opprof PYTHONUNBUFFERED=1 $PY scripts/gpu_server.py serve --port $port --max-num-seqs 64 \
    --max-num-batched-tokens 2048 --shutdown-timeout 30 --profiler-config "$cfg" ${ENGINE_ARGS:-} > "$out/engine-server.log" 2>&1 &
  local spid=$!
  $PY - "$port" "$w" "$spid" "$t0" <<'PY' 2>&1 | tee "$out/engine-check.txt"
import glob, gzip, http.client, json, os, sys, threading, time
port, w, spid, t0 = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
while True:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5); c.request("GET", "/health")
        if c.getresponse().status == 200: break
    except OSError:
        os.kill(spid, 0)  # the server died: stop here
        time.sleep(0.2)
print("ready after %.1f s" % (time.time() - t0))
def post(path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, body=json.dumps(body or {}), headers={"Content-Type": "application/json"})
    r = c.getresponse(); d = r.read(); c.close(); return r.status, d
def complete(n_in, n_out):
    body = {"model": "m", "prompt": list(range(1000, 1000 + n_in)), "max_tokens": n_out, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse(); toks = 0; usage = None; done = False
    for line in r:
        line = line.strip()
        if line == b"data: [DONE]": done = True; break
        if line.startswith(b"data: "):
            ev = json.loads(line[6:]); toks += sum(1 for ch in ev["choices"] if ch["text"])
            usage = ev.get("usage") or usage
    c.close(); return toks, usage, done
stop = threading.Event(); got = []
def load(i):
    while not stop.is_set():
        got.append(complete(128 + 37 * i, 64))
t0 = time.monotonic()
ts = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(64)]
[t.start() for t in ts]
time.sleep(5)
def traces(): return sorted(glob.glob(w + "/traces/*.pt.trace.json.gz"))
for win in (1, 2):
    a = time.monotonic(); s1 = post("/start_profile")[0]
    while len(traces()) < win and time.monotonic() - a < 60: time.sleep(0.05)
    b = time.monotonic(); s2 = post("/stop_profile")[0]
    print("window %d: start %d stop %d, trace after %.2f s, stop returned after %.2f s" % (win, s1, s2, b - a, time.monotonic() - b))
stop.set(); [t.join() for t in ts]
el = time.monotonic() - t0
ok = sum(1 for t, u, d in got if d and t == 64 and u and u["completion_tokens"] == 64)
print("requests %d, exact %d, %.1f req/s, %.0f output tok/s over %.1f s" % (len(got), ok, len(got) / el, 64 * len(got) / el, el))
for f in traces():
    t = json.load(gzip.open(f)); ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(int(e["name"][13:]) for e in ev if e["name"].startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")
    ex = [e["name"] for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    print(os.path.basename(f), os.path.getsize(f), "bytes; steps", steps, "; execute", len(ex), ex[:3], "; kernels", sum(1 for e in ev if e.get("cat") == "kernel"))
PY
  [ "${PIPESTATUS[0]}" = 0 ] || ok=no
  kill -TERM $spid; wait $spid; echo "server exit $? after SIGTERM"
  tail -5 "$out/engine-server.log"
  for v in "layer1 --dir $w/opprof --flush-interval-s 1" "layer2 --traces $w/traces --tp 1 --windows 2"; do
    echo "validate $v: $(bin/controller validate $v -o json | tail -1)"
  done | tee -a "$out/engine-check.txt"
  [ "${ok:-yes}" = yes ] && [ "$(ls $w/traces/*.pt.trace.json.gz 2>/dev/null | wc -l)" = 2 ]
}

# variant FILE NAME [broken]: the phase-3 protocol with an absolute
# workdir (the copy lives outside protocols/), for the broken run with a
# 1 s window budget, one pattern, saturation only.
variant() {
  $PY - "$1" "$2" "${3:-}" <<'PY'
import os, sys, yaml
dst, name, broken = sys.argv[1], sys.argv[2], sys.argv[3]
p = yaml.safe_load(open("protocols/gpu-phase3.yaml"))
p["name"], p["workdir"] = name, os.getcwd()
if broken == "energy":
    p["title"] = "gpu-phase3, pattern F4 only: the idle settle and the energy check of two runs back to back"
    p["phases"][0]["matrix"]["pattern"] = ["F4"]
elif broken:
    p["title"] = "gpu-phase3 with a 1 s window budget: the 2+8 window (ten 400 ms steps) cannot complete in it"
    p["phases"][0]["matrix"]["pattern"] = ["F2"]
    p["phases"][0]["loads"] = ["saturation"]
    for l in p["loads"]:
        i = l["client"].index("--profile-window-budget-seconds")
        l["client"][i + 1] = "1"
yaml.safe_dump(p, open(dst, "w"), sort_keys=False)
PY
}

manifests() {
  local m=/tmp/warden-gpu-phase3/manifests
  mkdir -p $m
  # fixed lengths, steady arrivals: at saturation every 2,048-token step is
  # alike (protocols/gpu-phase3.yaml says why)
  bin/loadgen materialize --id F2 --kind synthetic --input-fixed 1009 --output-fixed 16 --prefix none \
    --arrival steady --num-requests 6000 --workload-seed 20261201 --out $m/F2.jsonl || exit 1
  bin/loadgen materialize --id F4 --kind synthetic --input-fixed 497 --output-fixed 16 --prefix none \
    --arrival steady --num-requests 12000 --workload-seed 20261201 --out $m/F4.jsonl || exit 1
}

# campaign PROTOCOL DIR TAG: run it in the foreground, then summarize.
campaign() {
  local start; start=$(date +%s.%N)
  bin/controller start -f "$1" -d "$2" --gpu-backend "$backend" --foreground > "$out/$3-controller.txt" 2>&1
  echo "$3: controller exit $?; wall $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
  bin/ctlq status -d "$2" > "$out/$3-status.txt" 2>&1
  bin/ctlq runs -d "$2" > "$out/$3-runs.txt" 2>&1
  cat "$out/$3-runs.txt"
  for r in $(awk 'NR > 1 && $1 != "" {print $1}' "$out/$3-runs.txt"); do bin/ctlq show -d "$2" "$r"; done > "$out/$3-show.txt" 2>&1
  $PY - "$2" <<'PY' 2>&1 | tee "$out/$3-summary.txt"
import glob, json, os, sys
d = sys.argv[1]
for sd in sorted(glob.glob(d + "/runs/*/a*")):
    st = json.load(open(sd + "/state.json"))["attempt"]
    f = st.get("figures", {})
    print("%s %s: state %s %s" % (st["run_id"], os.path.basename(sd), st["state"], st.get("reason", "")))
    keep = ("ready_s", "run_s", "energy_per_request_j", "energy_j_gpu0", "mean_power_w_gpu0", "idle_power_w_gpu0", "drain_s")
    print("  figures:", {k: round(v, 3) for k, v in sorted(f.items()) if k in keep or k.startswith(("energy", "mean_power", "ready", "drain", "wall"))})
    try:
        for l in open(sd + "/gates.jsonl"):
            g = json.loads(l)
            if g["gate"].startswith("validator:") or g["verdict"] != "pass":
                print("  gate %s %s %s %s" % (g["gate"], g["verdict"], g.get("detail", "")[:300],
                      {k: round(v, 4) for k, v in (g.get("figures") or {}).items()}))
            else:
                print("  gate %s pass" % g["gate"])
    except OSError as e:
        print("  no gates:", e)
    try:
        r = json.load(open(sd + "/client/result.json"))
        c = r["clean"]
        print("  client: complete %s, clean %.1f s, completed %d (%.2f req/s), offered %.2f req/s, in %.0f tok/s, out %.0f tok/s, ttft p50 %.1f ms, e2e p50 %.1f ms, drain %.2f s"
              % (r["complete"], c["seconds"], c["completed"], c["completed_rps"], c["offered_rps"], c["input_tokens_per_s"],
                 c["output_tokens_per_s"], c["latency"]["ttft_ms"]["p50"], c["latency"]["e2e_ms"]["p50"], r["drain"]["seconds"]))
        for w in r.get("profile_windows", []):
            print("  window %d: start %s in %.3f s, hold %.3f s, stop %s in %.3f s" % (
                w["index"], w["start_status"], (w["start_return_mono_ns"] - w["start_call_mono_ns"]) / 1e9,
                (w["stop_call_mono_ns"] - w["start_return_mono_ns"]) / 1e9, w["stop_status"],
                (w["stop_return_mono_ns"] - w["stop_call_mono_ns"]) / 1e9))
    except (OSError, KeyError, TypeError) as e:
        print("  no client result:", e)
    for t in sorted(glob.glob(sd + "/traces/*.pt.trace.json.gz")):
        print("  trace %s %d bytes" % (os.path.basename(t), os.path.getsize(t)))
    l1 = glob.glob(sd + "/opprof/*.jsonl")
    if l1:
        n = sum(1 for _ in open(l1[0]))
        print("  layer1 %s: %d lines, %d bytes" % (os.path.basename(l1[0]), n, os.path.getsize(l1[0])))
        ms = {True: [], False: []}
        for line in open(l1[0]):
            try:
                rec = json.loads(line)
                ms[bool(rec["profiling"])].append((rec["complete_mono_ns"] - rec["submit_mono_ns"]) / 1e6)
            except (ValueError, KeyError, TypeError):
                pass  # the footer
        for k, v in ms.items():
            if v:
                v.sort()
                print("  layer1 %s steps: %d, model call + pad ms p50 %.1f max %.1f" % (
                    "profiled" if k else "unprofiled", len(v), v[len(v) // 2], v[-1]))
    for l in open(sd + "/gates.jsonl") if os.path.exists(sd + "/gates.jsonl") else []:
        g = json.loads(l)
        if g["gate"] == "validator:layer2":
            print("  layer2 smd_max per window:", {k: v for k, v in (g.get("figures") or {}).items() if k.endswith("smd_max")})
    try:
        log = open(sd + "/server.out").read().splitlines()
        print("  server:", " | ".join(l for l in log if "model loaded" in l or "profiler stopped" in l or "layer1 closed" in l)[:900])
    except OSError:
        pass
PY
}

phase3() {
  local w=/tmp/warden-gpu-phase3
  rm -rf $w/runs/phase3; mkdir -p $w/runs
  nvidia-smi --query-gpu=name,uuid,memory.used,power.draw,power.limit --format=csv | tee "$out/nvidia-smi.txt"
  manifests
  campaign protocols/gpu-phase3.yaml $w/runs/phase3 phase3
}

broken() {
  local w=/tmp/warden-gpu-phase3
  rm -rf $w/runs/broken; mkdir -p $w/runs
  [ -f $w/manifests/F2.jsonl ] || manifests
  variant $w/broken.yaml gpu-phase3-broken broken
  campaign $w/broken.yaml $w/runs/broken broken
}

# energy: pattern F4 of the phase-3 protocol, its saturation run then its
# moderate run on the card the first left warm: each idle power read
# after the settle, each energy per request, and the sanity verdict on it.
energy() {
  local w=/tmp/warden-gpu-phase3
  rm -rf $w/runs/energy; mkdir -p $w/runs
  [ -f $w/manifests/F4.jsonl ] || manifests
  variant $w/energy.yaml gpu-phase3-energy energy
  campaign $w/energy.yaml $w/runs/energy energy
}

power() {
  local w=/tmp/warden-gpu-power m=/tmp/warden-gpu-power/manifests
  rm -rf $w/runs/power; mkdir -p $w/runs $m
  nvidia-smi --query-gpu=name,uuid,memory.used,power.draw,power.limit --format=csv | tee "$out/nvidia-smi.txt"
  # uniform lengths: at saturation the steps' mix varies from step to step
  bin/loadgen materialize --id U1 --kind synthetic --input-uniform 128:512 --output-fixed 16 --prefix none \
    --arrival steady --num-requests 30000 --workload-seed 20261203 --out $m/U1.jsonl || exit 1
  bin/loadgen materialize --id U2 --kind synthetic --input-uniform 256:1024 --output-fixed 16 --prefix none \
    --arrival burst:8 --num-requests 30000 --workload-seed 20261203 --out $m/U2.jsonl || exit 1
  campaign protocols/gpu-power.yaml $w/runs/power power
  # every window again, by the literal rules and by the calibrated one; the
  # burn-in's prediction and its trace's save
  $PY - $w/runs/power <<'PY' 2>&1 | tee "$out/power-judged.txt"
import glob, json, os, subprocess, sys
d = sys.argv[1]
def v(*args):
    out = subprocess.run(["bin/controller", "validate"] + list(args) + ["-o", "json"], capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
for sd in sorted(glob.glob(d + "/runs/*/a*")):
    run = os.path.basename(os.path.dirname(sd))
    if run.startswith("burnin"):
        r = v("power", "--result-dir", sd + "/client", "--layer1-dir", sd + "/opprof", "--reference-tail-s", "5", "--window-s", "2", "--step-s", "0.1")
        f = r["figures"]
        print("%s %s: power %s: reference %d steps, literal window pass %.3f over %d blocks (a 2-window run fails %.3f); recovery unit pass %.3f over %d samples" % (
            run, os.path.basename(sd), r["verdict"], f.get("reference_steps", 0), f.get("power.representativeness.unit_pass_fraction", -1),
            f.get("smd.self.blocks", 0), f.get("smd.self.false_failure_rate", -1), f.get("power.recovery.unit_pass_fraction", -1), f.get("recovery.self.samples", 0)))
        for k in sorted(f):
            if k.startswith("smd.self.") and k.endswith("pass_fraction"):
                print("   ", k, round(f[k], 4))
        pw = v("profile-windows", "--result-dir", sd + "/client", "--windows", "1")
        print("   burn-in window: %s, trace ready %.2f s; traces %s" % (pw["verdict"], pw["figures"].get("trace_ready_s_max", -1),
              [(os.path.basename(t), os.path.getsize(t)) for t in glob.glob(sd + "/traces/*.gz")]))
        continue
    common = ["--traces", sd + "/traces", "--tp", "1", "--windows", "2", "--layer1", sd + "/opprof", "--phases", sd + "/phases.jsonl"]
    lit, cal = v("layer2", *common), v("layer2", *common, "--representativeness", "calibrated")
    f = lit["figures"]
    print("%s %s: literal %s, calibrated %s; |SMD| max per window %s; literal on C's own %d blocks: window pass %.3f, a run fails %.3f; calibrated thresholds %s" % (
        run, os.path.basename(sd), lit["verdict"], cal["verdict"],
        [round(f.get("w%d.smd_max" % k, -1), 3) for k in (0, 1)], f.get("smd.self.blocks", 0), f.get("smd.self.window_pass_fraction", -1),
        f.get("smd.self.false_failure_rate", -1),
        {k.split(".")[2]: round(x, 3) for k, x in cal["figures"].items() if k.startswith("smd.calibrated.") and k.endswith(".threshold")}))
    if lit["verdict"] != "pass":
        print("    literal:", lit["detail"][:400])
    if cal["verdict"] != "pass":
        print("    calibrated:", cal["detail"][:400])
    rec = v("recovery", "--result-dir", sd + "/client", "--layer1-dir", sd + "/opprof", "--window-s", "2", "--step-s", "0.1", "--recovery-s", "8")
    rf = rec["figures"]
    print("    recovery (literal): %s; the clean samples lie in the band %.3f (rate %.3f, waiting %.3f) over %d; a run fails %.3f" % (
        rec["verdict"], rf.get("recovery.self.unit_pass_fraction", -1), rf.get("recovery.self.rate_in_band_fraction", -1),
        rf.get("recovery.self.waiting_in_band_fraction", -1), rf.get("recovery.self.samples", 0), rf.get("recovery.self.false_failure_rate", -1)))
    if rec["verdict"] != "pass":
        print("    recovery:", rec["detail"][:300])
    pw = v("profile-windows", "--result-dir", sd + "/client", "--windows", "2")
    print("    windows: %s, traces ready at most %.2f s; %s" % (pw["verdict"], pw["figures"].get("trace_ready_s_max", -1),
          [(os.path.basename(t)[-30:], os.path.getsize(t)) for t in glob.glob(sd + "/traces/*.gz")]))
PY
  bin/ctlq events -d $w/runs/power 2>&1 | grep -i 'power' > "$out/power-check-events.txt"
  bin/ctlq show -d $w/runs/power "$(ls $w/runs/power/runs | grep '^U1\.' | head -1)" | tail -12 > "$out/power-show-U1.txt" 2>&1
}

smoke() {
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
    $PY - "$work/A/runs/$r.load/a1" <<'PY'
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

  echo "== B: another user's process on the GPU"
  fcmd="import torch,time; x=torch.empty(2*2**30//4, device='cuda'); print('held', flush=True); time.sleep(300)"
  if command -v setpriv >/dev/null; then
    setpriv --reuid=65534 --regid=65534 --clear-groups $PY -c "$fcmd" > "$work/foreign.out" 2>&1 &
  else
    $PY -c "$fcmd" > "$work/foreign.out" 2>&1 &
  fi
  fpid=$!
  for _ in $(seq 1 120); do grep -q held "$work/foreign.out" && break; sleep 0.5; done
  echo "foreign process $fpid (uid $(awk '/^Uid/{print $2}' /proc/$fpid/status)): $(cat "$work/foreign.out")"
  bin/controller start -f protocols/gpu-smoke.yaml -d "$work/B" --gpu-backend nvml --foreground > "$out/B-controller.txt" 2>&1
  bin/ctlq status -d "$work/B" | tee "$out/B-status.txt"; echo "ctlq status exit ${PIPESTATUS[0]}"
  bin/ctlq show -d "$work/B" r1.load | tee "$out/B-show-r1.txt"
  kill $fpid; wait $fpid 2>/dev/null

  echo "== C: NVML read costs"
  bin/nvmlgpu.test -test.run 'TestReal' -test.v -test.bench 'Real' -test.benchtime 200x 2>&1 | grep -E 'ok|PASS|FAIL|Benchmark|---' | tee "$out/C-bench.txt"
  rm -rf "$work"
}

# Modes run in the order given; the first that fails ends the script
# (`engine phase3`: the campaign only once the engine checked out).
[ $# -gt 0 ] || set -- phase3
for mode in "$@"; do
  case $mode in
    build|engine|phase3|broken|energy|power|smoke) $mode || { echo "$mode failed"; exit 1; } ;;
    *) echo "usage: $0 build|engine|phase3|broken|energy|power|smoke ..." >&2; exit 2 ;;
  esac
done
