#!/usr/bin/env bash
# Installs elasticsite with its test tools and runs lint and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh ".[dev]"
bash scripts/test-deps.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy
# The tests run on several workers at once (pytest-xdist): most of them wait on real
# processes, sockets and sleeps rather than the CPU, so more workers than cores pay.
# Tests sharing one resource (the real Slurm) carry an xdist_group and run one after
# another in one worker. ELASTICSITE_TEST_WORKERS=0 runs everything in this process.
exec .venv/bin/pytest -n "${ELASTICSITE_TEST_WORKERS:-4}" --dist loadgroup "$@"
