"""The retention tests' store: :data:`SPEC` writes messages one a second from :data:`T0`,
so under a 1 h retention a :class:`~tieredstore.clock.VirtualClock` decides which
segments have expired; :data:`END` is just after the last message's store time."""

from __future__ import annotations

from pathlib import Path

from tests.support.sidecar.settings import settings_for
from tieredstore.hot.synth import SynthSpec
from tieredstore.settings.loader import Settings

__all__ = ["END", "SPEC", "T0", "H", "retention_settings"]

T0 = 1_800_000_000_000
#: An hour, in seconds.
H = 3600.0
SPEC = SynthSpec(
    topics=2,
    queues=2,
    messages=600,
    body_min=200,
    body_max=800,
    start_time=T0,
    interval_ms=1000,
    seed=21,
)
END = T0 + SPEC.messages * 1000  # just after the last store time


def retention_settings(tmp_path: Path, **kw: object) -> Settings:
    """The sidecar's settings for the store at ``tmp_path / "store"`` (cold and state dirs
    beside it): retention 1 h, a lease renewed every 30 min of virtual time, 24 KiB
    segments (several per queue); ``kw`` overrides, as in :func:`settings_for`."""
    values: dict[str, object] = {
        "retention__default": "1h",
        "lease__renew_interval": "30m",
        "tiering__segment_max_bytes": "24K",
    }
    values.update(kw)
    return settings_for(tmp_path / "store", str(tmp_path / "cold"), tmp_path / "state", **values)
