#!/usr/bin/env bash
# Fetches cloud-init's own cloud-config schema from Debian's cloud-init package, without
# installing the package (it would add boot services to this machine): the .deb is
# downloaded and only unpacked under .cache/. Prints the schema file's path. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/cloud-init
schema=$(find "$dest" -name 'schema-cloud-config-v1.json' 2>/dev/null | head -n1 || true)
if [ -z "$schema" ]; then
    mkdir -p "$dest"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && apt-get download cloud-init >/dev/null 2>&1)
    dpkg-deb -x "$tmp"/cloud-init_*.deb "$dest/root"
    schema=$(find "$dest" -name 'schema-cloud-config-v1.json' | head -n1)
fi
[ -n "$schema" ] || { echo "cloud-init's schema not found in its package" >&2; exit 1; }
echo "$schema"
