#!/usr/bin/env bash
# .ci/slurm.sh - streamgen's real two-node Slurm cluster for the integration tests
# (Debian 12 slurm-wlm + munge + slurmdbd/MariaDB accounting + fake GPUs; no systemd needed).
#
# Each Slurm node is a network namespace of its own (with its own host name, UTS namespace):
#   bridge sgci0 in the root namespace     $NET.1/24  (only the client commands: sbatch, sinfo, sacct)
#   namespace sgci-ctl,   host name ctl    $NET.2     slurmctld + slurmdbd
#   namespace sgci-nodeA, host name nodeA  $NET.11    slurmd (and the jobs it starts)
#   namespace sgci-nodeB, host name nodeB  $NET.12    slurmd
# connected by veth pairs to the bridge. No namespace has a default route and nothing is NATed: the
# cluster can reach only its own addresses. Every daemon binds its address, never 0.0.0.0
# (CommunicationParameters=NoInAddrAny,NoCtldInAddrAny); munged and MariaDB (--skip-networking)
# listen on unix sockets only. /etc/netns/<ns>/hosts names the hosts inside the namespaces.
# Adapted from a local-Slurm recipe kept outside the repository; .ci/run calls
#   bash .ci/slurm.sh install && bash .ci/slurm.sh start   # before the tests
#   bash .ci/slurm.sh stop                                 # after them
#
#   bash .ci/slurm.sh install   # apt packages (idempotent; a no-op dpkg query when present)
#   bash .ci/slurm.sh start     # munged + mariadbd + slurmdbd + slurmctld + slurmd (idempotent)
#   bash .ci/slurm.sh status    # exit 0 only when the controller answers and the node is usable
#   bash .ci/slurm.sh stop      # cancel all jobs, stop only the daemons this script started
#   bash .ci/slurm.sh stop --purge   # ...and wipe Slurm state + accounting DB (fresh job ids)
#
# Must run as root. Environment knobs:
#   SLURM_CI_ACCOUNTING=1  slurmdbd+MariaDB so that `sacct` works (submitit polls sacct for job
#                          states; without it job.state is UNKNOWN and a cancelled job makes
#                          job.result() wait forever). 0 = off.
#   SLURM_CI_GPUS=2        fake GPUs (char devices 1:3 == /dev/null): --gpus-per-node<=2 schedules,
#                          CUDA_VISIBLE_DEVICES is set; jobs.cluster.executors refuses asks above this count.
#   SLURM_CI_CPUS=4        CPUs to advertise (more than nproc = oversubscribe, so a small test job
#                          and the nightly can share a 2-core CI box). Empty = the real count.
#   SLURM_CI_PARTITION=debug
#   SLURM_CI_NET=10.213.7  the private /24 of the namespaces (never routed anywhere)
set -euo pipefail

ACCT=${SLURM_CI_ACCOUNTING:-1}
NGPU=${SLURM_CI_GPUS:-2}
CPUS_WANTED=${SLURM_CI_CPUS-4}
PART=${SLURM_CI_PARTITION:-debug}
NET=${SLURM_CI_NET:-10.213.7}
NODES="nodeA nodeB"                # NodeName = host name inside its namespace
BRIDGE=sgci0
REC=/run/slurm-ci                  # pids of the daemons this script started
FAKEGPU=/var/lib/slurm-ci/fakegpu
CONF=/etc/slurm/slurm.conf

log() { echo "[.ci/slurm.sh] $*" >&2; }

# alive PIDFILE COMM -> prints pid if the pid in PIDFILE is a live process named COMM
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ] || return 1
  echo "$pid"
}

wait_for() { # wait_for SECONDS CMD... ; polls every 0.2 s
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.2
  done
}

record() { mkdir -p "$REC"; cp "$2" "$REC/$1.pid"; log "started $1 pid $(cat "$2")"; }

do_install() {
  local pkgs="munge slurmctld slurmd slurm-client" missing="" p
  if [ "$ACCT" = 1 ]; then pkgs="$pkgs slurmdbd mariadb-server"; fi
  for p in $pkgs; do
    dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    apt-get install -y --no-install-recommends $missing >/dev/null \
      || { apt-get update >/dev/null && apt-get install -y --no-install-recommends $missing >/dev/null; }
  fi
  log "packages present: $pkgs"
}

# --------------------------------------------------------------------------------------------
# The network: a bridge in the root namespace, one namespace per host, nothing routed anywhere
# --------------------------------------------------------------------------------------------

addr_of() { # addr_of HOST -> its address inside the private /24
  case "$1" in
    ctl) echo "$NET.2" ;;
    nodeA) echo "$NET.11" ;;
    nodeB) echo "$NET.12" ;;
    *) log "unknown host $1"; return 1 ;;
  esac
}

hosts_file() { # /etc/hosts seen inside the namespaces (ip netns exec bind-mounts /etc/netns/NS/hosts)
  echo "127.0.0.1 localhost"
  local h
  for h in ctl $NODES; do echo "$(addr_of "$h") $h"; done
}

ns_up() { # ns_up HOST : namespace sgci-HOST, veth v-HOST (bridge side) <-> eth0 (inside), its address
  local h=$1 ns="sgci-$1" addr
  addr=$(addr_of "$h")
  [ -e "/run/netns/$ns" ] || ip netns add "$ns"
  ip link show "v-$h" >/dev/null 2>&1 || ip link add "v-$h" type veth peer name eth0 netns "$ns"
  # IPv4 only: no link-local IPv6 addresses either (nothing but the /24 and loopback exists there)
  ip netns exec "$ns" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  sysctl -q -w "net.ipv6.conf.v-$h.disable_ipv6=1"
  ip link set "v-$h" master "$BRIDGE" up
  ip -n "$ns" link set lo up
  ip -n "$ns" -4 addr show dev eth0 | grep -q "inet $addr/24" || ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  mkdir -p "/etc/netns/$ns"
  hosts_file > "/etc/netns/$ns/hosts"
  : > "/etc/netns/$ns/resolv.conf"          # no name server: names come from the hosts file only
}

net_up() {
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  sysctl -q -w "net.ipv6.conf.$BRIDGE.disable_ipv6=1"
  ip -4 addr show dev "$BRIDGE" | grep -q "inet $NET.1/24" || ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local h
  for h in ctl $NODES; do ns_up "$h"; done
}

net_down() { # end what still runs in our namespaces (job leftovers), then remove them and the bridge
  local h ns pids
  for h in ctl $NODES; do
    ns="sgci-$h"
    [ -e "/run/netns/$ns" ] || continue
    pids=$(ip netns pids "$ns" | tr '\n' ' ')
    if [ -n "${pids// /}" ]; then
      log "ending processes left in $ns: $pids"
      # shellcheck disable=SC2086
      kill $pids 2>/dev/null || true
      wait_for 10 bash -c "[ -z \"\$(ip netns pids $ns)\" ]" \
        || { pids=$(ip netns pids "$ns" | tr '\n' ' '); [ -z "${pids// /}" ] || kill -9 $pids 2>/dev/null || true; }
    fi
    ip netns del "$ns"
    rm -rf "/etc/netns/$ns"
    ip link del "v-$h" 2>/dev/null || true    # normally gone with the namespace
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  rmdir /etc/netns 2>/dev/null || true         # only if nobody else keeps namespace files there
}

run_in() { # run_in HOST CMD... : CMD in HOST's network namespace, with HOST as its host name and
  # the namespace's hosts/resolv.conf (not `ip netns exec`: it remounts /sys without the cgroup
  # hierarchy slurmd needs)
  nsenter --net="/run/netns/sgci-$1" unshare --mount --propagation slave --uts sh -c '
    for f in hosts resolv.conf; do mount --bind "/etc/netns/sgci-$0/$f" "/etc/$f"; done
    hostname "$0" && exec "$@"' "$1" "${@:2}"
}

# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------

write_conf() { # prints 'changed' if slurm.conf/gres.conf content changed
  local hw cpus_hw cpus mem gres_conf="" grestypes="" override="" changed="" h nodelines=""
  hw=$(slurmd -C | head -1)                       # NodeName=vm CPUs=2 Boards=1 ... RealMemory=24105
  cpus_hw=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
  cpus=${CPUS_WANTED:-$cpus_hw}
  mem=$(( $(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw") * 9 / 10 ))
  local topo="CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1"
  if [ "$cpus" = "$cpus_hw" ]; then
    topo=$(sed 's/^NodeName=[^ ]* //; s/ RealMemory=.*//' <<<"$hw")   # real topology
  else
    override="SlurmdParameters=config_overrides"                      # advertise more CPUs than exist
  fi
  [ "$NGPU" -gt 0 ] && grestypes="GresTypes=gpu"
  for h in $NODES; do                            # every node: the machine's CPUs/memory, NGPU fake GPUs
    nodelines="${nodelines}NodeName=$h NodeAddr=$(addr_of "$h") $topo RealMemory=$mem"
    if [ "$NGPU" -gt 0 ]; then
      nodelines="$nodelines Gres=gpu:$NGPU"
      gres_conf="${gres_conf}NodeName=$h Name=gpu File=$FAKEGPU/$h/gpu[0-$((NGPU - 1))]"$'\n'
      mkdir -p "$FAKEGPU/$h"
      for i in $(seq 0 $((NGPU - 1))); do
        [ -c "$FAKEGPU/$h/gpu$i" ] || { rm -f "$FAKEGPU/$h/gpu$i"; mknod -m 666 "$FAKEGPU/$h/gpu$i" c 1 3; }
      done
    fi
    nodelines="$nodelines State=UNKNOWN"$'\n'
  done
  local acct="AccountingStorageType=accounting_storage/none"
  if [ "$ACCT" = 1 ]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$(addr_of ctl)
AccountingStorageTRES=gres/gpu"
  fi
  mkdir -p /etc/slurm
  cat > "$CONF.new" <<EOC
# generated by streamgen .ci/slurm.sh
ClusterName=ci
SlurmctldHost=ctl($(addr_of ctl))
# bind every daemon to its own address (slurmd: NodeAddr, slurmctld: SlurmctldHost), never 0.0.0.0
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
# requeued jobs wait cred_expire s (default 120) before they may start again
AuthInfo=cred_expire=10
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
KillWait=5
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SchedulerType=sched/backfill
# defaults (batch_sched_delay=3, sched_interval=60, bf_interval=30) add seconds of queue wait
SchedulerParameters=batch_sched_delay=0,sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
$acct
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
$grestypes
$override
${nodelines}PartitionName=$PART Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOC
  printf 'AutoDetect=off\n%s' "$gres_conf" > /etc/slurm/gres.conf.new
  for f in "$CONF" /etc/slurm/gres.conf; do
    if ! cmp -s "$f.new" "$f"; then mv "$f.new" "$f"; changed=1; else rm -f "$f.new"; fi
  done
  if [ "$ACCT" = 1 ]; then
    cat > /etc/slurm/slurmdbd.conf.new <<EOC
AuthType=auth/munge
DbdHost=ctl
DbdAddr=$(addr_of ctl)
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmci
StorageLoc=slurm_acct_db
EOC
    chown slurm:slurm /etc/slurm/slurmdbd.conf.new; chmod 600 /etc/slurm/slurmdbd.conf.new
    if ! cmp -s /etc/slurm/slurmdbd.conf.new /etc/slurm/slurmdbd.conf; then changed=1; fi
    mv /etc/slurm/slurmdbd.conf.new /etc/slurm/slurmdbd.conf
  fi
  if [ -n "$changed" ]; then echo changed; fi
}

# --------------------------------------------------------------------------------------------
# Daemons
# --------------------------------------------------------------------------------------------

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key --force
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  if ! alive /run/munge/munged.pid munged >/dev/null; then
    runuser -u munge -- /usr/sbin/munged
    wait_for 10 alive /run/munge/munged.pid munged; record munged /run/munge/munged.pid
  fi
  munge -n | unmunge >/dev/null
}

start_accounting() { # MariaDB (unix socket only, no TCP) + slurmdbd in the ctl namespace
  mkdir -p /run/mysqld /var/log/mysql; chown mysql:mysql /run/mysqld /var/log/mysql
  if ! alive /run/mysqld/mysqld.pid mariadbd >/dev/null; then
    setsid /usr/sbin/mariadbd --user=mysql --skip-networking --pid-file=/run/mysqld/mysqld.pid \
      --log-error=/var/log/mysql/error.log </dev/null >/dev/null 2>&1 &
    wait_for 60 mariadb-admin ping || { log "mariadbd did not start"; tail /var/log/mysql/error.log; exit 1; }
    wait_for 10 alive /run/mysqld/mysqld.pid mariadbd; record mariadbd /run/mysqld/mysqld.pid
  fi
  mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost';
              ALTER USER 'slurm'@'localhost' IDENTIFIED BY 'slurmci';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  if ! alive /run/slurmdbd.pid slurmdbd >/dev/null; then
    # Fresh slurmctld state => job ids restart at 1: drop old accounting records, otherwise
    # sacct reports the *old* job N and submitit treats the new job N as finished.
    if [ ! -e /var/spool/slurmctld/job_state ]; then
      mariadb -e 'DROP DATABASE IF EXISTS slurm_acct_db'
    fi
    run_in ctl slurmdbd
    wait_for 10 alive /run/slurmdbd.pid slurmdbd; record slurmdbd /run/slurmdbd.pid
    wait_for 60 sacctmgr -n -P show cluster || { log "slurmdbd not answering"; tail /var/log/slurm/slurmdbd.log; exit 1; }
  fi
}

node_usable() { # node_usable NODE : idle, mixed or allocated
  sinfo -h -n "$1" -o %t 2>/dev/null | grep -Eq '^(idle|mix|alloc)'
}

do_start() {
  [ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
  do_install                                   # no-op (dpkg-query only) when installed
  mkdir -p /var/spool/slurmctld /var/log/slurm /run/munge "$REC"
  chown slurm:slurm /var/spool/slurmctld /var/log/slurm
  chown munge:munge /run/munge; chmod 755 /run/munge
  net_up
  start_munge
  local changed h p; changed=$(write_conf)
  # config changed while running: restart the Slurm daemons (scontrol reconfigure can't change
  # e.g. a GRES count)
  if [ -n "$changed" ]; then
    for d in slurmd-nodeA:slurmd slurmd-nodeB:slurmd slurmctld:slurmctld slurmdbd:slurmdbd; do
      stop_rec "${d%%:*}" "${d#*:}"
    done
  fi
  if [ "$ACCT" = 1 ]; then start_accounting; fi
  if ! alive /run/slurmctld.pid slurmctld >/dev/null; then
    run_in ctl slurmctld
    wait_for 10 alive /run/slurmctld.pid slurmctld; record slurmctld /run/slurmctld.pid
    wait_for 60 scontrol ping || { log "slurmctld not up"; tail /var/log/slurm/slurmctld.log; exit 1; }
  fi
  if [ "$ACCT" = 1 ] && ! sacctmgr -n -P show cluster format=cluster | grep -qx ci; then
    sacctmgr -i add cluster ci >/dev/null     # normally auto-registered by slurmctld
  fi
  for h in $NODES; do
    if ! alive "/run/slurmd-$h.pid" slurmd >/dev/null; then
      mkdir -p "/var/spool/slurmd/$h"
      run_in "$h" slurmd -N "$h"
      wait_for 10 alive "/run/slurmd-$h.pid" slurmd; record "slurmd-$h" "/run/slurmd-$h.pid"
    fi
  done
  for h in $NODES; do
    if ! wait_for 60 node_usable "$h"; then
      scontrol update nodename="$h" state=resume || true   # e.g. drained from an older run
      wait_for 30 node_usable "$h" || { sinfo -R; log "node $h not usable"; exit 1; }
    fi
  done
  sinfo -N
}

stop_rec() { # stop_rec NAME COMM : kill the pid recorded at start, if it still is that daemon
  local p
  if p=$(alive "$REC/$1.pid" "$2"); then
    kill "$p"
    wait_for 30 bash -c "! [ -d /proc/$p ]" || kill -9 "$p" 2>/dev/null || true
    log "stopped $1 pid $p"
  fi
  rm -f "$REC/$1.pid"
}

do_stop() {
  local purge=${1:-} jobs h
  if alive "$REC/slurmctld.pid" slurmctld >/dev/null; then   # our cluster: cancel its jobs
    jobs=$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
      # shellcheck disable=SC2086
      scancel $jobs || true
      wait_for 60 bash -c '[ -z "$(squeue -h -o %A)" ]' || log "jobs still listed: $(squeue -h -o %A | tr '\n' ' ')"
    fi
  fi
  for h in $NODES; do stop_rec "slurmd-$h" slurmd; done
  stop_rec slurmctld slurmctld
  stop_rec slurmdbd slurmdbd
  if [ "$purge" = --purge ] && alive /run/mysqld/mysqld.pid mariadbd >/dev/null; then
    mariadb -e 'DROP DATABASE IF EXISTS slurm_acct_db' || true
  fi
  stop_rec mariadbd mariadbd
  stop_rec munged munged
  net_down
  if [ "$purge" = --purge ]; then
    rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
    log "purged Slurm state (job ids restart at 1)"
  fi
}

do_status() {
  local ok=0 h d p
  for d in munged:/run/munge/munged.pid mariadbd:/run/mysqld/mysqld.pid slurmdbd:/run/slurmdbd.pid \
           slurmctld:/run/slurmctld.pid slurmd:/run/slurmd-nodeA.pid slurmd:/run/slurmd-nodeB.pid; do
    if p=$(alive "${d#*:}" "${d%%:*}"); then echo "${d#*:}: ${d%%:*} running pid $p"; else echo "${d#*:}: ${d%%:*} not running"; fi
  done
  sinfo -N 2>/dev/null && squeue 2>/dev/null || true
  scontrol ping >/dev/null 2>&1 || ok=1
  for h in $NODES; do node_usable "$h" || ok=1; done
  return $ok
}

case "${1:-}" in
  install) do_install ;;
  start)   do_start ;;
  stop)    shift; do_stop "${1:-}" ;;
  status)  do_status ;;
  *) echo "usage: $0 install|start|status|stop [--purge]" >&2; exit 2 ;;
esac
