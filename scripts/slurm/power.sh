#!/bin/bash
# power.sh {resume|suspend|fail} NODELIST - Slurm's power-saving hook.
# slurm.conf names $RUN_DIR/power-resume, power-suspend and power-fail
# (links to this file made by start.sh) as ResumeProgram, SuspendProgram and
# ResumeFailProgram; slurmctld runs them with one argument, a host list such
# as "cloud[1-2]", so the action comes from the link's name.
#
# If $RUN_DIR/power.env exists, elasticsite does the work (native mode): its
# variables are exported and this runs
#     $ELASTICSITE_BIN slurm ACTION -c $ELASTICSITE_CONFIG NODELIST
# Otherwise every node is "powered" on this machine: resume starts
# `slurmd -b -N NODE` (dynamic nodes: dynnode.sh), suspend and fail stop it.
. "$(dirname "$(readlink -f "$0")")/env.sh"
# slurmctld runs power programs with fds 0-2 closed: open them first, or the
# slurmd we start gets its log file as fd 0-2 and loses it when daemonizing.
exec </dev/null >>"$LOG_DIR/power.log" 2>&1
case ${1:-} in
resume|suspend|fail) action=$1; shift ;;
*) action=${0##*/power-} ;;
esac
nodelist=${1:-}
echo "$(date +%FT%T) $action $nodelist"
case $action in resume|suspend|fail) ;; *) echo "power.sh: unknown action $action"; exit 2 ;; esac
[ -n "$nodelist" ] || { echo "power.sh: no node list"; exit 2; }

if [ -f "$RUN_DIR/power.env" ]; then
    set -a; . "$RUN_DIR/power.env"; set +a
    : "${ELASTICSITE_BIN:?power.env must set ELASTICSITE_BIN}"
    : "${ELASTICSITE_CONFIG:?power.env must set ELASTICSITE_CONFIG}"
    exec /usr/bin/perl -MPOSIX -e 'sigprocmask(SIG_SETMASK, POSIX::SigSet->new) or die; exec @ARGV or die "exec: $!"' \
        "$ELASTICSITE_BIN" slurm "$action" -c "$ELASTICSITE_CONFIG" "$nodelist"
fi

for node in $(/usr/bin/scontrol show hostnames "$nodelist"); do
    if [ "$action" = resume ]; then
        if /usr/bin/scontrol show node "$node" 2>/dev/null | grep -q 'State=.*DYNAMIC_NORM'; then
            feature=$(/usr/bin/scontrol show node "$node" | sed -n 's/.*AvailableFeatures=\([^ ]*\).*/\1/p')
            cpus=$(/usr/bin/scontrol show node "$node" | sed -n 's/.*CPUTot=\([0-9]*\).*/\1/p')
            "$ELASTICSITE_SLURM_DIR/dynnode.sh" start "$node" "${feature:-elastic}" "${cpus:-1}"
            continue
        fi
        # -b: report a fresh boot, or slurmctld ignores the registration and marks
        # the node DOWN at ResumeTimeout; perl clears the signal mask inherited
        # (all blocked) from slurmctld, or the slurmd would ignore SIGTERM later.
        /usr/bin/perl -MPOSIX -e 'sigprocmask(SIG_SETMASK, POSIX::SigSet->new) or die; exec @ARGV or die "exec: $!"' \
            /usr/sbin/slurmd -b -N "$node"
    else
        if [ -e "$RUN_DIR/dyn-$node.idx" ]; then
            "$ELASTICSITE_SLURM_DIR/dynnode.sh" stop "$node"
            continue
        fi
        pidf=$RUN_DIR/slurmd-$node.pid
        [ -s "$pidf" ] || continue
        pid=$(cat "$pidf")
        if [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == *slurmd* ]]; then
            kill -TERM "$pid" 2>/dev/null
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
        fi
        rm -f "$pidf"
    fi
done
exit 0
