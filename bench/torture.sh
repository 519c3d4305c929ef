#!/usr/bin/env bash
# Torture: kill the controller with SIGKILL at random moments until its
# campaign completes, resume it after every kill, and check the promises of
# crash-consistent resume after each kill and at the end (bench/check):
# the store's invariants, no complete attempt started again, no ended
# attempt's directory written again, exactly one result per run, no process
# of the campaign left, no fake GPU memory held, no damaged evidence file,
# and a budget ledger never below the GPU time really used. Campaigns are repeated until KILLS kills.
#
#   KILLS=500 PATTERNS=25 MAX_SLEEP=1.5 bench/torture.sh
#   TORTURE_BIN=DIR bench/torture.sh   # DIR holds controller, standin, loadgen and check, built elsewhere
#
# A campaign has 2 x PATTERNS very short stand-in runs (a saturation run and
# the moderate run that needs its result, per pattern) on two fake GPUs.
# With HOSTILE=1 (the default) the saturation clients and servers also
# misbehave in ways a run survives: by pattern, a client plants a FIFO, a
# link out of the campaign (and replaces gates.jsonl with one), leaves a
# setsid escapee that hangs, or prints 8 MB; a server forks children that
# stay behind in its group when it exits.
# The controller is started detached; after each start or resume the script
# sleeps a random 0..MAX_SLEEP s, kills the pid in DIR/controller.lock and
# resumes; after one kill in EARLY, a foreground resume is also killed
# 0..0.3 s after its start, while it reconciles what was left. A kill is
# survived when the checks after it pass.
#
# Beside the kills, two faults come at random (1 in FAULTS of the moments
# the script would kill, half each; FAULTS=0: none): a full disk and a
# frozen controller. As root, each campaign directory lies on its own
# tmpfs of FS_SIZE; a full disk fills it at that moment, frees it after a
# random 0..MAX_SLEEP s, and resumes the campaign if the controller
# stopped it meanwhile. A frozen controller gets SIGSTOP, then SIGCONT
# after a random 0..MAX_SLEEP s. Without root there is no full disk.
#
# Three more hostile inputs, each on by default (0: off):
#  NOTIFY=1    the campaign's notify hook misbehaves: it leaves a child in
#              its group and a setsid daemon, prints 3 MB without reading
#              its event, and hangs past its 1 s bound. It runs at every
#              resume after a kill (controller-dead) and at the end. At the
#              end no process of a notification may be left, nor any run's
#              output in notify.log past the 1 MiB cap.
#  CAPACITY=1  the protocol ends with a capacity search (loadgen's open
#              loop against a stand-in of capacity 24 req/s), and 1 in AMEND
#              moments, instead of a kill, its SLO is amended (--yes): the
#              amendment must be refused once a point of the search has an
#              attempt, and no recorded amendment may have changed the
#              search after one had.
#  IMPOSTOR=1  the stand-in servers bind with SO_REUSEPORT, as vLLM does,
#              and 1 in IMPOSTORS moments a same-user process joins a slot's
#              port for 0.3..1.5 s: no attempt whose measuring ended well
#              inside such a span may be complete (a campaign the
#              failures stopped is resumed, as after a full disk).
# Output: kills, faults of each kind, kills survived, the hostile inputs'
# figures, and invariant violations (target 0).
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${KILLS:-500}
PATTERNS=${PATTERNS:-25}
MAX_SLEEP=${MAX_SLEEP:-1.5}
EARLY=${EARLY:-4} # 1 in EARLY kills is followed by one during the resume; 0: none
KEEP=${KEEP:-0}   # 1: keep the work directory
HOSTILE=${HOSTILE:-1}
FAULTS=${FAULTS:-3}       # 1 in FAULTS moments is a fault instead of a kill; 0: none
FS_SIZE=${FS_SIZE:-256m} # each campaign's tmpfs, for the full disk
NOTIFY=${NOTIFY:-1}
CAPACITY=${CAPACITY:-1}
AMEND=${AMEND:-8}         # 1 in AMEND moments amends the capacity search's SLO
IMPOSTOR=${IMPOSTOR:-1}
IMPOSTORS=${IMPOSTORS:-6} # 1 in IMPOSTORS moments an impostor joins a port

work=$(mktemp -d /tmp/torture.XXXXXX)
bin=$work/bin
if [ -n "${TORTURE_BIN:-}" ]; then
	# binaries built elsewhere (a host without Go): controller, standin, loadgen, check
	mkdir -p "$bin" && cp "$TORTURE_BIN"/{controller,standin,loadgen,check} "$bin/"
else
	go build -o "$bin/" ./cmd/controller ./cmd/standin ./cmd/loadgen ./bench/check
fi
# the capacity search's manifest: 4 output tokens a request
manifest=$work/manifest.jsonl
for ((i = 0; i < 3000; i++)); do
	echo '{"id":"r'$i'","prompt_token_ids":[11,12],"input_tokens":2,"output_tokens":4,"arrival":"steady"}'
done >"$manifest"

dir=""
fg=""
mnt=""     # the tmpfs of the campaign directory, when root
frozen=""  # a controller the script stopped with SIGSTOP
imp=""     # an impostor the script started
# held: a controller holds the campaign's lock.
held() { [ -e "$1/controller.lock" ] && ! flock -n -s "$1/controller.lock" true; }
# ours PID DIR: pid is this script's controller daemon for DIR.
ours() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$bin/controller daemon -d $2 "; }
# campaign_pids DIR: the live processes carrying the campaign directory.
campaign_pids() {
	local p
	for p in /proc/[0-9]*; do
		if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF -e "WARDEN_CAMPAIGN_DIR=$1" -e "WARDEN_NOTIFY_DIR=$1"; then
			echo "${p#/proc/}"
		fi
	done
}
finish() {
	if [ -n "$frozen" ]; then kill -CONT "$frozen" 2>/dev/null || true; fi
	if [ -n "$imp" ]; then
		kill -9 "$imp" 2>/dev/null || true
		wait "$imp" 2>/dev/null || true
	fi
	if [ -n "$mnt" ]; then rm -f "$mnt/filler"; fi
	if [ -n "$fg" ]; then
		kill -9 "$fg" 2>/dev/null || true
		wait "$fg" 2>/dev/null || true
	fi
	if [ -n "$dir" ] && held "$dir"; then
		"$bin/controller" stop -d "$dir" --timeout 60s >/dev/null 2>&1 || true
	fi
	# what a killed controller left, when the script itself is interrupted
	if [ -n "$dir" ]; then
		for p in $(campaign_pids "$dir"); do kill -9 "$p" 2>/dev/null || true; done
	fi
	if [ -n "$mnt" ] && [ "$KEEP" != 1 ]; then umount "$mnt" 2>/dev/null || umount -l "$mnt" || true; fi
	if [ "$KEEP" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap finish EXIT

# free_port: a loopback port nothing listens on, below the ephemeral range
# (32768 and up by default), so that no other program is handed it meanwhile.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

p0=""
p1=""
write_protocol() {
	local vals="" ids="" i reuse=""
	p0=$(free_port)
	p1=$(free_port)
	while [ "$p1" = "$p0" ]; do p1=$(free_port); done
	if [ "$IMPOSTOR" = 1 ]; then reuse=", --reuse-port"; fi
	for ((i = 1; i <= PATTERNS; i++)); do
		vals+="{id: p$i}, "
		ids+="p$i, "
	done
	local server='["${STANDIN}", server, --port, "${PORT}", --load-s, "0.05", --shutdown-timeout, "1", --gpu-mem-mib, "1024"'"$reuse"']'
	local client='["${STANDIN}", client, --warmup-s, "0.05", --measure-s, "0.1", --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client"]'
	if [ "$HOSTILE" = 1 ]; then
		server='{shell: '"'"'case "$$WARDEN_RUN_ID" in p*5.*) set -- --fork 2;; esac; exec "${STANDIN}" server --port "${PORT}" --load-s 0.05 --shutdown-timeout 1 --gpu-mem-mib 1024 '"${reuse:+--reuse-port}"' "$$@"'"'"'}'
		client='{shell: '"'"'a="$$WARDEN_ATTEMPT_DIR"; case "$$WARDEN_RUN_ID" in p*1.saturation) mkfifo "$$a/planted.fifo";; p*2.saturation) ln -s /etc/passwd "$$a/planted.link"; ln -sfn /nonexistent/outside "$$a/gates.jsonl";; p*3.saturation) setsid sleep 600 </dev/null >/dev/null 2>&1 &;; p*4.saturation) head -c 8000000 /dev/zero | tr "\\0" x;; esac; exec "${STANDIN}" client --warmup-s 0.05 --measure-s 0.1 --drain-s 2 --concurrency 2 --result-dir "$$a/client"'"'"'}'
	fi
	local capsrv="" capload="" capphase=""
	if [ "$CAPACITY" = 1 ]; then
		capsrv='  - name: capsrv
    kind: standin
    command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.05", --shutdown-timeout, "1", --gpu-mem-mib, "1024", --token-ms, "31.25", --max-running, "3"'"$reuse"']
    ready_timeout_s: 10
    shutdown_grace_s: 2
    group_grace_s: 1'
		capload='  - name: open
    kind: open-loop
    server: capsrv
    expected_s: 6
    client: ["${LOADGEN}", run, --manifest, "${MANIFEST}", --base-url, "http://127.0.0.1:${PORT}", --model, standin,
             --load-point, open, --request-rate, "${CAPACITY_RATE}", --arrival, steady, --ignore-eos,
             --warmup-seconds, "0.3", --clean-segment-seconds, "0.5", --num-clean-segments, "2",
             --drain-timeout-seconds, "${DRAIN_ALLOWANCE_S}", --result-dir, "${ATTEMPT_DIR}/client"]'
		capphase='  - name: search
    kind: capacity
    matrix: {pattern: p1}
    loads: [open]
    capacity:
      rate_min: 4
      rate_max: 36
      resolution: 8
      slo: {success_min: 0.99, queue_growth_max: 0.09}'
	fi
	cat >"$1" <<YAML
warden: 1
name: torture
host: {gpus: 2, cpus: 2}
budget: {cap_gpu_hours: 100}
vars: {STANDIN: "$bin/standin", LOADGEN: "$bin/loadgen", MANIFEST: "$manifest"}
slots:
  - {name: s0, gpus: [0], cpus: "0", port: $p0}
  - {name: s1, gpus: [1], cpus: "1", port: $p1}
regimes:
  - {name: two, concurrency: 2}
classes:
  - {name: c, drain_allowance_s: 5, watchdog_s: 10}
cleanup: {timeout_s: 10}
servers:
  - name: standin
    kind: standin
    command: $server
    ready_timeout_s: 10
    shutdown_grace_s: 2
    group_grace_s: 1
$capsrv
loads:
  - name: saturation
    kind: saturation
    expected_s: 5
    client: $client
  - name: moderate
    kind: moderate
    needs: [saturation]
    expected_s: 5
    env: {SATURATION: "\${NEED_SATURATION_DIR}"}
    client: ["\${STANDIN}", client, --warmup-s, "0.05", --measure-s, "0.1", --drain-s, "2", --concurrency, "1", --result-dir, "\${ATTEMPT_DIR}/client"]
$capload
axes:
  - name: pattern
    values: [${vals%, }]
phases:
  - name: matrix
    kind: primary
    matrix: {pattern: [${ids%, }]}
    loads: [saturation, moderate]
$capphase
retries: {infrastructure: 2}
stop: {quarantined_fraction_gt: 0.9}
YAML
}

rand_sleep() { awk -v r="$RANDOM" -v m="$MAX_SLEEP" 'BEGIN { printf "%.3f", r / 32767 * m }'; }

# check DIR SNAPSHOT [-final ...]: run the checker, print and count
# violations (and the attempts failed naming an impostor).
violations=0
caught=0
check() {
	local out rc=0
	out=$("$bin/check" -d "$1" -snapshot "$2" ${3:-} 2>"$work/check.err") || rc=$?
	if grep -q '^impostors:' "$work/check.err"; then
		caught=$((caught + $(awk '/^impostors:/ { print $4 }' "$work/check.err")))
	fi
	if [ "$rc" -eq 2 ]; then
		echo "check failed on $1: $out $(cat "$work/check.err")" >&2
		violations=$((violations + 1))
		return 1
	fi
	if [ -n "$out" ]; then
		echo "$out" | sed "s|^|  $(basename "$1"): |"
		violations=$((violations + $(grep -c '^violation:' <<<"$out")))
		return 1
	fi
}

# campaign_dir: the directory of the next campaign; as root (with faults),
# on a tmpfs of its own, the previous one unmounted.
campaign_dir() {
	if [ "$(id -u)" != 0 ] || [ "$FAULTS" -le 0 ]; then
		dir=$work/c$campaigns
		return
	fi
	if [ -n "$mnt" ] && [ "$KEEP" != 1 ]; then umount "$mnt" 2>/dev/null || umount -l "$mnt"; fi
	mnt=$work/fs$campaigns
	mkdir "$mnt"
	mount -t tmpfs -o "size=$FS_SIZE,mode=0755" none "$mnt"
	dir=$mnt/c$campaigns
}

# fill: the campaign's file system full for a random while, then freed.
fills=0
fullstops=0 # full disks after which the controller had stopped
fill() {
	cat /dev/zero >"$mnt/filler" 2>/dev/null || true # until ENOSPC
	fills=$((fills + 1))
	filled=1
	sleep "$(rand_sleep)"
	rm -f "$mnt/filler"
}

# freeze PID: the controller stopped (SIGSTOP) for a random while.
freezes=0
freeze() {
	kill -STOP "$1"
	frozen=$1
	freezes=$((freezes + 1))
	sleep "$(rand_sleep)"
	kill -CONT "$1"
	frozen=""
}

# fault PID: a full disk or a frozen controller, half each (a frozen one
# only, without a tmpfs).
fault() {
	if [ -n "$mnt" ] && ((RANDOM % 2 == 0)); then
		fill
	else
		freeze "$1"
	fi
}

# amend PROTOCOL: the capacity search's SLO amended (--yes) while the
# campaign runs: accepted only while no point of the search has started,
# refused after. The SLO flips between success_min 0.99 and 0.98.
amends=0
amended=0
refused=0
amend_other=0
amend() {
	local next out rc=0
	amends=$((amends + 1))
	if grep -q 'success_min: 0.99,' "$cur_proto"; then
		next=$work/torture-$campaigns-a$amends.yaml
		sed 's/success_min: 0.99,/success_min: 0.98,/' "$cur_proto" >"$next"
	else
		next=$work/torture-$campaigns-a$amends.yaml
		sed 's/success_min: 0.98,/success_min: 0.99,/' "$cur_proto" >"$next"
	fi
	out=$("$bin/controller" amend -d "$dir" -f "$next" --id "A-$amends" --reason "torture: the SLO amended mid-search" --yes 2>&1) || rc=$?
	if [ "$rc" -eq 0 ]; then
		amended=$((amended + 1))
		cur_proto=$next
	elif grep -q "changes capacity search" <<<"$out"; then
		refused=$((refused + 1))
	else
		amend_other=$((amend_other + 1)) # the controller was starting, or exiting
	fi
}

# impostor: a same-user process joins a slot's SO_REUSEPORT port for a
# random while; its span is kept for the final check.
spans=0
impostor() {
	local port t0 t1 ready=$work/impostor.ready
	port=$p0
	if ((RANDOM % 2)); then port=$p1; fi
	rm -f "$ready"
	"$bin/standin" impostor --port "$port" --ready-file "$ready" >/dev/null 2>&1 &
	imp=$!
	for ((i = 0; i < 100; i++)); do
		[ -e "$ready" ] && break
		kill -0 "$imp" 2>/dev/null || break
		sleep 0.01
	done
	if [ -e "$ready" ]; then
		t0=$(date +%s%N)
		sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.3f", 0.3 + r / 32767 * 1.2 }')"
		t1=$(date +%s%N)
		echo "$port $t0 $t1" >>"$work/c$campaigns.impostors"
		spans=$((spans + 1))
		disturbed=1
	fi
	kill "$imp" 2>/dev/null || true
	wait "$imp" 2>/dev/null || true
	imp=""
}

kills=0
early=0
survived=0
campaigns=0
runs=0
hooks=0
start=$(date +%s)
while [ "$kills" -lt "$KILLS" ]; do
	campaigns=$((campaigns + 1))
	campaign_dir
	snap=$work/c$campaigns.snapshot
	write_protocol "$work/torture-$campaigns.yaml"
	cur_proto=$work/torture-$campaigns.yaml
	notify=()
	if [ "$NOTIFY" = 1 ]; then
		notify=(--notify 'sleep 600 & setsid sleep 601 </dev/null >/dev/null 2>&1 & head -c 3000000 /dev/zero; exec sleep 600' --notify-timeout-s 1)
	fi
	if ! out=$("$bin/controller" start -f "$work/torture-$campaigns.yaml" -d "$dir" --gpu-backend fake "${notify[@]}" 2>&1); then
		echo "start failed: $out" >&2
		exit 2
	fi
	ckills=0
	cfaults=$((fills + freezes))
	filled=0    # the disk was full since the last resume
	disturbed=0 # an impostor held a port since the last resume
	while :; do
		sleep "$(rand_sleep)"
		if ! held "$dir"; then
			# the campaign ended on its own, or stopped for the full disk
			# or for an impostor's failures: then it is resumed (nothing to
			# do if it is complete)
			[ "$filled" = 1 ] || [ "$disturbed" = 1 ] || break
			[ "$filled" = 1 ] && fullstops=$((fullstops + 1))
			filled=0
			disturbed=0
			if ! out=$("$bin/controller" resume -d "$dir" 2>&1); then
				echo "  c$campaigns: resume after a full disk or an impostor failed: $out"
				violations=$((violations + 1))
				break
			fi
			continue
		fi
		pid=$(cat "$dir/controller.lock")
		ours "$pid" "$dir" || break
		if ((FAULTS > 0 && RANDOM % FAULTS == 0)); then
			fault "$pid"
			continue
		fi
		if [ "$CAPACITY" = 1 ] && ((AMEND > 0 && RANDOM % AMEND == 0)); then
			amend
			continue
		fi
		if [ "$IMPOSTOR" = 1 ] && ((IMPOSTORS > 0 && RANDOM % IMPOSTORS == 0)); then
			impostor
			continue
		fi
		kill -9 "$pid"
		while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
		kills=$((kills + 1))
		ckills=$((ckills + 1))
		ok=1
		check "$dir" "$snap" || ok=0
		survived=$((survived + ok))
		if ((EARLY > 0 && RANDOM % EARLY == 0)); then
			# a kill during the resume itself, while it reconciles what
			# the last kill left: a foreground resume, killed 0..0.3 s in
			"$bin/controller" resume -d "$dir" --foreground >/dev/null 2>&1 &
			fg=$!
			sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.3f", r / 32767 * 0.3 }')"
			kill -9 "$fg" 2>/dev/null || true
			wait "$fg" 2>/dev/null || true
			fg=""
			kills=$((kills + 1))
			early=$((early + 1))
			ckills=$((ckills + 1))
			ok=1
			check "$dir" "$snap" || ok=0
			survived=$((survived + ok))
		fi
		filled=0
		if ! out=$("$bin/controller" resume -d "$dir" 2>&1); then
			echo "  c$campaigns: resume after kill $kills failed: $out"
			violations=$((violations + 1))
			break
		fi
		if ((kills % 50 == 0)); then
			echo "  ... $kills kills, $violations violations, $(($(date +%s) - start)) s"
		fi
	done
	while held "$dir"; do sleep 0.1; done
	check "$dir" "$snap" "-final -impostors $work/c$campaigns.impostors" || true
	hooks=$((hooks + $(grep -c -a '^\[warden\] notification ' "$dir/notify.log" 2>/dev/null || true)))
	n=$(grep -c '"id": "p[0-9]*\.' "$dir/plan.json" || true)
	runs=$((runs + n))
	echo "campaign c$campaigns: $n runs, $ckills kills, $((fills + freezes - cfaults)) faults, $(ls -d "$dir"/runs/*/a* | wc -l) attempts"
done
echo "campaigns: $campaigns ($runs runs), $(($(date +%s) - start)) s"
echo "kills: $kills ($early of them during a resume)"
echo "faults: $fills full disks ($fullstops of them stopped the campaign, resumed), $freezes frozen controllers"
echo "kills survived: $survived"
echo "notify hooks: $hooks run (each forks, floods 3 MB and hangs past its 1 s bound)"
echo "SLO amendments mid-search: $amends tried, $amended recorded before the search's first point, $refused refused after, $amend_other not reached (controller starting or exiting)"
echo "impostors: $spans spans on a SO_REUSEPORT port; $caught attempts failed naming a port impostor"
echo "invariant violations: $violations"
[ "$violations" -eq 0 ]
