"""The HTTP APIs are read-only; message contents have a listener of their own, loopback
unless told otherwise, that never shares a port with the health/metrics listener."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sidecar.settings import settings_for
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.http import build_app
from tieredstore.cli.sidecar.read_api import build_read_app
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.errors import ConfigError
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.settings.loader import SETTINGS, load_settings


def test_binds_to_loopback_by_default() -> None:
    defaults = {s.key: s.default for s in SETTINGS}
    assert defaults["http.bind"] == defaults["reads.bind"] == "127.0.0.1"
    settings = load_settings(env={}, overrides=_REQUIRED)
    assert settings.http.bind == settings.reads.bind == "127.0.0.1"
    assert settings.reads.port != settings.http.port


_REQUIRED = {"store.path": "/s", "cold.url": "memory://x", "cold.cluster": "C",
             "cold.broker": "B", "state.dir": "/t"}  # fmt: skip


def test_the_read_api_never_shares_the_metrics_listener() -> None:
    env = {"TIEREDSTORE_HTTP_BIND": "0.0.0.0", "TIEREDSTORE_READS_PORT": "9780"}
    with pytest.raises(ConfigError, match=r"reads\.port and http\.port are both 9780") as exc:
        load_settings(env=env, overrides=_REQUIRED)
    assert "env TIEREDSTORE_READS_PORT" in str(exc.value)
    # Either listener alone, or both on free ports (0), is fine.
    load_settings(env={**env, "TIEREDSTORE_HTTP_ENABLED": "false"}, overrides=_REQUIRED)
    load_settings(env={"TIEREDSTORE_HTTP_PORT": "0", "TIEREDSTORE_READS_PORT": "0"},
                  overrides=_REQUIRED)  # fmt: skip


async def test_every_route_is_read_only(tmp_path: Path) -> None:
    reset_memory_stores()
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=10))
    settings = settings_for(tmp_path / "store", "memory://http", tmp_path / "state")
    async with open_runtime(settings) as rt:
        ops, reads = build_app(rt), build_read_app(rt)
        routes = [*ops.router.routes(), *reads.router.routes()]
        methods = {route.method for route in routes}
        ops_paths = {r.resource.canonical for r in ops.router.routes() if r.resource}
        read_paths = {r.resource.canonical for r in reads.router.routes() if r.resource}
    assert methods <= {"GET", "HEAD"}
    # Nothing that returns message contents is on the listener a container opens.
    assert ops_paths == {"/healthz", "/metrics", "/v1/queues"}
    assert read_paths == {"/v1/messages", "/v1/cold/range", "/v1/cold/records", "/v1/cold/offset"}
