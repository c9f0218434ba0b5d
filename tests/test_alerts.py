"""The example alert rules: promtool checks them and shows each firing, and every metric
they name is one the manager exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from elasticsite.manager.exporter import ManagerMetrics
from elasticsite.manager.report import StepReport
from elasticsite.model import CloudSpec

EXAMPLES = Path(__file__).parent.parent / "examples"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")


@needs_promtool
@pytest.mark.parametrize(("command", "file"), [("check", "alerts.yml"),
                                               ("test", "alerts.test.yml")])  # fmt: skip
def test_promtool(command: str, file: str) -> None:
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, command, "rules", file], cwd=EXAMPLES,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_rules_name_only_exported_metrics() -> None:
    metrics = ManagerMetrics([CloudSpec("lab", max_instances=1)], spend_cap=1.0)
    report = StepReport(at=1.0, worker_counts={("lab", "idle"): 1})
    metrics.observe(report)
    metrics.failures.labels("lab", "stalled").inc()
    text = generate_latest(metrics.registry).decode()
    exported = set(re.findall(r"^(elasticsite_\w+?)(?:\{| )", text, re.M))  # samples
    exported |= set(re.findall(r"^# TYPE (elasticsite_\w+) gauge", text, re.M))  # none yet
    named = set(re.findall(r"\belasticsite_\w+", (EXAMPLES / "alerts.yml").read_text()))
    assert named
    assert named <= exported, named - exported
