#!/usr/bin/env bash
# Installs elasticsite with its test tools and runs lint and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh ".[dev]"
bash scripts/test-deps.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
# Most tests wait on real processes, sockets and sleeps rather than the CPU, so they run
# on several workers at once (pytest-xdist; tests sharing a fixture that is costly to
# build carry one xdist_group). Tests marked `serial` run afterwards, one at a time:
# the real-Slurm ones share the one slurmctld, and the hundred-worker ones load the
# machine on their own. ELASTICSITE_TEST_WORKERS=0 runs the first part in-process too.
rc=0
.venv/bin/pytest -n "${ELASTICSITE_TEST_WORKERS:-4}" --dist loadgroup -m "not serial" "$@" || rc=$?
serial=0
.venv/bin/pytest -m serial "$@" || serial=$?
[ "$rc" -eq 5 ] && rc=0          # 5: every test of that part was deselected (-k ...)
[ "$serial" -eq 5 ] && serial=0
[ "$rc" -ne 0 ] && exit "$rc"
exit "$serial"
