#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for tests and the demo: two nodes
# (n1, n2), each with four fake GPUs, accounting through slurmdbd and MariaDB.
# Debian 12 (Slurm 22.05), run as root, no systemd needed.
#
#   scripts/slurm-cluster.sh install   # the Debian packages, if missing
#   scripts/slurm-cluster.sh up        # configure and start every daemon (idempotent)
#   scripts/slurm-cluster.sh check     # smoke test; prints figures, non-zero on failure
#   scripts/slurm-cluster.sh status    # one line per daemon, then sinfo
#   scripts/slurm-cluster.sh down      # cancel jobs, stop every daemon by its pid file
#
# Both nodes run on this host: each slurmd has its own port, spool directory,
# pid file and log, and each node declares all of the host's CPUs and memory.
# The GPUs are character devices /dev/fakegpu0..7 (major 195, like NVIDIA's).
set -euo pipefail

CLUSTER=warden
NODES=(n1 n2)
PARTITION=debug
PACKAGES=(slurm-wlm slurmdbd mariadb-server munge)

ETC=/etc/slurm
SLURM_CONF=$ETC/slurm.conf
GRES_CONF=$ETC/gres.conf
CGROUP_CONF=$ETC/cgroup.conf
DBD_CONF=$ETC/slurmdbd.conf
STATE_DIR=/var/lib/slurm/slurmctld
SPOOL_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm

MUNGE_PID=/run/munge/munged.pid
MUNGE_LOG=/var/log/munge/munged.log
MARIADB_PID=/run/mysqld/mysqld.pid
MARIADB_SOCK=/run/mysqld/mysqld.sock
MARIADB_LOG=/var/log/mysql/error.log
DBD_PID=/run/slurmdbd.pid
DBD_LOG=$LOG_DIR/slurmdbd.log
CTLD_PID=/run/slurmctld.pid
CTLD_LOG=$LOG_DIR/slurmctld.log
slurmd_pid() { echo "/run/slurmd-$1.pid"; }
slurmd_log() { echo "$LOG_DIR/slurmd-$1.log"; }

T0=${EPOCHREALTIME/./}
# Progress lines carry the seconds since the command started.
say() {
  local ms=$(( (${EPOCHREALTIME/./} - T0) / 1000 ))
  printf 'slurm-cluster: [%d.%01ds] %s\n' $(( ms / 1000 )) $(( ms % 1000 / 100 )) "$*"
}
die() { echo "slurm-cluster: error: $*" >&2; exit 1; }

# show_log FILE: the last lines of a daemon's log, on stderr.
show_log() {
  if [ -r "$1" ]; then
    echo "--- last lines of $1:" >&2
    tail -n 25 "$1" >&2
    echo "---" >&2
  else
    echo "--- $1 does not exist" >&2
  fi
}

# fail NAME LOG MESSAGE: stop with an error that names the daemon and its log.
fail() {
  echo "slurm-cluster: error: $1: $3 (log: $2)" >&2
  show_log "$2"
  exit 1
}

# Daemons write their own logs as their own users; what they print while
# starting (before the log is open) goes to RUN_DIR/NAME.out.
RUN_DIR=/run/slurm-cluster

# launch NAME LOG COMMAND...: run a daemon's start command (it daemonises),
# its output to RUN_DIR; on failure show that output and the log.
launch() {
  local name=$1 log=$2 out
  shift 2
  out="$RUN_DIR/${name// /-}.out"
  install -d -m 0755 "$RUN_DIR"
  if ! "$@" </dev/null >"$out" 2>&1; then
    show_log "$out"
    fail "$name" "$log" "failed to start"
  fi
}

now_ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }

# alive PIDFILE COMM: the pid file names a live process called COMM. A
# zombie counts as gone: nothing here reaps daemons whose parent is PID 1,
# so a stopped daemon may linger as one. The name check guards against a
# stale pid file whose number has been reused.
alive() {
  local pid="" stat comm
  read -r pid 2>/dev/null <"$1" || [ -n "$pid" ] || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  read -r stat 2>/dev/null <"/proc/$pid/stat" || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ] || return 1
  read -r comm 2>/dev/null <"/proc/$pid/comm" || return 1
  [ "$comm" = "$2" ]
}

pid_in() { local pid=""; read -r pid <"$1" || true; echo "$pid"; }

# wait_until SECONDS NAME LOG DESCRIPTION COMMAND...: poll COMMAND every 0.2 s
# until it succeeds; past the deadline, fail naming the daemon and its log.
wait_until() {
  local limit=$1 name=$2 log=$3 what=$4
  shift 4
  local deadline=$(( $(now_ms) + limit * 1000 ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(now_ms)" -ge "$deadline" ]; then
      fail "$name" "$log" "not $what after ${limit}s"
    fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------- install

cmd_install() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "packages already installed: ${PACKAGES[*]}"
    return 0
  fi
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  say "installed: $(slurmd -V)"
}

# ---------------------------------------------------------------- config

CONFIG_CHANGED=0
DBD_CONFIG_CHANGED=0

# put FILE MODE OWNER FLAG: write stdin to FILE when its content differs,
# and then set the variable named FLAG to 1.
put() {
  local file=$1 mode=$2 owner=$3 flag=$4 tmp
  tmp=$(mktemp "$file.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  chown "$owner" "$tmp"
  if [ -f "$file" ] && cmp -s "$tmp" "$file"; then
    rm -f "$tmp"
    chmod "$mode" "$file"
    chown "$owner" "$file"
    return 0
  fi
  mv -f "$tmp" "$file"
  printf -v "$flag" 1
}

node_line() {
  # slurmd -C measures this host: CPUs, boards, sockets, cores, threads and
  # memory. Declaring them exactly keeps Slurm from guessing the topology.
  local hw
  hw=$(slurmd -C | sed -n 's/^NodeName=[^ ]* //p' | head -n 1)
  [ -n "$hw" ] || die "slurmd -C printed no node line"
  echo "$hw"
}

write_configs() {
  local host hw pass i
  host=$(hostname -s)
  hw=$(node_line)
  install -d -m 0755 "$ETC"
  install -d -o slurm -g slurm -m 0755 "$STATE_DIR" "$LOG_DIR" "$SPOOL_DIR"
  for i in "${NODES[@]}"; do
    install -d -o slurm -g slurm -m 0755 "$SPOOL_DIR/$i"
  done

  put "$SLURM_CONF" 0644 root:root CONFIG_CHANGED <<EOF
# Written by scripts/slurm-cluster.sh: two nodes on this host, four fake GPUs each.
ClusterName=$CLUSTER
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
MpiDefault=none
# No mail from a test cluster (Debian has no /bin/mail by default).
MailProg=/bin/true
SlurmctldPort=6817
SlurmctldPidFile=$CTLD_PID
SlurmctldLogFile=$CTLD_LOG
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR/%n
SlurmdPidFile=/run/slurmd-%n.pid
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/affinity,task/cgroup
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
JobAcctGatherType=jobacct_gather/cgroup
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=17001 $hw Gres=gpu:4 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=17002 $hw Gres=gpu:4 State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

  # Every GPU needs a File with its own device number: without File a node
  # reports 0 GPUs and goes INVAL; copies of one device make steps fail.
  put "$GRES_CONF" 0644 root:root CONFIG_CHANGED <<EOF
NodeName=n1 Name=gpu File=/dev/fakegpu[0-3]
NodeName=n2 Name=gpu File=/dev/fakegpu[4-7]
EOF

  # autodetect: cgroup v1 on a hybrid host (v2 alone is refused there), v2 on
  # a unified one.
  put "$CGROUP_CONF" 0644 root:root CONFIG_CHANGED <<EOF
CgroupPlugin=autodetect
ConstrainCores=yes
ConstrainDevices=yes
EOF

  # The database password is made once and kept in slurmdbd.conf (0600).
  pass=""
  if [ -r "$DBD_CONF" ]; then
    pass=$(sed -n 's/^StoragePass=//p' "$DBD_CONF")
  fi
  if [ -z "$pass" ]; then
    pass=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
  fi
  DB_PASS=$pass
  put "$DBD_CONF" 0600 slurm:slurm DBD_CONFIG_CHANGED <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
PidFile=$DBD_PID
LogFile=$DBD_LOG
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
EOF
}

make_gpus() {
  local n want
  for n in 0 1 2 3 4 5 6 7; do
    want="c3:$(printf '%x' "$n")"
    if [ "$(stat -c '%F' "/dev/fakegpu$n" 2>/dev/null)" != "character special file" ] ||
       [ "$(stat -c 'c%t:%T' "/dev/fakegpu$n")" != "$want" ]; then
      rm -f "/dev/fakegpu$n"
      mknod -m 666 "/dev/fakegpu$n" c 195 "$n"
    fi
  done
}

# ---------------------------------------------------------------- daemons

start_munge() {
  if alive "$MUNGE_PID" munged; then
    say "munged already running (pid $(pid_in "$MUNGE_PID"))"
    return 0
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
  if [ ! -s /etc/munge/munge.key ]; then
    runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  say "starting munged"
  if [ -e "$MUNGE_LOG" ]; then chown munge:munge "$MUNGE_LOG"; fi
  launch munged "$MUNGE_LOG" runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PID" --log-file="$MUNGE_LOG"
  wait_until 10 munged "$MUNGE_LOG" "running" alive "$MUNGE_PID" munged
  wait_until 10 munged "$MUNGE_LOG" "answering (munge -n | unmunge)" sh -c 'munge -n | unmunge'
}

mariadb_ready() {
  [ -S "$MARIADB_SOCK" ] && mariadb-admin --protocol=socket --socket="$MARIADB_SOCK" ping
}

start_mariadb() {
  if alive "$MARIADB_PID" mariadbd && mariadb_ready >/dev/null 2>&1; then
    say "mariadbd already running (pid $(pid_in "$MARIADB_PID"))"
  else
    install -d -o mysql -g mysql -m 0755 /run/mysqld
    install -d -o mysql -g adm -m 2750 /var/log/mysql
    if [ ! -d /var/lib/mysql/mysql ]; then
      say "initialising the MariaDB data directory"
      install -d -m 0755 "$RUN_DIR"
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >"$RUN_DIR/mariadb-install-db.out" 2>&1 ||
        fail mariadbd "$RUN_DIR/mariadb-install-db.out" "mariadb-install-db failed"
    fi
    say "starting mariadbd"
    install -d -m 0755 "$RUN_DIR"
    if [ -e "$MARIADB_LOG" ]; then chown mysql:adm "$MARIADB_LOG"; fi
    # mariadbd stays in the foreground: run it in the background, in a
    # session of its own.
    setsid /usr/sbin/mariadbd --user=mysql --pid-file="$MARIADB_PID" --socket="$MARIADB_SOCK" \
      --log-error="$MARIADB_LOG" </dev/null >"$RUN_DIR/mariadbd.out" 2>&1 &
    wait_until 60 mariadbd "$MARIADB_LOG" "answering on $MARIADB_SOCK" mariadb_ready
    wait_until 10 mariadbd "$MARIADB_LOG" "running (pid file $MARIADB_PID)" alive "$MARIADB_PID" mariadbd
  fi
  # The accounting database and its user; the password is the one in
  # slurmdbd.conf, set again each time so the two always agree.
  mariadb --protocol=socket --socket="$MARIADB_SOCK" <<EOF || fail mariadbd "$MARIADB_LOG" "could not create the accounting database"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF
}

dbd_ready() { timeout 10 sacctmgr -n -P list cluster format=cluster; }

# start_daemon NAME COMM PIDFILE LOG CMD...: unless the process PIDFILE
# names runs as COMM, start CMD and wait until it has written PIDFILE.
start_daemon() {
  local name=$1 comm=$2 pidfile=$3 log=$4
  shift 4
  if alive "$pidfile" "$comm"; then
    say "$name already running (pid $(pid_in "$pidfile"))"
    return 0
  fi
  say "starting $name"
  launch "$name" "$log" "$@"
  wait_until 30 "$name" "$log" "running (pid file $pidfile)" alive "$pidfile" "$comm"
}

# start_slurmdbd starts slurmdbd unless it runs, and waits until it answers
# (at once when it ran already).
start_slurmdbd() {
  start_daemon slurmdbd slurmdbd "$DBD_PID" "$DBD_LOG" /usr/sbin/slurmdbd
  wait_until 60 slurmdbd "$DBD_LOG" "answering sacctmgr" dbd_ready
}

ctld_ready() { timeout 5 scontrol ping | grep -q 'is UP'; }

# start_slurmctld starts slurmctld unless it runs, and waits until it
# answers (at once when it ran already).
start_slurmctld() {
  start_daemon slurmctld slurmctld "$CTLD_PID" "$CTLD_LOG" /usr/sbin/slurmctld
  wait_until 30 slurmctld "$CTLD_LOG" "answering scontrol ping" ctld_ready
}

start_slurmd() {
  local node=$1 pid log
  pid=$(slurmd_pid "$node")
  log=$(slurmd_log "$node")
  start_daemon "slurmd $node" slurmd "$pid" "$log" /usr/sbin/slurmd -N "$node"
}

# stop NAME PIDFILE COMM LOG SECONDS: SIGTERM the process its pid file names,
# wait for it to go; past the deadline SIGKILL it and wait a little more.
stop() {
  local name=$1 pidfile=$2 comm=$3 log=$4 limit=$5 pid deadline
  if ! alive "$pidfile" "$comm"; then
    [ "${QUIET_STOP:-0}" = 1 ] || say "$name not running"
    return 0
  fi
  pid=$(pid_in "$pidfile")
  say "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(( $(now_ms) + limit * 1000 ))
  while alive "$pidfile" "$comm"; do
    if [ "$(now_ms)" -ge "$deadline" ]; then
      echo "slurm-cluster: $name (pid $pid) still running ${limit}s after SIGTERM; sending SIGKILL (log: $log)" >&2
      show_log "$log"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$(( $(now_ms) + 5000 ))
      while alive "$pidfile" "$comm"; do
        [ "$(now_ms)" -lt "$deadline" ] || fail "$name" "$log" "pid $pid survived SIGKILL"
        sleep 0.2
      done
      break
    fi
    sleep 0.2
  done
}

stop_slurm_daemons() {
  local node
  for node in "${NODES[@]}"; do
    stop "slurmd $node" "$(slurmd_pid "$node")" slurmd "$(slurmd_log "$node")" 30
  done
  stop slurmctld "$CTLD_PID" slurmctld "$CTLD_LOG" 30
}

# ---------------------------------------------------------------- health

node_states() { timeout 10 sinfo -h -N -p "$PARTITION" -o '%N %T' 2>/dev/null | sort -u; }

nodes_idle() {
  local states
  states=$(node_states) || return 1
  [ "$states" = "$(printf 'n1 idle\nn2 idle')" ]
}

# Usable: every node idle or running work, none down, drained or invalid.
nodes_usable() {
  local states
  states=$(node_states) || return 1
  [ "$(echo "$states" | wc -l)" -eq ${#NODES[@]} ] || return 1
  ! echo "$states" | grep -qvE '^n[12] (idle|mixed|allocated|completing)$'
}

cluster_known() { dbd_ready 2>/dev/null | grep -qx "$CLUSTER"; }

all_running() {
  local node
  alive "$MUNGE_PID" munged && alive "$MARIADB_PID" mariadbd && alive "$DBD_PID" slurmdbd &&
    alive "$CTLD_PID" slurmctld || return 1
  for node in "${NODES[@]}"; do
    alive "$(slurmd_pid "$node")" slurmd || return 1
  done
}

healthy() { all_running && ctld_ready && nodes_usable && cluster_known; }

# Wait until both nodes are idle and the accounting database knows the
# cluster; resume nodes that registered drained, down or invalid.
wait_cluster() {
  local limit=60 start deadline last_print=0 last_resume=0 t states bad
  start=$(now_ms)
  deadline=$(( start + limit * 1000 ))
  while :; do
    t=$(now_ms)
    if nodes_idle && cluster_known; then
      return 0
    fi
    states=$(node_states | tr '\n' ' ' || true)
    bad=$(node_states | awk '$2 ~ /drain|down|inval|fail/ {print $1}' | paste -sd, - || true)
    if [ -n "$bad" ] && [ $(( t - last_resume )) -ge 3000 ]; then
      say "nodes: ${states}- resuming $bad"
      timeout 10 sinfo -R -h -o '  reason: %N %E' 2>/dev/null || true
      timeout 10 scontrol update nodename="$bad" state=resume 2>/dev/null || true
      last_resume=$t
    fi
    if ! cluster_known && [ $(( t - start )) -ge 10000 ]; then
      say "cluster $CLUSTER not yet in the accounting database; adding it"
      timeout 10 sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
    fi
    if [ $(( t - last_print )) -ge 5000 ]; then
      say "waiting for nodes ($(( (t - start) / 1000 ))s): ${states:-no answer from sinfo}"
      last_print=$t
    fi
    if [ "$t" -ge "$deadline" ]; then
      echo "slurm-cluster: error: nodes not idle after ${limit}s: ${states:-no answer from sinfo}" >&2
      timeout 10 sinfo -R >&2 || true
      cluster_known || echo "slurm-cluster: error: cluster $CLUSTER unknown to slurmdbd (log: $DBD_LOG)" >&2
      show_log "$CTLD_LOG"
      for t in "${NODES[@]}"; do show_log "$(slurmd_log "$t")"; done
      exit 1
    fi
    sleep 0.3
  done
}

# ---------------------------------------------------------------- commands

need_root() { [ "$(id -u)" -eq 0 ] || die "run as root"; }

need_packages() {
  local b
  for b in munged mariadbd slurmdbd slurmctld slurmd sinfo srun sacct sacctmgr; do
    command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] ||
      die "$b not found: run '$0 install' first"
  done
}

cmd_up() {
  local t0 node
  need_root
  need_packages
  t0=$(now_ms)
  write_configs
  make_gpus
  if [ "$CONFIG_CHANGED" = 0 ] && [ "$DBD_CONFIG_CHANGED" = 0 ] && healthy 2>/dev/null; then
    say "cluster $CLUSTER already up and healthy"
    timeout 10 sinfo || true
    return 0
  fi
  # A changed configuration needs a restart of the daemons that read it.
  QUIET_STOP=1
  if [ "$DBD_CONFIG_CHANGED" = 1 ]; then
    stop slurmdbd "$DBD_PID" slurmdbd "$DBD_LOG" 30
  fi
  if [ "$CONFIG_CHANGED" = 1 ]; then
    stop_slurm_daemons
  fi
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  for node in "${NODES[@]}"; do
    start_slurmd "$node"
  done
  wait_cluster
  timeout 10 sinfo
  say "cluster $CLUSTER up in $(( $(now_ms) - t0 )) ms"
}

cmd_down() {
  local deadline
  need_root
  if alive "$CTLD_PID" slurmctld; then
    say "cancelling jobs in partition $PARTITION"
    timeout 10 scancel -p "$PARTITION" 2>/dev/null || true
    deadline=$(( $(now_ms) + 20000 ))
    while [ -n "$(timeout 10 squeue -h -p "$PARTITION" -t PD,R,CG,S -o %i 2>/dev/null)" ]; do
      if [ "$(now_ms)" -ge "$deadline" ]; then
        echo "slurm-cluster: jobs still present 20s after scancel; stopping anyway" >&2
        break
      fi
      sleep 0.3
    done
  fi
  stop_slurm_daemons
  stop slurmdbd "$DBD_PID" slurmdbd "$DBD_LOG" 30
  stop mariadbd "$MARIADB_PID" mariadbd "$MARIADB_LOG" 60
  stop munged "$MUNGE_PID" munged "$MUNGE_LOG" 15
  say "cluster $CLUSTER down"
}

status_line() {
  local name=$1 pidfile=$2 comm=$3 log=$4
  if alive "$pidfile" "$comm"; then
    printf '%-11s running  pid %-7s pidfile %-26s log %s\n' "$name" "$(pid_in "$pidfile")" "$pidfile" "$log"
  else
    printf '%-11s stopped  %-11s pidfile %-26s log %s\n' "$name" "" "$pidfile" "$log"
  fi
}

cmd_status() {
  local node
  status_line munged "$MUNGE_PID" munged "$MUNGE_LOG"
  status_line mariadbd "$MARIADB_PID" mariadbd "$MARIADB_LOG"
  status_line slurmdbd "$DBD_PID" slurmdbd "$DBD_LOG"
  status_line slurmctld "$CTLD_PID" slurmctld "$CTLD_LOG"
  for node in "${NODES[@]}"; do
    status_line "slurmd-$node" "$(slurmd_pid "$node")" slurmd "$(slurmd_log "$node")"
  done
  if alive "$CTLD_PID" slurmctld; then
    timeout 10 sinfo
  fi
}

cmd_check() {
  local failed=0 out rc job i t0 ms times=() sorted acct deadline
  need_packages
  ctld_ready || die "slurmctld is not answering; run '$0 up'"

  # One node, two GPUs: the step is told which GPUs it has.
  if out=$(timeout 60 srun -N1 --gres=gpu:2 env | grep SLURM_STEP_GPUS) &&
     echo "$out" | grep -qE '^SLURM_STEP_GPUS=[0-9]+,[0-9]+$'; then
    say "check gpu: srun -N1 --gres=gpu:2: $out"
  else
    echo "slurm-cluster: check gpu FAILED: srun -N1 --gres=gpu:2 printed '${out:-}'" >&2
    failed=1
  fi

  # Two nodes, one task each: each reports its own node name.
  # shellcheck disable=SC2016 # expanded by the task's shell
  if out=$(timeout 60 srun -N2 -n2 --ntasks-per-node=1 sh -c 'echo "$SLURMD_NODENAME"' | sort | tr '\n' ' ') &&
     [ "$out" = "n1 n2 " ]; then
    say "check two nodes: srun -N2: SLURMD_NODENAME = ${out% }"
  else
    echo "slurm-cluster: check two nodes FAILED: srun -N2 printed '${out:-}'" >&2
    failed=1
  fi

  # Time from srun to the end of a step that does nothing, as a new job.
  for i in 1 2 3 4 5; do
    t0=$(now_ms)
    if ! timeout 60 srun -N1 true; then
      echo "slurm-cluster: check step time FAILED: srun -N1 true failed" >&2
      failed=1
      break
    fi
    times+=($(( $(now_ms) - t0 )))
  done
  if [ ${#times[@]} -eq 5 ]; then
    sorted=$(printf '%s\n' "${times[@]}" | sort -n | tr '\n' ' ')
    say "check step time: srun -N1 true, 5 runs: ${sorted% } ms (median $(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p) ms)"
  fi
  t0=$(now_ms)
  if timeout 60 srun -N2 true; then
    say "check step time: srun -N2 true: $(( $(now_ms) - t0 )) ms"
  else
    echo "slurm-cluster: check step time FAILED: srun -N2 true failed" >&2
    failed=1
  fi

  # Accounting: a step that exits 3 is recorded with exit code 3.
  rc=0
  # shellcheck disable=SC2016 # expanded by the task's shell
  job=$(timeout 60 srun -N1 sh -c 'echo "$SLURM_JOB_ID"; exit 3' 2>/dev/null) || rc=$?
  if [ "$rc" -ne 3 ] || ! [[ "$job" =~ ^[0-9]+$ ]]; then
    echo "slurm-cluster: check accounting FAILED: srun sh -c 'exit 3' exited $rc, printed '$job'" >&2
    failed=1
  else
    deadline=$(( $(now_ms) + 20000 ))
    while :; do
      acct=$(timeout 10 sacct -P -n -o JobID,State,ExitCode -j "$job" 2>/dev/null || true)
      if echo "$acct" | grep -qx "$job\.0|FAILED|3:0"; then
        say "check accounting: sacct -P -o JobID,State,ExitCode -j $job: $(echo "$acct" | tr '\n' ' ')"
        break
      fi
      if [ "$(now_ms)" -ge "$deadline" ]; then
        echo "slurm-cluster: check accounting FAILED: no step $job.0 with exit code 3 after 20s; sacct printed: '$acct' (log: $DBD_LOG)" >&2
        show_log "$DBD_LOG"
        failed=1
        break
      fi
      sleep 0.3
    done
  fi

  if [ "$failed" -ne 0 ]; then
    die "check failed"
  fi
  say "check passed"
}

usage() {
  echo "usage: $0 install|up|check|status|down" >&2
  exit 2
}

[ $# -eq 1 ] || usage
case $1 in
  install) need_root; cmd_install ;;
  up) cmd_up ;;
  check) cmd_check ;;
  status) cmd_status ;;
  down) cmd_down ;;
  *) usage ;;
esac
