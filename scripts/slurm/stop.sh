#!/bin/bash
# stop.sh - stop only what start.sh, power.sh and dynnode.sh started, by the
# PID files in $RUN_DIR (each checked against its executable), never by name.
# Jobs still queued or running are cancelled first so no slurmstepd is left.
# It first drops its caller's holder record (see start.sh) and stops nothing
# while another live process holds the Slurm; --force stops it anyway.
set -uo pipefail
. "$(dirname "$0")/env.sh"

stop_pidfile() {   # stop_pidfile FILE EXE-NAME
    local f=$1 exe=$2 pid
    [ -s "$f" ] || { rm -f "$f"; return 0; }
    pid=$(cat "$f")
    # a recycled PID is not ours: only signal it if it is still that daemon
    if [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == *"$exe"* ]]; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
        echo "stopped $exe (pid $pid)"
    fi
    rm -f "$f"
}

[ -d "$RUN_DIR" ] || { echo "nothing to stop ($RUN_DIR absent)"; exit 0; }
exec 8>"$RUN_DIR.lock"; flock 8
rm -f "$RUN_DIR/holders/${ELASTICSITE_SLURM_HOLDER:-$PPID}"
if [ "${1:-}" != --force ]; then
    others=()
    for h in "$RUN_DIR"/holders/*; do
        [ -e "$h" ] || continue
        if kill -0 "${h##*/}" 2>/dev/null; then others+=("${h##*/}"); else rm -f "$h"; fi
    done
    if [ ${#others[@]} -gt 0 ]; then
        echo "slurm still used by process(es) ${others[*]}: not stopping (--force to stop anyway)"
        exit 0
    fi
fi
if [[ "$(readlink "/proc/$(cat "$RUN_DIR/slurmctld.pid" 2>/dev/null)/exe" 2>/dev/null)" == *slurmctld* ]]; then
    jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        # shellcheck disable=SC2086
        scancel $jobs 2>/dev/null
        for _ in $(seq 50); do
            [ -z "$(squeue -h -t R,CG -o %i 2>/dev/null)" ] && break; sleep 0.2
        done
    fi
fi
for f in "$RUN_DIR"/dyn-*.idx; do           # dynamic nodes, each in its own netns
    [ -e "$f" ] || continue
    n=${f##*/dyn-}; n=${n%.idx}
    "$ELASTICSITE_SLURM_DIR/dynnode.sh" stop "$n" && echo "stopped dynamic node $n"
done
for f in "$RUN_DIR"/slurmd-*.pid; do         # static and power-saving nodes
    [ -e "$f" ] && stop_pidfile "$f" slurmd
done
stop_pidfile "$RUN_DIR/slurmctld.pid" slurmctld
stop_pidfile "$RUN_DIR/munged.pid" munged
rm -f "$RUN_DIR"/power-resume "$RUN_DIR"/power-suspend "$RUN_DIR"/power-fail "$RUN_DIR/dynnode.lock"
exit 0
