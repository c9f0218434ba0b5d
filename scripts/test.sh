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
# Tests marked `serial` run one at a time: the real-Slurm ones (`slurm`: they share the
# one slurmctld and mostly wait on it) in a process of their own from now on, beside
# the lint and the parallel part, their output shown once that part ends; the
# hundred-worker ones, which load the machine on their own, at the end.
slurm_log=$(mktemp)
slurm_args=("$@")
[ $# -eq 0 ] && slurm_args=(tests/integration/slurm)   # collect only what it runs
.venv/bin/pytest -m "serial and slurm" -p no:cacheprovider "${slurm_args[@]}" \
    >"$slurm_log" 2>&1 &
slurm_pid=$!
# The type check and the import layers (one core for about a minute) run beside the
# compiling collection and the start of the parallel part; they are shown after it.
types_log=$(mktemp)
{ .venv/bin/mypy && .venv/bin/lint-imports --no-cache; } >"$types_log" 2>&1 &
types_pid=$!
trap 'kill "$slurm_pid" "$types_pid" 2>/dev/null || true; rm -f "$slurm_log" "$types_log"' EXIT
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
# One collection compiles the tests for the parallel part's workers.
.venv/bin/pytest --collect-only -q -p no:cacheprovider "$@" >/dev/null 2>&1 || true
# Most tests wait on real processes, sockets and sleeps rather than the CPU, so they run
# on several workers at once (pytest-xdist; tests sharing a fixture that is costly to
# build carry one xdist_group). ELASTICSITE_TEST_WORKERS=0 runs them in-process.
rc=0
.venv/bin/pytest -n "${ELASTICSITE_TEST_WORKERS:-4}" --dist loadgroup -m "not serial" "$@" || rc=$?
types=0
wait "$types_pid" || types=$?
cat "$types_log"
slurm=0
wait "$slurm_pid" || slurm=$?
cat "$slurm_log"
serial=0
.venv/bin/pytest -m "serial and not slurm" "$@" || serial=$?
for part in rc slurm serial; do    # 5: every test of that part was deselected (-k ...)
    [ "${!part}" -eq 5 ] && declare "$part=0"
done
[ "$types" -ne 0 ] && exit "$types"
[ "$rc" -ne 0 ] && exit "$rc"
[ "$slurm" -ne 0 ] && exit "$slurm"
exit "$serial"
