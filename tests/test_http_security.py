"""The HTTP API is read-only and listens on loopback unless told otherwise."""

from __future__ import annotations

from pathlib import Path

from dispatcher.http import build_app
from dispatcher.runtime import open_runtime
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.config import SETTINGS, load_settings
from tieredstore.synth import SynthSpec, synthesize
from tieredstore.testing.settings import settings_for


def test_binds_to_loopback_by_default() -> None:
    defaults = {s.key: s.default for s in SETTINGS}
    assert defaults["http.bind"] == "127.0.0.1"
    settings = load_settings(
        env={},
        overrides={"store.path": "/s", "cold.url": "memory://x", "cold.cluster": "C",
                   "cold.broker": "B", "state.dir": "/t"},
    )  # fmt: skip
    assert settings["http.bind"] == "127.0.0.1"


async def test_every_route_is_read_only(tmp_path: Path) -> None:
    reset_memory_stores()
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=10))
    settings = settings_for(tmp_path / "store", "memory://http", tmp_path / "state")
    async with open_runtime(settings) as rt:
        app = build_app(rt)
        methods = {route.method for route in app.router.routes()}
        paths = {route.resource.canonical for route in app.router.routes() if route.resource}
    assert methods <= {"GET", "HEAD"}
    assert paths == {"/healthz", "/metrics", "/v1/queues", "/v1/messages"}
