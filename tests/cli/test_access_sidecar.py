"""A running sidecar the cold store starts refusing (a policy changed, keys rotated):
one ERROR line per distinct fault, a state on ``/healthz``, the
``tieredstore_cold_access_refused`` gauge, and tiering resumes by itself once the store
accepts it again. A key that may not delete stops expiry only; tiering goes on.

Against ``auth_moto`` (signatures and IAM policies checked as on S3); the sidecar's
credentials come from the environment, as a deployed one's do.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.fixtures_s3 import AuthMoto
from tests.support.moto import REGION, IamKey, s3_policy
from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.http import health
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.cold_access import AccessWatchingBackend
from tieredstore.errors import AccessFault, ColdStoreAccessError
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.settings.loader import Settings

pytestmark = [pytest.mark.s3, pytest.mark.slow]

DAY_MS = 86_400_000


@pytest.fixture
def store(tmp_path: Path) -> Path:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=3000))
    return tmp_path / "store"


def _use(monkeypatch: pytest.MonkeyPatch, key: IamKey) -> None:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in key.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _settings(auth_moto: AuthMoto, store: Path, tmp: Path) -> Settings:
    cold = f"s3://{auth_moto.new_bucket()}/tiered"
    return settings_for(
        store, cold, tmp / "state", cold__endpoint_url=auth_moto.endpoint_url, cold__region=REGION
    )


def _status(settings: Settings, capsys: pytest.CaptureFixture[str]) -> str:
    """``tieredstore status --json``'s writer warning ("" for none), next to the running
    sidecar (whose virtual clock leaves its lease expired on this host's clock)."""
    capsys.readouterr()
    argv = ["status", "--json", "--store", str(settings.store.path), "--state-dir",
            str(settings.state.dir), "--cluster", CLUSTER, "--broker", BROKER]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    warning = doc["writer"]["warning"]
    assert (doc["health"] == "WARNING") is (warning is not None)
    return "" if warning is None else str(warning)


def _refused(rt: Runtime, fault: str, op: str) -> float | None:
    return rt.metrics.registry.get_sample_value(
        "tieredstore_cold_access_refused", {"fault": fault, "op": op}
    )


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_key_that_may_not_delete_stops_expiry_only(
    auth_moto: AuthMoto,
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user, key = auth_moto.new_user(s3_policy("s3:DeleteObject"))
    _use(monkeypatch, key)
    settings = _settings(auth_moto, store, tmp_path)
    clock = VirtualClock()
    async with open_runtime(settings, clock=clock) as rt:
        assert isinstance(rt.backend, AccessWatchingBackend)
        await rt.dispatcher.start(wait_for_lease=False)
        tiered = await rt.dispatcher.catch_up()
        assert tiered.segments > 1 and not tiered.errors  # tiering never deletes
        caplog.clear()
        caplog.set_level(logging.INFO, logger="tieredstore.dispatcher.cold_access")
        later = SynthSpec().start_time + 30 * DAY_MS  # the oldest segments expired
        for _ in range(2):  # expiry refused twice: one ERROR line
            with pytest.raises(ColdStoreAccessError) as refused:
                await rt.retention.run_pass(now_ms=later)
            assert refused.value.fault is AccessFault.DENIED and refused.value.op == "delete"
        errors = _errors(caplog)
        assert len(errors) == 1, errors
        assert "access denied: delete of" in errors[0] and "s3:DeleteObject" in errors[0]
        assert _refused(rt, "denied", "delete") == 1
        state = health(rt.dispatcher, clock.now_ms(), access=rt.access)
        assert state.ok and "expiry and gc stopped" in state.reason, state
        # tiering goes on meanwhile
        SyntheticStore.open(store).append(3000)
        more = await rt.dispatcher.catch_up()
        assert more.segments >= 1 and not more.errors
        # the policy is fixed: the next expiry deletes, and the state clears by itself
        auth_moto.set_policy(user, s3_policy())
        passed = await rt.retention.run_pass(now_ms=later)
        assert passed.expired
        assert _refused(rt, "denied", "delete") == 0
        assert rt.access is not None and rt.access.refusals == ()
        assert health(rt.dispatcher, clock.now_ms(), access=rt.access).reason.startswith("running")
        assert any("cold store access restored" in r.getMessage() for r in caplog.records)


async def test_a_policy_changed_under_a_running_sidecar_stops_tiering_until_it_is_fixed(
    auth_moto: AuthMoto,
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user, key = auth_moto.new_user(s3_policy())
    _use(monkeypatch, key)
    settings = _settings(auth_moto, store, tmp_path)
    clock = VirtualClock()
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        caplog.clear()
        auth_moto.set_policy(user, s3_policy("s3:PutObject"))
        for _ in range(3):  # three ticks, every queue refused: one ERROR line
            report = await rt.dispatcher.tick(flush=True)
            assert report.segments == 0 and report.errors
        errors = _errors(caplog)
        assert len(errors) == 1, errors
        assert "access denied: write of" in errors[0] and "s3:PutObject" in errors[0]
        assert _refused(rt, "denied", "write") == 1
        state = health(rt.dispatcher, clock.now_ms(), access=rt.access)
        assert not state.ok and "tiering stopped" in state.reason, state
        assert _status(settings, capsys).startswith(
            "the cold store refuses the sidecar: cold store s3://"
        )
        auth_moto.set_policy(user, s3_policy())  # fixed: the next tick tiers
        resumed = await rt.dispatcher.catch_up()
        assert resumed.segments > 1 and not resumed.errors
        assert _refused(rt, "denied", "write") == 0
        assert health(rt.dispatcher, clock.now_ms(), access=rt.access).ok
        assert "refuses" not in _status(settings, capsys)
