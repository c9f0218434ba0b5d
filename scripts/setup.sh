#!/usr/bin/env bash
# Creates .venv (if needed) and installs elasticsite into it; extra args go to pip
# (e.g. ".[dev]" for the test tools). Works on a fresh Debian with Python 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  echo "elasticsite needs Python 3.11 or newer ($PY is $("$PY" -V 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv 2>/dev/null; then
    # Debian's Python splits venv into its own package.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      rm -rf .venv && "$PY" -m venv .venv
    else
      echo "cannot create a virtual environment: install python3-venv" >&2
      exit 1
    fi
  fi
fi
.venv/bin/python -m pip install -q --upgrade pip
# --no-compile: Python compiles a module when it is first imported and keeps it; compiling
# every module of every dependency up front (most never imported: moto's hundreds of
# services, sympy, cfn-lint) took longer than the whole install.
.venv/bin/python -m pip install -q --no-compile -e "${1:-.}"
