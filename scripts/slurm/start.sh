#!/bin/bash
# start.sh - configure and start a single-machine Slurm: munged (unless one
# already answers), slurmctld and the slurmd of the static node "localhost".
# Idempotent: daemons already running (by their PID file) are left alone.
# Every daemon started gets a PID file in $RUN_DIR; stop.sh stops exactly those.
# Several users (test sessions) may share one Slurm: each start.sh records its
# caller ($ELASTICSITE_SLURM_HOLDER, default the parent process) as a holder, and
# stop.sh only stops the daemons once no live holder is left.
#   ELASTICSITE_SLURM_KEEP_STATE=1  keep the controller's saved jobs and nodes
set -euo pipefail
. "$(dirname "$0")/env.sh"
[ "$(id -u)" = 0 ] || { echo "start.sh: must run as root" >&2; exit 1; }
command -v slurmctld >/dev/null || { echo "start.sh: slurm not installed, run install.sh" >&2; exit 1; }

wait_for() {   # wait_for SECONDS CMD...   (polls every 0.2 s)
    local n=$(( $1 * 5 )); shift
    for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    return 1
}
alive() {      # alive PIDFILE EXE-NAME: the PID file names a running EXE-NAME
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == *"$2"* ]]
}

mkdir -p "$RUN_DIR/holders" "$STATE_DIR/ctld" "$LOG_DIR" "$(dirname "$SLURM_CONF_FILE")"
exec 8>"$RUN_DIR.lock"; flock 8          # one start.sh/stop.sh at a time
: > "$RUN_DIR/holders/${ELASTICSITE_SLURM_HOLDER:-$PPID}"
chmod 755 "$ELASTICSITE_SLURM_DIR"/*.sh
# slurmctld runs a program without arguments: one link per power action
for action in resume suspend fail; do
    ln -sfn "$ELASTICSITE_SLURM_DIR/power.sh" "$RUN_DIR/power-$action"
done

# ---- slurm.conf -------------------------------------------------------------
if [ -e "$SLURM_CONF_FILE" ] && ! head -1 "$SLURM_CONF_FILE" | grep -qxF "$CONF_MARK"; then
    echo "start.sh: $SLURM_CONF_FILE exists and was not written by start.sh; not touching it" >&2
    exit 1
fi
new_conf=$(mktemp)
{ echo "$CONF_MARK"
  sed -e "s|@SCRIPTS_DIR@|$ELASTICSITE_SLURM_DIR|g" -e "s|@STATE_DIR@|$STATE_DIR|g" \
      -e "s|@RUN_DIR@|$RUN_DIR|g" -e "s|@LOG_DIR@|$LOG_DIR|g" -e "s|@CPUS@|$(nproc)|g" \
      "$ELASTICSITE_SLURM_DIR/slurm.conf.template"; } > "$new_conf"
conf_changed=1
cmp -s "$new_conf" "$SLURM_CONF_FILE" && conf_changed=0
install -m 644 "$new_conf" "$SLURM_CONF_FILE"; rm -f "$new_conf"

# ---- munge ------------------------------------------------------------------
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    echo "munged answers already"
else
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 8>&-
    wait_for 10 munge -n || { echo "start.sh: munged did not come up" >&2; exit 1; }
    cp /run/munge/munged.pid "$RUN_DIR/munged.pid"   # ours: stop.sh stops it
    echo "munged started (pid $(cat "$RUN_DIR/munged.pid"))"
fi

# ---- slurmctld --------------------------------------------------------------
if alive "$RUN_DIR/slurmctld.pid" slurmctld; then
    if [ "$conf_changed" = 1 ]; then scontrol reconfigure; echo "slurmctld reconfigured"; fi
else
    if [ "${ELASTICSITE_SLURM_KEEP_STATE:-0}" != 1 ]; then   # a fresh cluster
        rm -rf "${STATE_DIR:?}"/ctld/*
        for d in "$STATE_DIR"/d-*; do   # spool dirs of slurmds that are not running
            [ -e "$d" ] && ! alive "$RUN_DIR/slurmd-${d##*/d-}.pid" slurmd && rm -rf "$d"
        done
    fi
    # slurmctld daemonizes and writes its PID file; keep none of our fds
    /usr/sbin/slurmctld </dev/null >/dev/null 2>&1 8>&-
    wait_for 30 bash -c 'scontrol ping | grep -q UP' ||
        { echo "start.sh: slurmctld did not answer; end of $LOG_DIR/slurmctld.log:" >&2
          tail -20 "$LOG_DIR/slurmctld.log" >&2; exit 1; }
    echo "slurmctld started (pid $(cat "$RUN_DIR/slurmctld.pid"))"
fi

# ---- slurmd of the static node ------------------------------------------------
if ! alive "$RUN_DIR/slurmd-localhost.pid" slurmd; then
    /usr/sbin/slurmd -N localhost </dev/null >/dev/null 2>&1 8>&-
    wait_for 10 test -s "$RUN_DIR/slurmd-localhost.pid"
    echo "slurmd started (pid $(cat "$RUN_DIR/slurmd-localhost.pid" 2>/dev/null))"
fi
wait_for 30 bash -c '[[ "$(sinfo -h -n localhost -o %T | head -1)" =~ ^(idle|mixed|allocated) ]]' ||
    { echo "start.sh: node localhost did not come up; end of its log:" >&2
      tail -20 "$LOG_DIR/slurmd-localhost.log" >&2; exit 1; }
echo "slurm ready: $(sinfo -h -o '%P %a %D %T' | tr '\n' ';')"
