#!/usr/bin/env bash
# Precision and capacity of bin/loadgen, side by side with a Python asyncio
# + aiohttp client doing the same schedule (bench/pyclient.py, Debian's
# python3-aiohttp): what the seed's Python helper would have been.
#
#   bench/loadgen.sh            # prints the figures
#
# 1. Schedule error (sent - planned): steady and burst:8 at 100, 1,000 and
#    10,000 requests/s against a loopback no-op server (bench/noopserver),
#    DURATION_S seconds each; p50, p99, max in ms. Both clients run on
#    OPEN_CPU (default CLIENT_CPU; OPEN_CPU=0,1 gives them two cores).
# 2. Closed-loop capacity at 256 and 1,024 concurrent streams, the client on
#    one core (taskset -c $CLIENT_CPU), the server on another: completed
#    requests/s; each response is 16 token chunks 5 ms apart. Also the
#    client's CPU time (user + sys) per request, and the capacity of one
#    whole core it implies (1 / CPU per request): on a shared machine the
#    wall-clock rate measures the neighbours as much as the client.
#    Beside them, the floor: bench/readfloor/readfloor.c, a C client that
#    only writes each request and reads its response (one read(2) per epoll
#    readiness, no parsing, no timestamps), on the same core against the
#    same server: what the kernel alone costs a request of this shape
#    (needs cc; "-" without it).
# 3. Memory per outstanding request: the client's resident memory while it
#    holds HOLD_N streams open minus while it holds 1, over HOLD_N - 1. Each
#    stream is 40 chunks 150 ms apart (6 s); once N connections to the
#    server are open, the client's VmRSS (/proc/PID/status) is sampled every 0.1 s for 1 s and
#    the median taken, the same for both clients (peak RSS would be the
#    manifest read's garbage, not the streams).
#
# Needs go, taskset and /usr/bin/python3 with aiohttp (apt-get install
# python3-aiohttp). Loopback only; everything it starts it stops.
# Environment: SECTIONS (123: which to run), DURATION_S (5), CLIENT_CPU (0), OPEN_CPU
# (CLIENT_CPU: section 1's client CPUs), SERVER_CPU (1; a list such as
# 2-9 gives the server room, so that the client is what is measured), PY
# (/usr/bin/python3), HOLD_N (4096: section 3's streams), BIN (bin), SKIP_BUILD=1 to use binaries already in
# BIN (static ones, for a machine without go; BIN/readfloor too, where it is there).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
DURATION_S=${DURATION_S:-5}
CLIENT_CPU=${CLIENT_CPU:-0}
OPEN_CPU=${OPEN_CPU:-$CLIENT_CPU}
SERVER_CPU=${SERVER_CPU:-1}
PY=${PY:-/usr/bin/python3}
BIN=${BIN:-bin}
HOLD_N=${HOLD_N:-4096}
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

[ -n "${SKIP_BUILD:-}" ] || go build -o "$BIN/" ./cmd/loadgen ./bench/noopserver
"$BIN"/loadgen materialize --id B --input-fixed 4 --output-fixed 1 --arrival steady \
	--num-requests 120000 --workload-seed 1 --out "$work/m.jsonl" >/dev/null

# start_server TOKENS TOKEN_MS: a no-op server on SERVER_CPU; sets $url.
start_server() {
	rm -f "$work/port"
	taskset -c "$SERVER_CPU" "$BIN"/noopserver --port-file "$work/port" --tokens "$1" --token-ms "$2" &
	pids+=($!)
	server_pid=$!
	for _ in $(seq 200); do [ -s "$work/port" ] && break; sleep 0.05; done
	url="http://127.0.0.1:$(cat "$work/port")"
}
stop_server() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; }

# lg ARGS...: run loadgen on OPEN_CPU into a fresh result directory.
lg() {
	local dir="$work/r$RANDOM$RANDOM"
	taskset -c "$OPEN_CPU" "$BIN"/loadgen run --manifest "$work/m.jsonl" --base-url "$url" --model m \
		--warmup-seconds 0 --drain-timeout-seconds 30 --result-dir "$dir" "$@" >/dev/null
	echo "$dir/result.json"
}
SECTIONS=${SECTIONS:-123}
# cpu_of FILE: user + sys seconds written by /usr/bin/time -f "%U %S" -o FILE.
cpu_of() { awk '{print $1 + $2}' "$1"; }
field() { "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

echo "# $(uname -n): loadgen vs Python asyncio+aiohttp ($("$PY" -c 'import aiohttp,sys; print("aiohttp", aiohttp.__version__, "python", sys.version.split()[0])')), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), client on CPU $CLIENT_CPU (open loop: $OPEN_CPU), server on CPU $SERVER_CPU"
if [[ $SECTIONS == *1* ]]; then
echo
echo "## 1. Schedule error, sent - planned (ms), ${DURATION_S} s per point, clients on CPU $OPEN_CPU"
printf "%-8s %7s | %9s %9s %9s | %9s %9s %9s | %s\n" arrival rps go_p50 go_p99 go_max py_p50 py_p99 py_max "p99 ratio py/go"
start_server 1 0
for arrival in steady burst:8; do
	for rate in 100 1000 10000; do
		r=$(lg --load-point bench --request-rate "$rate" --arrival "$arrival" --max-concurrency 100000 \
			--clean-segment-seconds "$DURATION_S" --num-clean-segments 1)
		read -r g50 g99 gmax < <(field "$r" "'%.4f %.4f %.4f' % (r['lag']['all_ms']['p50'], r['lag']['all_ms']['p99'], r['lag']['all_ms']['max'])")
		py=$(taskset -c "$OPEN_CPU" "$PY" bench/pyclient.py --base-url "$url" --mode open --rate "$rate" --arrival "$arrival" --duration "$DURATION_S")
		read -r p50 p99 pmax < <("$PY" -c "import json,sys; r=json.loads(sys.argv[1]); print('%.4f %.4f %.4f' % (r['lag_p50_ms'], r['lag_p99_ms'], r['lag_max_ms']))" "$py")
		ratio=$("$PY" -c "import sys; g,p=float(sys.argv[1]),float(sys.argv[2]); print('%.1f' % (p/g) if g > 0 else 'inf')" "$g99" "$p99")
		printf "%-8s %7s | %9s %9s %9s | %9s %9s %9s | %s\n" "$arrival" "$rate" "$g50" "$g99" "$gmax" "$p50" "$p99" "$pmax" "$ratio"
	done
done
stop_server
fi

if [[ $SECTIONS == *2* ]]; then
echo
echo "## 2. Closed-loop capacity, client on one core (completed requests/s over ${DURATION_S} s; 16 chunks 5 ms apart)"
printf "%8s | %10s %10s %11s | %10s %10s %11s | %s | %s\n" streams go_rps go_cpu_us go_core_rps py_rps py_cpu_us py_core_rps "ratios go/py: rps, core_rps" "floor_cpu_us go/floor"
floor=""
if [ -n "${SKIP_BUILD:-}" ] && [ -x "$BIN/readfloor" ]; then floor="$BIN/readfloor"
elif command -v cc >/dev/null && cc -O2 -o "$work/readfloor" bench/readfloor/readfloor.c; then floor="$work/readfloor"; fi
start_server 16 5
for c in 256 1024; do
	dir="$work/cap$c"
	/usr/bin/time -f "%U %S" -o "$work/gotime" taskset -c "$CLIENT_CPU" "$BIN"/loadgen run --manifest "$work/m.jsonl" --base-url "$url" --model m \
		--load-point bench --request-rate inf --max-concurrency "$c" --warmup-seconds 1 \
		--clean-segment-seconds "$DURATION_S" --num-clean-segments 1 --drain-timeout-seconds 30 --result-dir "$dir" >/dev/null
	read -r g gn < <(field "$dir/result.json" "'%.1f %d' % (r['clean']['completed_rps'], r['totals']['admitted'])")
	gcpu=$(cpu_of "$work/gotime")
	py=$(/usr/bin/time -f "%U %S" -o "$work/pytime" taskset -c "$CLIENT_CPU" "$PY" bench/pyclient.py --base-url "$url" --mode closed --concurrency "$c" --warmup 1 --duration "$DURATION_S")
	read -r p pn < <("$PY" -c "import json,sys; r=json.loads(sys.argv[1]); print('%.1f %d' % (r['completed_rps'], r['total_completed']))" "$py")
	pcpu=$(cpu_of "$work/pytime")
	fus=-
	if [ -n "$floor" ]; then
		fus=$(field <(taskset -c "$CLIENT_CPU" "$floor" "${url##*:}" "$c" 1 "$DURATION_S") "'%.1f' % r['cpu_us_per_request']")
	fi
	"$PY" - "$c" "$g" "$gn" "$gcpu" "$p" "$pn" "$pcpu" "$fus" <<'PYEOF'
import sys
c, g, gn, gcpu, p, pn, pcpu = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
gus, pus = gcpu / gn * 1e6, pcpu / pn * 1e6
floor = "%s %s" % (sys.argv[8], "-" if sys.argv[8] == "-" else "%.2f" % (gus / float(sys.argv[8])))
print("%8s | %10.1f %10.1f %11.0f | %10.1f %10.1f %11.0f | %.1f, %.1f | %s" % (c, g, gus, 1e6 / gus, p, pus, 1e6 / pus, g / p, pus / gus, floor))
PYEOF
done
stop_server
fi

if [[ $SECTIONS == *3* ]]; then
echo
echo "## 3. Memory per outstanding request: VmRSS held with $HOLD_N streams open minus with 1, over $((HOLD_N - 1))"
echo "#    (each client on CPU $CLIENT_CPU against streams of 40 chunks 150 ms apart; once N connections are open,"
echo "#    /proc/PID/status VmRSS sampled every 0.1 s for 1 s, the median taken; same method for both clients)"
# conns_to_server: established loopback connections to the server's port
# from the client side (one client runs at a time), from /proc/net/tcp.
conns_to_server() {
	awk -v port="$(printf ':%04X' "${url##*:}")" '$4 == "01" && substr($3, length($3) - 4) == port {n++} END {print n + 0}' /proc/net/tcp
}
# held_rss N CMD...: starts CMD in the background; once N connections to
# the server are open, prints the median of 11 VmRSS samples (KiB) of CMD
# 0.1 s apart, then waits for it. Prints "error" when CMD ends before N
# are open, or when fewer stay open for the whole sampling.
held_rss() {
	local n=$1; shift
	"$@" >/dev/null 2>&1 &
	local pid=$! open=0 samples=()
	for _ in $(seq 600); do
		open=$(conns_to_server)
		[ "$open" -ge "$n" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	for _ in $(seq 11); do
		[ "$open" -ge "$n" ] || break
		samples+=("$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null)")
		sleep 0.1
		open=$(conns_to_server)
	done
	wait "$pid" 2>/dev/null || true
	if [ "${#samples[@]}" -lt 11 ]; then echo error; return; fi
	printf '%s\n' "${samples[@]}" | sort -n | sed -n 6p
}
"$BIN"/loadgen materialize --id M --input-fixed 4 --output-fixed 1 --arrival steady \
	--num-requests $((HOLD_N * 2)) --workload-seed 1 --out "$work/m3.jsonl" >/dev/null
start_server 40 150
declare -A rss
for c in 1 "$HOLD_N"; do
	rss[go$c]=$(held_rss "$c" taskset -c "$CLIENT_CPU" "$BIN"/loadgen run --manifest "$work/m3.jsonl" --base-url "$url" --model m \
		--load-point bench --request-rate inf --max-concurrency "$c" --warmup-seconds 0 --clean-segment-seconds 3 \
		--num-clean-segments 1 --drain-timeout-seconds 30 --result-dir "$work/mem$c")
	rss[py$c]=$(held_rss "$c" taskset -c "$CLIENT_CPU" "$PY" bench/pyclient.py --base-url "$url" --mode closed --concurrency "$c" --warmup 0 --duration 3)
done
stop_server
"$PY" - "$HOLD_N" "${rss[go1]}" "${rss[go$HOLD_N]}" "${rss[py1]}" "${rss[py$HOLD_N]}" <<'PYEOF'
import sys
n = int(sys.argv[1])
if "error" in sys.argv[2:]:
    print("error: a client ended before holding %d streams for the whole sampling: %s" % (n, " ".join(sys.argv[2:])))
    sys.exit(0)
g1, gn, p1, pn = map(int, sys.argv[2:])
gper, pper = (gn - g1) / (n - 1), (pn - p1) / (n - 1)
print("client  rss_1_KiB rss_%d_KiB KiB_per_outstanding" % n)
print("go      %9d %12d %19.1f" % (g1, gn, gper))
print("python  %9d %12d %19.1f" % (p1, pn, pper))
print("ratio python/go per outstanding request: %.1f" % (pper / gper if gper > 0 else float("inf")))
PYEOF
fi
