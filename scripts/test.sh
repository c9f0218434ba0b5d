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
exec .venv/bin/pytest "$@"
