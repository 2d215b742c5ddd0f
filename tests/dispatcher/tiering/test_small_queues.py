"""A catch-up of 1,024 small queues writes exactly the per-record reference's bytes.

The row of issue 48 in miniature: 16 topics of 64 queues, 100-byte bodies, a few
records per queue interleaved in the commitlog, tiered by ``run --once``'s catch-up into
batch objects (batching on, its default). The planning reads each consume queue once
(``HotStore.queue_units``) and the pass merges every queue's records with one sort; the
reference knows neither: each committed link's COMMIT_LOG bytes must equal the hot
records of its offsets read one by one and rewritten for cold
(:func:`tests.support.stores.oracle.rewrite_records`, bytes [28, 36) included), its
CONSUME_QUEUE units and store-time bounds must be theirs, and every queue must be
covered from its hot min to its hot max.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tests.support.stores.oracle import rewrite_records
from tieredstore.backends.memory import MemoryBackend
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.history import EntryKind, span_bytes
from tieredstore.cold.segment import verify_segment
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize

SPEC = SynthSpec(
    topics=16, queues=64, messages=9_000, body_min=100, body_max=100,
    commitlog_file_size=256 << 10, compress_over=0, seed=48,
)  # fmt: skip


@pytest.mark.slow
async def test_a_catch_up_of_a_thousand_small_queues_writes_the_reference_bytes(
    tmp_path: Path,
) -> None:
    synthesize(tmp_path / "store", SPEC)
    hot = HotStore(tmp_path / "store")
    settings = settings_for(
        tmp_path / "store", "memory://small-queues", tmp_path / "state",
        tiering__guard="none", tiering__segment_max_bytes="64M",
    )  # fmt: skip
    backend = MemoryBackend("small-queues")
    async with open_runtime(settings, clock=VirtualClock(), backend=backend) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        assert not report.errors
    cold = await assert_cold_matches_hot(backend, hot, CLUSTER, BROKER)
    assert len(cold) == 1024
    slices = 0
    for queue, history in cold.items():
        for link in history.manifests:
            slices += link.kind is EntryKind.SLICE
            units = hot.read_units(queue.topic, queue.queue_id, link.start_offset, link.end_offset)
            records = hot.read_records_bytes(units["commitlog_offset"], units["size"])
            want = rewrite_records(
                records, units["size"], start_offset=link.start_offset, cold_base=link.cl_base,
                where=lambda q: f"queue offset {q}",
            )  # fmt: skip
            got = await span_bytes(backend, link.commit_log)
            assert got == want.data, (queue, link.start_offset)
            cq = verify_segment(link, got, await span_bytes(backend, link.consume_queue))
            assert np.array_equal(cq["size"], units["size"])
            bounds = (link.min_store_timestamp, link.max_store_timestamp)
            assert bounds == (want.min_store_timestamp, want.max_store_timestamp)
    assert slices >= 1024  # the small segments went into batch objects
