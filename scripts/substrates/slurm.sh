#!/usr/bin/env bash
# scripts/substrates/slurm.sh -- a Slurm cluster of real hosts on one machine, each host its
# own network namespace, for pilotfish's tests (real Slurm, real PRRTE, real MPICH/Open MPI).
#
# Usage (as root):
#   scripts/substrates/slurm.sh start [NODES] [CPUS_PER_NODE] [GPUS_PER_NODE]
#                                          # default 4 x 16 x 0; no-op when up (GPUs: counted
#                                          # generic resources, no devices -- for placement)
#   scripts/substrates/slurm.sh stop                           # kill our daemons, drop the netns
#   scripts/substrates/slurm.sh status                         # exit 0 when up (prints sinfo)
#   scripts/substrates/slurm.sh env                            # `export K=V` lines for clients
#   scripts/substrates/slurm.sh exec CMD [ARGS...]             # CMD on the login host, env set
#   scripts/substrates/slurm.sh nodes                          # "NAME NETNS ADDRESS" per host
#   scripts/substrates/slurm.sh on NODE CMD [ARGS...]          # CMD on compute host NODE
#
# The test command (what scripts/test.sh / .ci/run should run, as root, no stdin):
#   scripts/substrates/install.sh                  # Debian pkgs (+ MPI wheels into $PILOTFISH_VENV)
#   scripts/substrates/slurm.sh start              # ~1-3 s once installed
#   scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/substrates
#       # = ip netns exec pilotfish env SLURM_CONF=... PILOTFISH_NETNS=pilotfish ... pytest ...
#   scripts/substrates/slurm.sh stop               # optional (start is idempotent)
# Tests marked `slurm`/`prrte`/`mpi` must run inside the netns: tests/substrates/conftest.py
# fails them with a clear message otherwise.
#
# What `start` builds (state under $PILOTFISH_SUBSTRATE_DIR/slurm, default <repo>/.substrates/slurm):
#   * the login host: network namespace `pilotfish` ($PILOTFISH_NETNS), lo up, the bridge
#     `pfbr0` ($PILOTFISH_CLUSTER_BRIDGE) with 10.77.0.1/24 ($PILOTFISH_CLUSTER_NET: the first
#     three octets) -- other values of all three run a second cluster beside the first; this
#     machine's host name. slurmctld, munged and every client (`exec`) live here.
#   * compute host nK (k = 1..NODES): network namespace `pilotfish-nK`, a veth pair into the
#     bridge (eth0 = 10.77.0.(10+K)/24 inside), its own UTS namespace with host name nK, and
#     one `slurmd -N nK` inside both -- so a job step really runs on the host it names: its
#     `hostname` is nK, its sockets bind nK's address, and it reaches the others over the
#     bridge only. Processes still share the machine's file system and pid space (as nodes
#     share a parallel file system; unix sockets by path cross hosts, abstract ones do not).
#   * /etc/netns/<netns>/hosts for every namespace (ip netns exec mounts it over /etc/hosts):
#     every host resolves every other by name (login = this machine's name, nK).
#     Nothing inside can reach the machine's network: the bridge has no uplink.
#   * a private munged (generated key, socket in the state dir), AuthInfo=socket=... in slurm.conf
#   * slurm.conf: nodes n1..nN (NodeHostname=nK, NodeAddr=10.77.0.(10+K), CPUs faked through
#     SlurmdParameters=config_overrides), partition `debug` (default, MaxTime=UNLIMITED),
#     cons_tres/CR_Core, proctrack/linuxproc, task/none, no accounting, MpiDefault=none
#     (`srun --mpi=pmi2` works with MPICH; for Open MPI use prterun inside the allocation).
#   * cgroup.conf: CgroupPlugin=cgroup/v1, CgroupMountpoint=/sys/fs/cgroup (autodetect fails here)
#   * slurmctld -i (wiped state) and the slurmds; `start` waits (bounded) until sinfo shows
#     every node idle.
# PILOTFISH_CLUSTER=single builds the older one-host variant instead: every slurmd in the
# login namespace, NodeAddr=127.0.0.1 and one port each (all nodes are this host).
#
# MPI from the same venv (details in install.sh): Open MPI via <venv>/bin/prte|prterun with
# MPI4PY_LIBMPI=<venv>/lib/libmpi.so.40 OPAL_PREFIX=PRTE_PREFIX=PMIX_PREFIX=<venv> and the
# *_ALLOW_RUN_AS_ROOT* variables (`-x MPI4PY_LIBMPI` for `prterun --dvm`); MPICH via
# <venv>/bin/mpiexec.hydra or `srun --mpi=pmi2` with MPI4PY_LIBMPI=<venv>/lib/libmpi.so.12.
# Never the plain mpiexec/mpirun names (both wheels install them).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
NS="${PILOTFISH_NETNS:-pilotfish}"
BASE="${PILOTFISH_SUBSTRATE_DIR:-$REPO/.substrates}"
STATE="$BASE/slurm"
CONF="$STATE/etc/slurm.conf"
BRIDGE="${PILOTFISH_CLUSTER_BRIDGE:-pfbr0}"  # (a second cluster beside: another name)
NET="${PILOTFISH_CLUSTER_NET:-10.77.0}"
MODE="${PILOTFISH_CLUSTER:-hosts}"   # hosts (a namespace per compute host) | single
CTLD_PORT=6817
SLURMD_PORT0=6818          # single: node k listens on SLURMD_PORT0 + k - 1; hosts: all on it
WAIT_S="${PILOTFISH_SLURM_WAIT_S:-60}"

log() { echo "[substrates/slurm] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
in_ns() { ip netns exec "$NS" "$@"; }

# -- processes: only ever signal a pid whose comm and cmdline say it is ours -------------
# pid_max is 32768 and pids wrap: a pid file alone proves nothing.
ours() {  # ours PID COMM -> 0 when PID is a live COMM process started with our state dir
    local pid=$1 comm=$2 c
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    c=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [ "$c" = "$comm" ] || return 1
    if [ "$comm" = slurmstepd ]; then   # cmdline is "slurmstepd: [J.S]": must be in our netns
        local ino ns
        ino=$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null) || return 1
        for ns in $(our_netns); do
            [ -e "/run/netns/$ns" ] && [ "$ino" = "$(stat -L -c %i "/run/netns/$ns")" ] && return 0
        done
        return 1
    fi
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE/" || return 1
}
our_netns() {  # the login namespace, then every compute host's (those that exist)
    echo "$NS"
    local f
    for f in /run/netns/"$NS"-n*; do [ -e "$f" ] && basename "$f"; done
    return 0
}
node_ns() { echo "$NS-$1"; }          # node_ns nK -> its namespace
node_addr() { echo "$NET.$((10 + ${1#n}))"; }
pid_of() { { head -n1 "$1" 2>/dev/null || true; } | tr -dc 0-9; }

daemon_list() {  # lines "COMM PIDFILE"
    echo "munged $STATE/run/munged.pid"
    echo "slurmctld $STATE/run/slurmctld.pid"
    local k n
    n=$(cat "$STATE/nodes" 2>/dev/null || echo 0)
    for ((k = 1; k <= n; k++)); do echo "slurmd $STATE/run/slurmd.n$k.pid"; done
}

all_running() {
    [ -f "$STATE/nodes" ] && [ -e "/run/netns/$NS" ] || return 1
    local comm pf
    while read -r comm pf; do
        ours "$(pid_of "$pf")" "$comm" || return 1
    done < <(daemon_list)
}

kill_daemons() {
    local comm pf pid pids=() i
    while read -r comm pf; do
        pid=$(pid_of "$pf")
        if ours "$pid" "$comm"; then kill -TERM "$pid" 2>/dev/null && pids+=("$pid:$comm"); fi
        rm -f "$pf"
    done < <(daemon_list)
    # also stray daemons of ours whose pid file is gone (e.g. a start that failed half way)
    for pid in $(pgrep -x 'slurmctld|slurmd|munged' 2>/dev/null || true); do
        comm=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
        if ours "$pid" "$comm"; then kill -TERM "$pid" 2>/dev/null && pids+=("$pid:$comm"); fi
    done
    # job steps of our slurmds (their cmdline is "slurmstepd: [J.S]"): those in our netns
    local ns
    for ns in $(our_netns); do
        for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
            ours "$pid" slurmstepd || continue
            kill -TERM "$pid" 2>/dev/null && pids+=("$pid:slurmstepd")
        done
    done
    for ((i = 0; i < 50; i++)); do   # <= 5 s grace, then SIGKILL
        local left=()
        for p in "${pids[@]}"; do ours "${p%%:*}" "${p#*:}" && left+=("$p"); done
        pids=("${left[@]}")
        [ ${#pids[@]} = 0 ] && return 0
        sleep 0.1
    done
    for p in "${pids[@]}"; do
        ours "${p%%:*}" "${p#*:}" && kill -KILL "${p%%:*}" 2>/dev/null || true
    done
}

# -- network namespaces ----------------------------------------------------------------------
hosts_file() {  # what every namespace's /etc/hosts says
    local nodes=$1 host k
    host=$(hostname -s)
    echo "127.0.0.1 localhost"
    if [ "$MODE" = hosts ]; then
        echo "$NET.1 $host login"
        for ((k = 1; k <= nodes; k++)); do echo "$(node_addr "n$k") n$k"; done
    else
        echo "127.0.0.1 $host"
    fi
}

ns_up() {
    local nodes=$1 k ns veth
    [ -e "/run/netns/$NS" ] || ip netns add "$NS"
    in_ns ip link set lo up
    in_ns ip addr replace 127.0.0.2/8 dev lo  # (else getaddrinfo(AI_ADDRCONFIG) finds no address)
    in_ns ip link show "$BRIDGE" >/dev/null 2>&1 || in_ns ip link add "$BRIDGE" type bridge
    in_ns ip addr flush dev "$BRIDGE"
    if [ "$MODE" = hosts ]; then
        in_ns ip addr add "$NET.1/24" dev "$BRIDGE"
    else
        in_ns ip addr add 127.1.0.1/32 dev "$BRIDGE"  # (PRRTE's prted refuses loopback-only hosts)
    fi
    in_ns ip link set "$BRIDGE" up
    mkdir -p "/etc/netns/$NS"
    hosts_file "$nodes" > "/etc/netns/$NS/hosts"
    [ "$MODE" = hosts ] || return 0
    for ((k = 1; k <= nodes; k++)); do
        ns=$(node_ns "n$k") veth="pfv$k"
        if [ ! -e "/run/netns/$ns" ]; then
            ip netns add "$ns"
        fi
        if ! in_ns ip link show "$veth" >/dev/null 2>&1; then
            ip netns exec "$ns" ip link del eth0 2>/dev/null || true
            in_ns ip link add "$veth" type veth peer name "pfh$k"
            in_ns ip link set "pfh$k" netns "$ns"
            ip netns exec "$ns" ip link set "pfh$k" name eth0
        fi
        in_ns ip link set "$veth" master "$BRIDGE" up
        ip netns exec "$ns" ip link set lo up
        ip netns exec "$ns" ip addr replace "$(node_addr "n$k")/24" dev eth0
        ip netns exec "$ns" ip link set eth0 up
        mkdir -p "/etc/netns/$ns"
        hosts_file "$nodes" > "/etc/netns/$ns/hosts"
    done
}

ns_down() {
    local ns pids
    for ns in $(our_netns | tac); do  # compute hosts first, the login host last
        [ -e "/run/netns/$ns" ] || continue
        # refuse to drop a namespace other processes still live in (e.g. a test run)
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        if [ -n "${pids// /}" ]; then
            log "netns $ns still has processes ($pids); leaving it in place"
            continue
        fi
        ip netns del "$ns"
        rm -rf "/etc/netns/${ns:?}"
    done
}

# -- configuration ---------------------------------------------------------------------------
write_conf() {
    local nodes=$1 cpus=$2 gpus=${3:-0} host k
    host=$(hostname -s)
    mkdir -p "$STATE"/{etc,run,log,ctld,munge}
    for ((k = 1; k <= nodes; k++)); do
        mkdir -p "$STATE/spool/n$k" "$STATE/tmp/n$k"
        chmod 1777 "$STATE/tmp/n$k"
    done
    {
        echo "# generated by scripts/substrates/slurm.sh -- do not edit"
        echo "ClusterName=pilotfish"
        if [ "$MODE" = hosts ]; then
            echo "SlurmctldHost=$host($NET.1)"
        else
            echo "SlurmctldHost=$host(127.0.0.1)"
        fi
        echo "SlurmctldPort=$CTLD_PORT"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "AuthInfo=socket=$MUNGE_SOCKET"
        echo "CredType=cred/munge"
        echo "StateSaveLocation=$STATE/ctld"
        echo "SlurmdSpoolDir=$STATE/spool/%n"
        # each host's own TmpFS: the hosts share one /tmp, and srun --mpi=pmix makes
        # <TmpFS>/spmix_appdir_<job>.<step> on every node of a step ("File exists" on the
        # second one: the step fails)
        echo "TmpFS=$STATE/tmp/%n"
        echo "SlurmctldPidFile=$STATE/run/slurmctld.pid"
        echo "SlurmdPidFile=$STATE/run/slurmd.%n.pid"
        echo "SlurmctldLogFile=$STATE/log/slurmctld.log"
        echo "SlurmdLogFile=$STATE/log/slurmd.%n.log"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        echo "SlurmdParameters=config_overrides"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "SchedulerType=sched/backfill"
        # a job that cannot start at submission (the last one's nodes still completing) is
        # tried again by the next scheduling pass: every 1-2 s, not Slurm's 30 s (backfill)
        # and 60 s (main loop) -- the tests start their pilots one after another. (Not cured
        # by this: pilots pending "Resources" on idle nodes until the next node ping, every
        # SlurmdTimeout/3 = 20 s, "Requested nodes are busy" in the backfill log.)
        echo "SchedulerParameters=bf_interval=1,sched_interval=2"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "MpiDefault=none"
        echo "ReturnToService=2"
        echo "AccountingStorageType=accounting_storage/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "JobCompType=jobcomp/none"
        echo "SlurmctldTimeout=30"
        echo "SlurmdTimeout=60"
        echo "InactiveLimit=0"
        echo "MinJobAge=300"
        echo "KillWait=5"
        echo "Waittime=0"
        echo "MaxJobCount=100000"
        echo "EnforcePartLimits=ALL"      # a job that can never fit is rejected at submission
        echo "MailProg=/bin/true"
        [ "$gpus" = 0 ] || echo "GresTypes=gpu"
        local hw="CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=1024 State=UNKNOWN"
        [ "$gpus" = 0 ] || hw="$hw Gres=gpu:$gpus"
        for ((k = 1; k <= nodes; k++)); do
            if [ "$MODE" = hosts ]; then
                echo "NodeName=n$k NodeHostname=n$k NodeAddr=$(node_addr "n$k") Port=$SLURMD_PORT0 $hw"
            else
                echo "NodeName=n$k NodeHostname=$host NodeAddr=127.0.0.1 Port=$((SLURMD_PORT0 + k - 1)) $hw"
            fi
        done
        echo "PartitionName=debug Nodes=n[1-$nodes] Default=YES MaxTime=UNLIMITED State=UP OverSubscribe=NO"
    } > "$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
    printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n' > "$STATE/etc/cgroup.conf"
    if [ "$gpus" = 0 ]; then
        rm -f "$STATE/etc/gres.conf"
    else
        # slurmd counts a GPU per device file: empty files stand for them (nothing opens them)
        mkdir -p "$STATE/dev"
        for ((k = 0; k < gpus; k++)); do : > "$STATE/dev/gpu$k"; done
        echo "NodeName=n[1-$nodes] Name=gpu File=$STATE/dev/gpu[0-$((gpus - 1))]" > "$STATE/etc/gres.conf"
    fi
    echo "$nodes" > "$STATE/nodes"
    echo "$nodes $cpus $MODE $gpus" > "$STATE/shape"
}

munge_socket_path() {
    local p="$STATE/munge-socket/munge.socket.2"
    if [ ${#p} -gt 100 ]; then   # sun_path is 108 bytes
        p="/run/pilotfish-munge-$(echo -n "$STATE" | md5sum | cut -c1-8)/munge.socket.2"
    fi
    echo "$p"
}

start_munge() {
    local d="$STATE/munge" sockdir
    sockdir=$(dirname "$MUNGE_SOCKET")
    mkdir -p "$d" "$sockdir"
    chmod 700 "$d"
    chmod 755 "$sockdir"
    if [ ! -s "$d/munge.key" ]; then
        umask 077
        dd if=/dev/urandom of="$d/munge.key" bs=1024 count=1 status=none
    fi
    chmod 400 "$d/munge.key"
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    in_ns munged --force --socket="$MUNGE_SOCKET" --key-file="$d/munge.key" \
        --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" \
        --seed-file="$d/munged.seed" --num-threads=4 </dev/null
    local i
    for ((i = 0; i < 100; i++)); do [ -S "$MUNGE_SOCKET" ] && return 0; sleep 0.05; done
    die "munged did not create $MUNGE_SOCKET (see $STATE/log/munged.log)"
}

slurm_env() {  # the environment a client needs
    echo "SLURM_CONF=$CONF"
    echo "PILOTFISH_NETNS=$NS"
    echo "PILOTFISH_SLURM_STATE=$STATE"
    echo "PILOTFISH_SLURM_NODES=$(cut -d' ' -f1 "$STATE/shape" 2>/dev/null || echo 0)"
    echo "PILOTFISH_SLURM_CPUS=$(cut -d' ' -f2 "$STATE/shape" 2>/dev/null || echo 0)"
    echo "PILOTFISH_CLUSTER=$(cut -d' ' -f3 "$STATE/shape" 2>/dev/null || echo single)"
}

wait_idle() {
    local nodes=$1 deadline=$((SECONDS + WAIT_S)) out idle
    while ((SECONDS < deadline)); do
        out=$(in_ns env SLURM_CONF="$CONF" timeout 10 sinfo -h -N -p debug -o '%N %t' 2>/dev/null || true)
        idle=$(awk '$2 == "idle" {n++} END {print n+0}' <<<"$out")
        [ "$idle" -ge "$nodes" ] && return 0
        # a dead daemon will not come back: stop waiting
        local comm pf
        while read -r comm pf; do
            if [ "$comm" != munged ] && [ -f "$pf" ] && ! ours "$(pid_of "$pf")" "$comm"; then
                log "$comm ($pf) died"; return 1
            fi
        done < <(daemon_list)
        sleep 0.2
    done
    log "nodes not idle after ${WAIT_S}s: $(tr '\n' ';' <<<"$out")"
    return 1
}

cmd_start() {
    local nodes=${1:-4} cpus=${2:-16} gpus=${3:-0}
    [[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "NODES must be a positive integer, not '$nodes'"
    [[ "$cpus" =~ ^[1-9][0-9]*$ ]] || die "CPUS_PER_NODE must be a positive integer, not '$cpus'"
    [[ "$gpus" =~ ^[0-9]+$ ]] || die "GPUS_PER_NODE must be a whole number, not '$gpus'"
    [ "$MODE" = hosts ] || [ "$MODE" = single ] \
        || die "PILOTFISH_CLUSTER must be 'hosts' or 'single', not '$MODE'"
    [ "$MODE" = single ] || ((nodes <= 200)) || die "at most 200 compute hosts, not $nodes"
    [ "$(id -u)" = 0 ] || die "needs root (network namespace, daemons)"
    for b in slurmctld slurmd munged sinfo ip; do
        command -v "$b" >/dev/null || die "$b not found: run scripts/substrates/install.sh"
    done
    if all_running && [ "$(cat "$STATE/shape" 2>/dev/null)" = "$nodes $cpus $MODE $gpus" ] \
        && in_ns env SLURM_CONF="$CONF" timeout 10 sinfo -h >/dev/null 2>&1; then
        log "already running ($nodes nodes x $cpus CPUs, $MODE)"
        slurm_env
        return 0
    fi
    local t0=$SECONDS
    kill_daemons
    drop_extra_hosts "$nodes"
    ns_up "$nodes"
    MUNGE_SOCKET=$(munge_socket_path)
    write_conf "$nodes" "$cpus" "$gpus"
    rm -rf "$STATE/ctld"/* "$STATE/log"/*
    start_munge
    export SLURM_CONF="$CONF"
    in_ns slurmctld -i -f "$CONF" </dev/null || die "slurmctld failed (see $STATE/log/slurmctld.log)"
    local k
    for ((k = 1; k <= nodes; k++)); do
        rm -rf "${STATE:?}/spool/n$k"/*
        if [ "$MODE" = hosts ]; then   # in its host's network and UTS namespaces
            ip netns exec "$(node_ns "n$k")" unshare --uts sh -c \
                'hostname "$1" && exec slurmd -N "$1" -f "$2" </dev/null' slurmd "n$k" "$CONF" \
                || die "slurmd -N n$k failed (see $STATE/log/slurmd.n$k.log)"
        else
            in_ns slurmd -N "n$k" -f "$CONF" </dev/null \
                || die "slurmd -N n$k failed (see $STATE/log/slurmd.n$k.log)"
        fi
    done
    if ! wait_idle "$nodes"; then
        tail -n 5 "$STATE/log/slurmctld.log" "$STATE"/log/slurmd.*.log >&2 || true
        die "Slurm did not come up"
    fi
    log "up: $nodes nodes x $cpus CPUs ($MODE) in netns $NS ($((SECONDS - t0)) s); clients need:"
    slurm_env
    log "run clients as: ip netns exec $NS env SLURM_CONF=$CONF CMD (or: $0 exec CMD)"
}

drop_extra_hosts() {  # compute hosts beyond NODES (an earlier, bigger cluster), or all in single
    local keep=$1 f k
    [ "$MODE" = hosts ] || keep=0
    for f in /run/netns/"$NS"-n*; do
        [ -e "$f" ] || continue
        k=${f##*-n}
        [[ "$k" =~ ^[0-9]+$ ]] && ((k > keep)) || continue
        [ -z "$(ip netns pids "$NS-n$k" 2>/dev/null)" ] || continue
        ip netns exec "$NS" ip link del "pfv$k" 2>/dev/null || true
        ip netns del "$NS-n$k"
        rm -rf "/etc/netns/$NS-n$k"
    done
}

cmd_nodes() {
    all_running || die "Slurm is not running (run: $0 start)"
    local n k mode
    read -r n _ mode _ < "$STATE/shape"  # (nodes cpus mode gpus)
    for ((k = 1; k <= n; k++)); do
        if [ "$mode" = hosts ]; then
            echo "n$k $(node_ns "n$k") $(node_addr "n$k")"
        else
            echo "n$k $NS 127.0.0.1"
        fi
    done
}

cmd_on() {  # on NODE CMD...: run CMD on that compute host (its namespaces: net, uts, mount)
    [ $# -gt 1 ] || die "on needs a node and a command"
    all_running || die "Slurm is not running (run: $0 start)"
    local node=$1 pid
    shift
    pid=$(pid_of "$STATE/run/slurmd.$node.pid")
    ours "$pid" slurmd || die "no slurmd of ours runs for node '$node'"
    local envs=()
    mapfile -t envs <<<"$(slurm_env)"
    exec nsenter -t "$pid" -n -u -m env "${envs[@]}" "$@"
}

cmd_stop() {
    [ "$(id -u)" = 0 ] || die "needs root"
    kill_daemons
    ns_down
    log "stopped"
}

cmd_status() {
    if all_running; then
        in_ns env SLURM_CONF="$CONF" timeout 10 sinfo -N -o '%N %P %t %c' || true
        echo "running: netns $NS, SLURM_CONF=$CONF"
        return 0
    fi
    echo "not running"
    return 1
}

cmd_env() {
    all_running || { log "not running (start it: $0 start)"; return 1; }
    slurm_env | sed 's/^/export /'
    echo "# run clients inside the namespace: ip netns exec $NS CMD"
}

cmd_exec() {
    [ $# -gt 0 ] || die "exec needs a command"
    all_running || die "Slurm is not running (run: $0 start)"
    local envs=()
    mapfile -t envs <<<"$(slurm_env)"  # (no process substitution: it would leave a child behind the exec)
    exec ip netns exec "$NS" env "${envs[@]}" "$@"
}

case "${1:-}" in
    start) shift; cmd_start "$@" ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    exec) shift; cmd_exec "$@" ;;
    nodes) cmd_nodes ;;
    on) shift; cmd_on "$@" ;;
    *) awk 'NR > 1 && /^#/ {print; next} NR > 1 {exit}' "$0" >&2; exit 2 ;;
esac
