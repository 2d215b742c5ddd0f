"""Every queue state the sidecar exports is named where the docs list them: the metric's
row in docs/configuration.md, and ``status``'s health line counts it."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from tieredstore.cli.commands.status import health_line
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.status_report import QueueStatus
from tieredstore.metadata.rows import QueueState

REPO = Path(__file__).resolve().parents[2]


def _exported_states() -> set[str]:
    metrics = Metrics(CollectorRegistry())
    metrics.set_queue_state("T", 0, QueueState.ACTIVE)
    return {
        s.labels["state"]
        for family in metrics.registry.collect()
        if family.name == "tieredstore_queue_state"
        for s in family.samples
    }


def test_configuration_md_names_every_exported_queue_state() -> None:
    states = _exported_states()
    assert states == {"ACTIVE", "PAUSED", "DIVERGED", "DELETED", "STOPPED"}  # DEGRADED: its own
    text = (REPO / "docs" / "configuration.md").read_text()
    row = re.search(r"`_queue_state\{topic,queue,state\}` \(([^)]*)\)", text)
    assert row is not None
    assert all(state in row[1] for state in states), (states, row[1])


def test_the_health_line_counts_every_state() -> None:
    for state in QueueState:
        q = QueueStatus("T", 0, state, 0, 1, 0, 1, 0, 0, 0.0, "")
        assert f"(1 {state.value})" in health_line([q], 0), state


def test_the_readme_exit_codes_match_what_run_does() -> None:
    """130/143 are a one-shot command's; the continuous ``run`` stops gracefully and exits
    0 (tests/cli/test_http_sidecar.py sends it SIGTERM and checks that)."""
    text = " ".join((REPO / "README.md").read_text().split())
    assert "`130`/`143` a one-shot command stopped by SIGINT/SIGTERM" in text
    assert re.search(r"continuous `run` is a service: SIGTERM/SIGINT stop it gracefully .* "
                     r"exits `0`", text)  # fmt: skip
    http = (REPO / "tests" / "cli" / "test_http_sidecar.py").read_text()
    assert "SIGTERM: exit 0" in http
