"""The Grafana dashboard shows its numbers: no panel's transformations drop the value
column, the worst-lag table is sorted by lag, and the import dialog asks for the data
source (``__inputs``). Complements tests/repo/test_deploy.py (metrics, layout, alerts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DASHBOARD = (
    Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "tieredstore-dashboard.json"
)
DOC: dict[str, Any] = json.loads(DASHBOARD.read_text())
PANELS = [p for p in DOC["panels"] if p.get("targets")]


@pytest.mark.parametrize("panel", PANELS, ids=[p["title"] for p in PANELS])
def test_every_panel_keeps_its_value_column(panel: dict[str, Any]) -> None:
    for step in panel.get("transformations", []):
        options = step.get("options", {})
        assert not options.get("excludeByName", {}).get("Value"), "drops the value column"
    if panel["type"] == "table":  # an instant table: its value is the number shown
        assert all(t.get("format") == "table" and t.get("instant") for t in panel["targets"])


def test_the_worst_lag_table_shows_the_lag_sorted() -> None:
    (panel,) = [p for p in PANELS if p["title"] == "Worst lagging queues"]
    steps = {s["id"]: s["options"] for s in panel["transformations"]}
    assert steps["organize"]["renameByName"]["Value"] == "lag"
    assert steps["sortBy"]["sort"] == [{"field": "lag", "desc": True}]
    assert panel["options"]["sortBy"] == [{"displayName": "lag", "desc": True}]
    assert panel["fieldConfig"]["defaults"]["unit"] == "s"


def test_the_import_dialog_asks_for_the_prometheus_data_source() -> None:
    (source,) = DOC["__inputs"]
    assert (source["type"], source["pluginId"]) == ("datasource", "prometheus")
    (variable,) = [v for v in DOC["templating"]["list"] if v["name"] == "datasource"]
    assert variable["current"]["value"] == "${" + source["name"] + "}"
