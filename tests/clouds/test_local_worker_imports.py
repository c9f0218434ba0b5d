"""A local cloud's worker process imports little: hundreds start at once on a small
machine (the demo, ``test_scale``), and every module imported is CPU each one spends
before it boots. What it must not pull in is named here; what it does import is
whatever these modules need."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "cryptography",  # the broker's SSH key checks
    "elasticsite.model",  # the decisions, the clouds' specs: the manager's side
    "elasticsite.decision",
    "elasticsite.clouds.base",  # the driver contract
    "pydantic",
    "httpx",
)


def test_a_worker_process_imports_none_of_the_managers_side() -> None:
    code = "import sys, json, elasticsite.clouds.local_worker; print(json.dumps(list(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = json.loads(done.stdout)
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY or m in HEAVY)
    assert heavy == []
