"""Fixtures of the tiering tests: a tiered store whose newest data sits in batch slices.

A fixture, not test support: it runs the CLI's runtime and writes the catalogue, which
``tests.support`` (core layer) never imports.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.moto import S3Bucket
from tests.support.sidecar.settings import settings_for
from tests.support.stores.batches import rebatch
from tieredstore.backends.base import Backend
from tieredstore.backends.memory import MemoryBackend
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.history import Committed, read_batch, slices_of
from tieredstore.hot.synth import SynthSpec, synthesize

#: Two queues of one topic, cut into segments of about 8 KiB: about a dozen per queue.
BATCHED_SPEC = SynthSpec(topics=1, queues=2, messages=240, body_min=64, body_max=700, seed=11)
TOPIC = "SynthTopic0"


@dataclass
class Batched:
    """The runtime (started, caught up), its clock, and what was moved into batches:
    ``batches`` the batch keys by sequence, ``slices`` each queue's slice links in order."""

    rt: Runtime
    clock: VirtualClock
    batches: list[str] = field(default_factory=list)
    slices: dict[int, list[Committed]] = field(default_factory=dict)


#: ``async with batched("SSgS", cold=...) as b``: see :func:`batched`.
OpenBatched = Callable[..., AbstractAsyncContextManager[Batched]]


async def _to_slices(rt: Runtime, kinds: str, first_sequence: int, out: Batched) -> None:
    """Turn each queue's last ``len(kinds)`` segments into batch slices where ``kinds``
    says ``S`` (one batch per position, sequence ``first_sequence + position``, holding
    that segment of every queue) and keep them as segments where it says ``g``; then
    the catalogue forgets those segments and commits them again, slices and segments, in
    offset order."""
    catalogue, backend = rt.catalogue, rt.backend
    queues = sorted((q.topic, q.queue_id) for q in catalogue.queues.all())
    tails = {q: catalogue.segments.of(*q)[-len(kinds) :] for q in queues}
    for q in queues:
        catalogue.segments.truncate(*q, tails[q][0].start_offset)
    for pos, kind in enumerate(kinds):
        manifests = [tails[q][pos].manifest for q in queues]
        if kind == "g":
            for m in manifests:
                catalogue.segments.commit(m)
            continue
        key = await rebatch(backend, manifests, sequence=first_sequence + pos)
        links = slices_of(await read_batch(backend, key, await backend.size(key)))
        for result in catalogue.slices.commit_batch(links):
            assert not isinstance(result, Exception), result
        out.batches.append(key)
        for link in links:
            out.slices.setdefault(link.queue_id, []).append(link)


@pytest.fixture
def batched(tmp_path: Path, request: pytest.FixtureRequest) -> OpenBatched:
    """Open a runtime over :data:`BATCHED_SPEC` tiered in full (segments of 8 KiB), the
    last segments of each queue moved into batches (``kinds``, :func:`_to_slices`).

    ``cold``: ``"memory"``, ``"posix"`` or ``"s3"`` (a moto bucket: mark the test
    ``s3``); ``wrap`` wraps the memory backend the
    runtime uses (a backend that fails on cue); ``first_sequence``: the first batch's."""

    @asynccontextmanager
    async def open_batched(
        kinds: str = "SSSS",
        *,
        cold: str = "memory",
        wrap: Callable[[Backend], Backend] | None = None,
        first_sequence: int = 0,
    ) -> AsyncIterator[Batched]:
        synthesize(tmp_path / "store", BATCHED_SPEC)
        name = f"compaction-{uuid.uuid4().hex}"
        url = str(tmp_path / "cold") if cold == "posix" else f"memory://{name}"
        extra: dict[str, object] = {}
        if cold == "s3":
            bucket: S3Bucket = request.getfixturevalue("s3_bucket")
            url, extra = f"{bucket.url}/compaction", {"cold__endpoint_url": bucket.endpoint_url}
        # Batching off: the fixture writes the batches itself, at the sequences it names.
        settings = settings_for(
            tmp_path / "store", url, tmp_path / "state", tiering__segment_max_bytes="8K",
            tiering__batching=False, **extra,
        )  # fmt: skip
        backend = wrap(MemoryBackend(name)) if wrap else None
        clock = VirtualClock()
        async with open_runtime(settings, clock=clock, backend=backend) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            assert not (await rt.dispatcher.catch_up()).errors
            out = Batched(rt, clock)
            await _to_slices(rt, kinds, first_sequence, out)
            yield out

    return open_batched
