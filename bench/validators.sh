#!/usr/bin/env bash
# Read speed of the Layer-1 and Layer-2 validators, side by side with what
# reading the same bytes costs at all (cat, zcat) and with Python's json
# (what the seed's own helpers would use):
#
#   bench/validators.sh            # prints the figures
#
# 1. Layer 1: `controller validate layer1` on a stream of L1_RECORDS
#    (1,000,000) schema-v1 records, its sidecar and a signals file (a hard
#    kill 0.4 s after the last checkpoint: the check passes); `cat` of the
#    stream; Python `json.loads` of each line.
# 2. Layer 2: `controller validate layer2` (every rule: shape, families,
#    the join to Layer 1, modes, SMD) on two traces of up to L2_BYTES
#    (64 MiB) of JSON each, made from the real H200 windows in
#    pkg/contract/testdata/h200/eager by repetition; `zcat` of both; Python
#    `json.load` of both.
#
# Each figure is min / median / max wall seconds of RUNS (3) runs after
# one warm-up run (the page cache holds the inputs), MB/s of the median
# (MB = 10^6 bytes of the stream, or of the traces' JSON), and the median
# run's CPU seconds (user + sys).
#
# Needs python3 and, unless SKIP_BUILD=1, go. Environment: BIN (bin: where
# the controller is, or is built), SKIP_BUILD=1 to use $BIN/controller as
# it is (a machine without go), L1_RECORDS, L2_BYTES, RUNS, PY (python3),
# DATA (a directory to keep the inputs in and find them there next time;
# default a temporary one, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
BIN=${BIN:-bin}
PY=${PY:-python3}
RUNS=${RUNS:-3}
L1_RECORDS=${L1_RECORDS:-1000000}
L2_BYTES=${L2_BYTES:-67108864}
SRC=pkg/contract/testdata/h200/eager
if [ -n "${DATA:-}" ]; then
	mkdir -p "$DATA"
else
	DATA=$(mktemp -d)
	trap 'rm -rf "$DATA"' EXIT
fi
[ -n "${SKIP_BUILD:-}" ] || CGO_CFLAGS=${CGO_CFLAGS:--O2 -Wno-deprecated-declarations} go build -o "$BIN/" ./cmd/controller

l1=$DATA/l1-$L1_RECORDS
l2=$DATA/l2-$L2_BYTES
if [ ! -s "$l1/signals.json" ]; then
	mkdir -p "$l1"
	"$PY" bench/validators-gen.py layer1 "$l1" "$L1_RECORDS"
fi
if [ ! -s "$l2/rank0_w1.pt.trace.json.gz" ]; then
	mkdir -p "$l2"
	"$PY" bench/validators-gen.py layer2 "$SRC" "$l2" "$L2_BYTES"
fi

# stats CMD...: runs CMD once, then RUNS times; prints "min median max
# cpu": wall seconds, and the median run's CPU seconds (user + sys, its
# children's included: on a shared machine the wall clock also measures
# the neighbours).
stats() {
	"$@" >/dev/null
	local out=() TIMEFORMAT='%R %U %S'
	for _ in $(seq "$RUNS"); do
		out+=("$({ time "$@" >/dev/null 2>&1; } 2>&1)")
	done
	printf '%s\n' "${out[@]}" | sort -g | awk '{ w[NR] = $1; c[NR] = $2 + $3 } END { m = int((NR + 1) / 2); printf "%.3f %.3f %.3f %.3f\n", w[1], w[m], w[NR], c[m] }'
}
# row NAME BYTES CMD...: one line of the table.
row() {
	local name=$1 bytes=$2
	shift 2
	read -r lo med hi cpu < <(stats "$@")
	printf "%-30s %8s %8s %8s %9.0f %8s\n" "$name" "$lo" "$med" "$hi" "$(awk -v b="$bytes" -v t="$med" 'BEGIN { print b / t / 1e6 }')" "$cpu"
}
# verdict CMD...: the verdict the validator's last line gives.
verdict() { "$@" -o json | tail -n 1 | "$PY" -c 'import json,sys; v=json.load(sys.stdin); print(v["verdict"], v["detail"][:200])'; }

l1v() { "$BIN"/controller validate layer1 --dir "$l1" --signals "$l1/signals.json"; }
l2v() { "$BIN"/controller validate layer2 --traces "$l2" --layer1 "$SRC/layer1.jsonl" --phases "$SRC/phases.jsonl" --tp 1 --windows 2; }
pyl1() { "$PY" -c 'import json,sys
n = 0
with open(sys.argv[1], "rb") as f:
    for line in f:
        json.loads(line); n += 1' "$l1/layer1.jsonl"; }
pyl2() { "$PY" -c 'import gzip,json,sys
for p in sys.argv[1:]:
    with gzip.open(p, "rb") as f:
        json.load(f)' "$l2"/*.pt.trace.json.gz; }

l1bytes=$(stat -c %s "$l1/layer1.jsonl")
l2bytes=$(zcat "$l2"/*.pt.trace.json.gz | wc -c)
l2gz=$(cat "$l2"/*.pt.trace.json.gz | wc -c)
for v in "$(verdict l1v)" "$(verdict l2v)"; do
	case $v in pass*) ;; *) echo "a validator does not pass on its bench input: $v" >&2; exit 1 ;; esac
done
echo "# $(uname -n): $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $RUNS runs each, $("$PY" --version 2>&1)"
echo
echo "## 1. Layer 1: $L1_RECORDS records, $l1bytes bytes"
printf "%-30s %8s %8s %8s %9s %8s\n" "" min_s median_s max_s MB/s cpu_s
row "controller validate layer1" "$l1bytes" l1v
row "cat" "$l1bytes" cat "$l1/layer1.jsonl"
row "python json.loads per line" "$l1bytes" pyl1
echo
echo "## 2. Layer 2: two traces, $l2gz bytes of gzip, $l2bytes bytes of JSON"
printf "%-30s %8s %8s %8s %9s %8s\n" "" min_s median_s max_s MB/s cpu_s
row "controller validate layer2" "$l2bytes" l2v
row "zcat" "$l2bytes" zcat "$l2"/rank0_w0.pt.trace.json.gz "$l2"/rank0_w1.pt.trace.json.gz
row "python json.load" "$l2bytes" pyl2
