#!/usr/bin/env bash
# Installs elasticsite with its test tools and runs lint and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh ".[dev]"
bash scripts/test-deps.sh
# Python and pytest keep what they compile and rewrite (__pycache__ in the checkout): a
# pytest process, of which this script starts several, then does not compile every
# module and rewrite every test's asserts again.
unset PYTHONDONTWRITEBYTECODE
# Tests marked `serial` run one at a time, not on the parallel part's workers: most of
# them (the real-Slurm ones, which share the one slurmctld, and the timed stories of
# tests/manager) mostly wait, so they run in a process of their own from now on (the
# longest part after the parallel one: started first, though its collection compiles
# some modules beside the first collection), their output shown once the parallel part
# ends; those also marked `load` (a hundred worker processes) load the machine on their
# own and run at the end.
lane_log=$(mktemp)
lane_args=("$@")
# With no arguments, the lane and the load tests collect only where serial tests live.
[ $# -eq 0 ] && mapfile -t lane_args < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' tests/serial-paths.txt)
.venv/bin/pytest -m "serial and not load" -p no:cacheprovider "${lane_args[@]}" \
    >"$lane_log" 2>&1 &
lane_pid=$!
# The type check and the import layers (one core for about half a minute) run beside
# the compiling collection and the start of the parallel part; shown after it.
types_log=$(mktemp)
{ .venv/bin/mypy && .venv/bin/lint-imports --no-cache; } >"$types_log" 2>&1 &
types_pid=$!
trap 'kill "$lane_pid" "$types_pid" 2>/dev/null || true; rm -f "$lane_log" "$types_log"' EXIT
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
# One collection compiles every module the tests import (and rewrites their asserts),
# once, for the parallel part's workers.
.venv/bin/pytest --collect-only -q -p no:cacheprovider "$@" >/dev/null 2>&1 || true
# Most tests wait on real processes, sockets and sleeps rather than the CPU, so they run
# on several workers at once (pytest-xdist; tests sharing a fixture that is costly to
# build carry one xdist_group). ELASTICSITE_TEST_WORKERS=0 runs them in-process.
rc=0
.venv/bin/pytest -n "${ELASTICSITE_TEST_WORKERS:-4}" --dist loadgroup -m "not serial" "$@" || rc=$?
types=0
wait "$types_pid" || types=$?
cat "$types_log"
lane=0
wait "$lane_pid" || lane=$?
cat "$lane_log"
serial=0
.venv/bin/pytest -m "serial and load" -p no:cacheprovider "${lane_args[@]}" || serial=$?
for part in rc lane serial; do    # 5: every test of that part was deselected (-k ...)
    [ "${!part}" -eq 5 ] && declare "$part=0"
done
[ "$types" -ne 0 ] && exit "$types"
[ "$rc" -ne 0 ] && exit "$rc"
[ "$lane" -ne 0 ] && exit "$lane"
exit "$serial"
