"""deploy/: the Grafana dashboard and the Prometheus alert rules shipped with the project.

* Every metric a panel or a rule queries is one the code exports: the sidecar's
  registry after a real catch-up pass (labels included), and the verifier's verify.prom.
* The dashboard is well formed: unique ids, panels on the 24-column grid without
  overlaps, every query on the ``$datasource`` variable, a section for each thing an
  operator looks at.
* Every alert has a promtool unit test in which it fires and one in which it stays
  quiet; ``promtool check rules`` and ``promtool test rules`` pass. promtool comes from
  Debian's ``prometheus`` package (``.ci/run`` installs it); without it those two tests
  are skipped and say why.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.support.sidecar.settings import settings_for
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.findings import FindingKind
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.fleet.job import FleetOptions, FleetResult
from tieredstore.verifier.fleet.report import fleet_registry
from tieredstore.verifier.outcome import Anomaly, QueueReport, Totals, VerificationResult
from tieredstore.verifier.reporting.metrics_file import verify_registry
from tieredstore.verifier.vocabulary import Level, VerifyOptions

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "tieredstore-dashboard.json"
RULES_DIR = REPO / "deploy" / "prometheus"
RULES = RULES_DIR / "tieredstore-alerts.yml"
RULE_TESTS = RULES_DIR / "tieredstore-alerts.test.yml"
PROMTOOL = shutil.which("promtool")
NO_PROMTOOL = "promtool is not installed (Debian package prometheus; .ci/run installs it)"

#: Labels Prometheus adds to every scraped series (target labels).
TARGET_LABELS: Final = frozenset({"job", "instance", "broker"})
#: Prometheus's own series the rules may use.
BUILTIN: Final = frozenset({"up"})
#: The retention-pressure gauges (labels topic, queue): the dashboard must chart them.
RETENTION: Final = frozenset(
    {"tieredstore_queue_retention_headroom_bytes", "tieredstore_queue_retention_headroom_seconds"}
)
_METRIC = re.compile(r"\b(tieredstore_[a-z0-9_]+|up)\b(?:\{([^}]*)\})?")
_LABEL = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
_SUFFIXES: Final = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


# -- what the code exports ---------------------------------------------------------------
def _exported_from(registry: CollectorRegistry, out: dict[str, set[str] | None]) -> None:
    """Sample name → label names seen (None: no sample yet, labels unknown)."""
    for family in registry.collect():
        for suffix in _SUFFIXES[family.type]:
            out.setdefault(family.name + suffix, None)
        for sample in family.samples:
            seen = out.get(sample.name) or set()
            out[sample.name] = seen | (set(sample.labels) - {"le"})


async def _sidecar_metrics(tmp: Path) -> Metrics:
    """The sidecar's registry after a real catch-up pass over a small store."""
    synthesize(tmp / "store", SynthSpec(topics=2, queues=2, messages=400))
    reset_memory_stores()
    metrics = Metrics()
    settings = settings_for(tmp / "store", "memory://deploy-metrics", tmp / "state")
    async with open_runtime(settings, metrics=metrics) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
    return metrics


def _verify_result() -> VerificationResult:
    opts = VerifyOptions(
        hot=Path("/hot"), cold_url="/cold", cluster="C", broker="B", now_ms=0, level=Level.CONTENT
    )
    queue = QueueReport("T", 0, True, 0, 10, 0, 10, 1, 10, 100, 0, None, 10, 100, 0, 0)
    gap = Anomaly("T", 0, 1, FindingKind.GAP, 2, 1, None, "gap")
    return VerificationResult(
        opts, (queue,), (gap,), Totals(1, 1, 0, 3, 0, 0, 10, 100, 0, 0), (), None, 0, 1
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str] | None]:
    out: dict[str, set[str] | None] = {}
    metrics = asyncio.run(_sidecar_metrics(tmp_path_factory.mktemp("deploy")))
    _exported_from(metrics.registry, out)
    _exported_from(verify_registry(_verify_result()), out)
    fleet = FleetResult(FleetOptions("/cold", 0), (_verify_result(),), 0, 1000)
    _exported_from(fleet_registry(fleet), out)
    return out


# -- what the files query ---------------------------------------------------------------
def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def _dashboard_queries() -> list[str]:
    doc = _dashboard()
    exprs = [t["expr"] for p in _panels(doc["panels"]) for t in p.get("targets", [])]
    variables = doc["templating"]["list"]
    return exprs + [v["query"]["query"] for v in variables if v["type"] == "query"]


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def _check_queries(queries: list[str], exported: dict[str, set[str] | None]) -> None:
    assert queries
    for query in queries:
        for name, selector in _METRIC.findall(query):
            if name in BUILTIN:
                continue
            assert name in exported, f"{name} is not exported by the code (in {query!r})"
            labels = exported[name]
            if labels is None or not selector:
                continue
            used = set(_LABEL.findall(selector))
            assert used <= labels | TARGET_LABELS, f"{name} has no label {used - labels}"


def test_the_dashboard_queries_only_metrics_the_code_exports(
    exported: dict[str, set[str] | None],
) -> None:
    queries = _dashboard_queries()
    _check_queries(queries, exported)
    used = {m for q in queries for m, _ in _METRIC.findall(q)}
    # It shows the sidecar's and the verifier's own series, not just a few of them.
    assert {
        "tieredstore_queue_lag_seconds", "tieredstore_bytes_tiered_total",
        "tieredstore_errors_total", "tieredstore_backend_retries_total",
        "tieredstore_lease_held", "tieredstore_lease_epoch", "tieredstore_queue_state",
        "tieredstore_backend_requests_total", "tieredstore_backend_bytes_total",
        "tieredstore_verify_exit_code", "tieredstore_verify_last_run_timestamp_seconds",
        "tieredstore_group_replicas_missing", "tieredstore_group_unconfirmed_bytes",
        *RETENTION,
    } <= used  # fmt: skip


def test_the_alert_rules_query_only_metrics_the_code_exports(
    exported: dict[str, set[str] | None],
) -> None:
    _check_queries([r["expr"] for r in _rules()], exported)


def test_a_query_of_a_metric_the_code_does_not_export_is_caught(
    exported: dict[str, set[str] | None],
) -> None:
    with pytest.raises(AssertionError, match="tieredstore_queue_lag is not exported"):
        _check_queries(["tieredstore_queue_lag > 5"], exported)
    with pytest.raises(AssertionError, match="has no label"):
        _check_queries(['tieredstore_queue_lag_seconds{queue_id="1"}'], exported)


def test_the_dashboard_is_well_formed() -> None:
    doc = _dashboard()
    panels = list(_panels(doc["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine
        for target in p.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        if p["type"] != "row":
            assert p["title"] and p["description"] and p["targets"], p["title"]
    rows = {p["title"] for p in panels if p["type"] == "row"}
    assert rows == {
        "Health", "Lag per queue", "Throughput", "Errors and retries", "Cold store requests",
        "Lease", "Broker group", "Queue states", "Retention pressure", "Verification",
    }  # fmt: skip


def _alert_tests() -> dict[str, tuple[int, int]]:
    """Per alert: (cases where it fires, cases where it stays quiet)."""
    doc = yaml.safe_load(RULE_TESTS.read_text())
    out: dict[str, tuple[int, int]] = {}
    for test in doc["tests"]:
        for case in test["alert_rule_test"]:
            fires, quiet = out.get(case["alertname"], (0, 0))
            if case.get("exp_alerts"):
                out[case["alertname"]] = (fires + 1, quiet)
            else:
                out[case["alertname"]] = (fires, quiet + 1)
    return out


def test_every_alert_has_a_unit_test_that_fires_and_one_that_does_not() -> None:
    alerts = {r["alert"] for r in _rules()}
    assert alerts >= {
        "TieredstoreLagOverBudget", "TieredstoreQueueDiverged", "TieredstoreQueuePaused",
        "TieredstoreLeaseLost", "TieredstoreLeaseFlapping", "TieredstoreNoTick",
        "TieredstoreVerificationCorrupt", "TieredstoreVerificationDirty",
        "TieredstoreVerificationTooOld", "TieredstoreVerificationIncomplete",
        "TieredstoreFleetVerificationTooOld", "TieredstoreVerificationNeverReported",
        "TieredstoreBrokerNeverVerified", "TieredstoreGroupReplicaMissing",
        "TieredstoreGroupUnconfirmedGrowing",
    }  # fmt: skip
    tested = _alert_tests()
    assert set(tested) == alerts
    for alert, (fires, quiet) in tested.items():
        assert fires >= 1 and quiet >= 1, alert


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PROMTOOL), *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_promtool_check_rules() -> None:
    proc = _promtool("check", "rules", RULES.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_promtool_test_rules(tmp_path: Path) -> None:
    proc = _promtool("test", "rules", RULE_TESTS.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
    # The unit tests can fail: the same tests against a rule file whose lag budget moved.
    for name in (RULES.name, RULE_TESTS.name):
        shutil.copy(RULES_DIR / name, tmp_path / name)
    moved = (tmp_path / RULES.name).read_text().replace("> 900", "> 1800")
    (tmp_path / RULES.name).write_text(moved)
    broken = subprocess.run(
        [str(PROMTOOL), "test", "rules", RULE_TESTS.name],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert broken.returncode != 0 and "TieredstoreLagOverBudget" in broken.stdout + broken.stderr
