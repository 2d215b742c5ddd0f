"""Two sidecars on one broker: one writer at a time, fast hand-over on graceful stop."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.sidecar.process import sidecar_cmd, sidecar_env, start, wait_for_log
from tieredstore.cold.manifest import Manifest
from tieredstore.hot.synth import SynthSpec, synthesize

pytestmark = pytest.mark.slow  # every test here takes over a second: not in make quick

RENEW = {"TIEREDSTORE_LEASE_RENEW_INTERVAL": "1s", "TIEREDSTORE_TIERING_TICK_INTERVAL": "100ms"}


def test_second_sidecar_refused_then_takes_over_fast(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=2, messages=500))
    store, cold = tmp_path / "store", tmp_path / "cold"
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a = start(store, cold, tmp_path / "state-a", log=log_a, **RENEW)
    try:
        wait_for_log(log_a, "lease acquired", a, 60)
        # A second sidecar that must not wait exits at once with a clear message.
        refused = subprocess.run(
            sidecar_cmd(store, cold, tmp_path / "state-b", "--no-wait"),
            env=sidecar_env(**RENEW),
            capture_output=True,
            timeout=60,
        )
        assert refused.returncode == 1
        assert b"holds the writer lease" in refused.stderr
        # One that waits says so, then takes over as soon as A stops gracefully.
        b = start(store, cold, tmp_path / "state-b", log=log_b, **RENEW)
        try:
            wait_for_log(log_b, "waiting", b, 60)
            a.send_signal(signal.SIGTERM)
            assert a.wait(timeout=60) == 0
            assert "lease released" in log_a.read_text()
            wait_for_log(log_b, "lease acquired", b, 5)  # renew interval is 1 s: fast
            assert "epoch 2" in log_b.read_text()
        finally:
            b.send_signal(signal.SIGTERM)
            assert b.wait(timeout=60) == 0
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    epochs = {
        Manifest.from_json(p.read_bytes(), where=str(p)).lease_epoch
        for p in cold.rglob("MANIFEST/*.json")
    }
    assert epochs == {1}  # A tiered everything; B found nothing new but holds epoch 2
