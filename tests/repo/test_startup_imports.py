"""What ``tieredstore run`` imports before it serves anything: not the web framework.

A sidecar starts often (every restart, every ``run --once`` from cron, a hundred times
in the crash campaign) beside the broker, and aiohttp costs about a quarter of a second
of CPU to import. ``run`` imports it only when it starts a listener.
"""

from __future__ import annotations

import subprocess
import sys

CHECK = (
    "import sys, tieredstore.cli.commands.run; "
    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 's3fs')))"
)


def test_the_run_command_imports_no_web_framework_until_it_serves() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout


def test_the_check_sees_an_import_of_the_web_framework() -> None:
    """The check can fail: with the listeners' module imported, aiohttp is listed."""
    also = CHECK.replace("run;", "run, tieredstore.cli.sidecar.http;")
    out = subprocess.run([sys.executable, "-c", also], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    assert "'aiohttp'" in out.stdout
