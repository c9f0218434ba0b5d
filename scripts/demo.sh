#!/usr/bin/env bash
# Installs elasticsite and runs the embedded-site demo; arguments go to `elasticsite demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .
exec .venv/bin/elasticsite demo "$@"
