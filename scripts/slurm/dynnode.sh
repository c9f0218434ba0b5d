#!/bin/bash
# dynnode.sh start NODE [FEATURE [CPUS]] | stop NODE [--delete]
# Run (or stop) one Slurm *dynamic* node on this machine: a `slurmd -Z` that
# registers itself with slurmctld, as a cloud worker would. Idempotent.
#
# Slurm 22.05 refuses Port= in `slurmd --conf`, so every -Z slurmd listens on
# SlurmdPort, which the static node's slurmd already holds. Each dynamic node
# therefore lives in its own network namespace: a veth pair with link-local
# addresses (node 169.254.I.2, host end 169.254.I.1) and a private /etc/hosts
# where "localhost" (SlurmctldHost) is the host end. `nsenter --net` plus
# `unshare -m` enter it; `ip netns exec` would remount /sys and slurmd would
# fail to find /sys/fs/cgroup.
set -eu
. "$(dirname "$0")/env.sh"
[ $# -ge 2 ] || { echo "usage: $0 start NODE [FEATURE [CPUS]] | stop NODE [--delete]" >&2; exit 2; }
cmd=$1 node=$2
ns=esl-$node
pidf=$RUN_DIR/slurmd-$node.pid
mkdir -p "$RUN_DIR"

running() {
    [ -s "$pidf" ] && [[ "$(readlink "/proc/$(cat "$pidf")/exe" 2>/dev/null)" == *slurmd* ]]
}

case $cmd in
start)
    feature=${3:-elastic} cpus=${4:-1}
    if running; then echo "dynamic node $node already runs (pid $(cat "$pidf"))"; exit 0; fi
    exec 9>"$RUN_DIR/dynnode.lock"; flock 9
    if [ -s "$RUN_DIR/dyn-$node.idx" ]; then
        i=$(cat "$RUN_DIR/dyn-$node.idx")           # half-started before: reuse
    else
        for i in $(seq 1 250); do
            grep -qx "$i" "$RUN_DIR"/dyn-*.idx 2>/dev/null || break
        done
        echo "$i" > "$RUN_DIR/dyn-$node.idx"
    fi
    flock -u 9
    if ! ip netns list | grep -qw "$ns"; then
        ip netns add "$ns"
        ip link add "esl${i}h" type veth peer name "esl${i}n"
        ip link set "esl${i}n" netns "$ns"
        ip addr add "169.254.$i.1/24" dev "esl${i}h"
        ip link set "esl${i}h" up
        ip -n "$ns" addr add "169.254.$i.2/24" dev "esl${i}n"
        ip -n "$ns" link set "esl${i}n" up
        ip -n "$ns" link set lo up
    fi
    mkdir -p "/etc/netns/$ns"
    printf '169.254.%s.1 localhost\n169.254.%s.2 %s\n' "$i" "$i" "$node" > "/etc/netns/$ns/hosts"
    # -b: report a fresh boot (slurmctld ignores the registration of a
    # powering-up CLOUD node otherwise); perl empties the signal mask, which
    # children of slurmctld inherit blocked (the slurmd would ignore SIGTERM).
    nsenter --net="/run/netns/$ns" unshare -m sh -c '
        mount --bind "/etc/netns/$0/hosts" /etc/hosts &&
        exec /usr/bin/perl -MPOSIX -e "sigprocmask(SIG_SETMASK, POSIX::SigSet->new) or die; exec @ARGV" \
            /usr/sbin/slurmd -Z -b -N "$1" --conf "CPUs=$3 Feature=$2"' \
        "$ns" "$node" "$feature" "$cpus" </dev/null >>"$LOG_DIR/dynnode.log" 2>&1
    echo "dynamic node $node started (pid $(cat "$pidf" 2>/dev/null), 169.254.$i.2)"
    ;;
stop)
    if running; then
        pid=$(cat "$pidf")
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$pidf"
    # only a node that is still there: slurmctld 22.05 can crash (SIGSEGV in
    # delete_nodes) on a delete of a dynamic node that is already gone
    if [ "${3:-}" = --delete ] && scontrol show node "$node" >/dev/null 2>&1; then
        scontrol delete nodename="$node" 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true     # also removes the veth pair
    rm -rf "/etc/netns/$ns" "$RUN_DIR/dyn-$node.idx"
    ;;
*) echo "usage: $0 start NODE [FEATURE [CPUS]] | stop NODE [--delete]" >&2; exit 2 ;;
esac
