#!/bin/bash
# Joins this machine to the elastic site as a worker: installs the batch client (unless
# the image has it), puts the site's secrets in place, starts the batch daemon and the
# recontextualization agent. Everything it needs is in /etc/elasticsite/worker.env
# (written 0600 by cloud-init); no value from there is ever evaluated as code.
set -euo pipefail
umask 077
# shellcheck disable=SC1091
. /etc/elasticsite/worker.env
log() { echo "elasticsite join: $*" | tee -a /var/log/elasticsite-join.log >&2; }

install_packages() {
    if command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends "$@"
    elif command -v dnf >/dev/null; then
        dnf install -y -q epel-release || true
        dnf install -y -q "$@"
    elif command -v yum >/dev/null; then
        yum install -y -q epel-release || true
        yum install -y -q "$@"
    else
        log "no apt-get, dnf or yum: cannot install $*"; exit 1
    fi
}

family() { if command -v apt-get >/dev/null; then echo debian; else echo rhel; fi; }

slurm_worker() {
    if [ "${ELASTICSITE_INSTALL:-1}" = 1 ]; then
        if [ "$(family)" = debian ]; then install_packages slurmd munge
        else install_packages slurm-slurmd munge; fi
    fi
    install -o munge -g munge -m 0400 /etc/elasticsite/munge.key /etc/munge/munge.key
    shred -u /etc/elasticsite/munge.key 2>/dev/null || rm -f /etc/elasticsite/munge.key
    systemctl restart munge
    local args=(--conf-server "$ELASTICSITE_HEAD" -N "$ELASTICSITE_NODE")
    if [ "${ELASTICSITE_SLURM_NODE_MODE:-dynamic}" = dynamic ]; then
        args+=(-Z --conf "CPUs=$ELASTICSITE_CORES Feature=$ELASTICSITE_SLURM_FEATURES")
    fi
    mkdir -p /etc/systemd/system/slurmd.service.d
    {
        echo "[Service]"
        echo "ExecStart="
        printf 'ExecStart=/usr/sbin/slurmd -D'
        printf ' %q' "${args[@]}"
        echo
    } >/etc/systemd/system/slurmd.service.d/elasticsite.conf
    systemctl daemon-reload
    systemctl enable --now slurmd
}

condor_worker() {
    if [ "${ELASTICSITE_INSTALL:-1}" = 1 ]; then install_packages condor; fi
    install -d -m 0700 /etc/condor/tokens.d
    install -m 0600 /etc/elasticsite/condor.token /etc/condor/tokens.d/elasticsite
    rm -f /etc/elasticsite/condor.token
    {
        printf 'CONDOR_HOST = %s\n' "$ELASTICSITE_HEAD"
        echo 'use ROLE: Execute'
        printf 'VMType = "%s"\n' "$ELASTICSITE_VM_TYPE"
        echo 'STARTD_ATTRS = $(STARTD_ATTRS) VMType'
        printf 'ElasticsiteWorker = "%s"\n' "$ELASTICSITE_WORKER_ID"
        echo 'STARTD_ATTRS = $(STARTD_ATTRS) ElasticsiteWorker'
        # Fair share: only the jobs of the user this VM serves start here. The manager
        # hands the VM to another user at run time (this one attribute, nothing else).
        printf 'ElasticsiteOwner = "%s"\n' "${ELASTICSITE_OWNER:-}"
        echo 'STARTD_ATTRS = $(STARTD_ATTRS) ElasticsiteOwner'
        echo 'START = ($(START)) && (MY.ElasticsiteOwner =?= "" || TARGET.Owner =?= MY.ElasticsiteOwner)'
        echo 'ENABLE_RUNTIME_CONFIG = True'
        echo 'SETTABLE_ATTRS_ADMINISTRATOR = ElasticsiteOwner'
    } >/etc/condor/config.d/50-elasticsite
    systemctl enable condor
    systemctl restart condor
}

start_agent() {
    [ -f /etc/elasticsite/userdata.json ] || return 0
    if [ "${ELASTICSITE_INSTALL:-1}" = 1 ]; then
        if [ "$(family)" = debian ]; then install_packages python3-venv
        else install_packages python3; fi
        python3 -m venv /opt/elasticsite
        /opt/elasticsite/bin/pip install -q "$ELASTICSITE_AGENT_PACKAGE"
    fi
    # The hardened unit the package ships (systemd/elasticsite-agent.service).
    /opt/elasticsite/bin/python - <<'PY' >/etc/systemd/system/elasticsite-agent.service
from importlib.resources import files
print(files("elasticsite").joinpath("systemd/elasticsite-agent.service").read_text(), end="")
PY
    systemctl daemon-reload
    systemctl enable --now elasticsite-agent
}

case "${ELASTICSITE_BATCH:-}" in
    slurm) slurm_worker ;;
    htcondor) condor_worker ;;
    *) log "batch system ${ELASTICSITE_BATCH:-(none)}: nothing to join" ;;
esac
start_agent
log "worker $ELASTICSITE_WORKER_ID joined"
