#!/usr/bin/env bash
# Installs the Debian packages the test suite needs (scripts/debian-test-packages.txt):
# real Slurm and munge, nftables, ... Only as root with apt-get; otherwise it says
# which are missing and the tests that need them skip with a message of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' scripts/debian-test-packages.txt | grep -v '^$')
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# cloud-init's own schema, for checking the worker bootstrap templates (unpacked, not
# installed: the package would add boot services to this machine)
bash scripts/cloud-init-schema.sh >/dev/null 2>&1 ||
  echo "test-deps: cloud-init's schema unavailable; the template schema test will skip" >&2
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "test-deps: not root or no apt-get; missing Debian packages: ${missing[*]}" >&2
  echo "test-deps: the tests that need them will be skipped" >&2
  exit 0
fi
echo "test-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# No service is started by the packages here (no systemd); the tests start their own.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
