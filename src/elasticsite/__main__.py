"""``python -m elasticsite``: the same as the ``elasticsite`` command."""

from elasticsite.cli import app

app(prog_name="elasticsite")
