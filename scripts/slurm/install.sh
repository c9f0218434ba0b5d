#!/bin/bash
# install.sh - install Debian's Slurm (controller, node daemon, client) and munge
# if they are missing. Needs root. Package scripts start no service without
# systemd; start.sh starts the daemons.
set -euo pipefail
PKGS=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "slurm packages already installed"; exit 0; }
[ "$(id -u)" = 0 ] || { echo "install.sh: need root to install ${missing[*]}" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
echo "installed ${missing[*]} ($(slurmd -V))"
