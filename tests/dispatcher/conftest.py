"""Fixtures the dispatcher's tests share."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.moto import S3Bucket
from tests.support.sidecar.settings import put_in_force
from tests.support.stores.retention import retention_settings
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.tiering.batch.collect import MIN_GRACE_MS, collect_batches
from tieredstore.hot.synth import SynthSpec, synthesize

#: ``await tier_expiring(tmp_path, clock)``: see :func:`tier_expiring`.
TierExpiring = Callable[[Path, VirtualClock], Coroutine[Any, Any, None]]


@pytest.fixture
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A synthetic broker store at ``tmp_path / "store"``, written from the test
    module's ``SPEC`` (a :class:`~tieredstore.hot.synth.SynthSpec`)."""
    spec = request.module.SPEC
    assert isinstance(spec, SynthSpec), f"{request.module.__name__} defines no SPEC"
    return synthesize(tmp_path / "store", spec).root


async def _tier_expiring(tmp_path: Path, clock: VirtualClock) -> None:
    async with open_runtime(retention_settings(tmp_path), clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert not (await rt.dispatcher.catch_up()).errors
        # With batching on (TS_TEST_BATCHING), each queue's tail is a batch slice, which
        # retention never expires nor purges, nor a segment over a slice still in a
        # batch: compacting the slices now (due at once), then deleting their batches
        # (a collection past the grace) makes the retention tests start from per-queue
        # segments only, in both modes.
        put_in_force(rt.in_force, tiering__compact_after=1e-6)
        assert not (await rt.compactor.run_pass()).problems
        if rt.settings.tiering.batching:
            collected = await collect_batches(
                rt.compactor.keys, rt.catalogue,
                now_ms=clock.now_ms() + MIN_GRACE_MS, grace_ms=MIN_GRACE_MS,
            )  # fmt: skip
            assert not collected.problems
        for q in rt.catalogue.queues.all():
            assert rt.catalogue.slices.of(q.topic, q.queue_id) == []
            assert len(rt.catalogue.segments.of(q.topic, q.queue_id)) >= 3


@pytest.fixture(scope="session")
def tier_expiring() -> TierExpiring:
    """Tier the retention tests' store (:mod:`tests.support.stores.retention`, written at
    ``tmp_path / "store"``) completely with the real sidecar runtime at ``clock``'s time,
    in several segments per queue. A fixture, not test support: it runs the CLI's
    runtime, which ``tests.support`` (core layer) never imports."""
    return _tier_expiring


@dataclass
class Cold:
    """The cold store under test, reached around tieredstore (POSIX files or moto)."""

    url: str
    root: Path | None = None
    bucket: S3Bucket | None = None
    prefix: str = ""

    def listing(self) -> list[str]:
        if self.root is not None:
            return sorted(
                str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file()
            )
        assert self.bucket is not None
        pages = self.bucket.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket.name, Prefix=self.prefix
        )
        return sorted(o["Key"][len(self.prefix) :] for p in pages for o in p.get("Contents", []))

    def read(self, key: str) -> bytes:
        if self.root is not None:
            return (self.root / key).read_bytes()
        assert self.bucket is not None
        obj = self.bucket.client.get_object(Bucket=self.bucket.name, Key=self.prefix + key)
        return bytes(obj["Body"].read())

    def put(self, key: str, data: bytes | None) -> None:
        """Write ``data`` at ``key``, or delete it (None)."""
        if self.root is not None:
            path = self.root / key
            path.unlink() if data is None else path.write_bytes(data)
            return
        assert self.bucket is not None
        if data is None:
            self.bucket.client.delete_object(Bucket=self.bucket.name, Key=self.prefix + key)
        else:
            self.bucket.client.put_object(Bucket=self.bucket.name, Key=self.prefix + key, Body=data)


@pytest.fixture(params=["posix", pytest.param("s3", marks=pytest.mark.s3)])
def cold(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cold]:
    if request.param == "posix":
        yield Cold(str(tmp_path / "cold"), root=tmp_path / "cold")
        return
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    mp: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    mp.setenv("TIEREDSTORE_COLD_ENDPOINT_URL", bucket.endpoint_url)
    yield Cold(f"{bucket.url}/tiered", bucket=bucket, prefix="tiered/")
