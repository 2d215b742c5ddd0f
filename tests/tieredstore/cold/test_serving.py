"""The read service: raw cold records for the broker plugin, over the read API.

Stores are tiered by the real dispatcher; every answer is decoded here with ``struct``
from the wire format of ``docs/serving.md`` (not with the sidecar's own code) and
compared with the hot store: the records byte for byte but for bytes [28, 36) (the cold
physicalOffset), and the units' sizes and tagsCodes.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.support.moto import S3Bucket
from tests.support.serving_reference import reference_answer
from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tieredstore.backends import open_backend
from tieredstore.backends.counting import CountingBackend
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.read_api import build_read_app
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.history import load_history
from tieredstore.cold.layout import lease_key
from tieredstore.cold.reader import BoundaryType, ColdReader
from tieredstore.cold.serving import ServingReader, read_raw
from tieredstore.dispatcher.lease.lease import LeaseRecord
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.settings.loader import Settings

SPEC = SynthSpec(topics=1, queues=2, messages=400, body_max=3000, compress_over=1500, seed=7)
TOPIC = "SynthTopic0"
Client = TestClient[web.Request, web.Application]


@dataclass(frozen=True)
class Records:
    cold_min: int
    cold_commit: int
    offset: int
    units: list[tuple[int, int, int]]
    records: list[bytes]


def parse_records(body: bytes) -> Records:
    """A ``TSR1`` answer, decoded by the documented layout."""
    magic, cold_min, cold_commit, offset, count = struct.unpack_from(">4sqqqi", body)
    assert magic == b"TSR1"
    pos = 32
    units = [struct.unpack_from(">qiq", body, pos + 20 * i) for i in range(count)]
    pos += 20 * count
    records = []
    for _cold, size, _tags in units:
        records.append(body[pos : pos + size])
        pos += size
    assert pos == len(body), "an answer holds exactly its records"
    return Records(cold_min, cold_commit, offset, units, records)


async def tier(settings: Settings) -> None:
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        assert not report.errors


@asynccontextmanager
async def serving(settings: Settings, max_count: int = 1000) -> AsyncIterator[Client]:
    """A read API over a runtime that never takes the writer lease (a standby)."""
    async with (
        open_runtime(settings) as rt,
        TestClient(TestServer(build_read_app(rt, max_count=max_count))) as client,
    ):
        yield client


async def drain(client: Client, queue: int, start: int, count: int, size: int) -> Records:
    """Every record from ``start`` to cold commit, in answers of at most count/size."""
    units: list[tuple[int, int, int]] = []
    records: list[bytes] = []
    offset = start
    while True:
        reply = await client.get(
            f"/v1/cold/records?topic={TOPIC}&queue={queue}&offset={offset}"
            f"&maxCount={count}&maxBytes={size}"
        )
        if reply.status == 404:
            break
        assert reply.status == 200, await reply.text()
        got = parse_records(await reply.read())
        assert got.offset == offset and 1 <= len(got.units) <= count
        assert len(got.units) == 1 or sum(u[1] for u in got.units) <= size
        units += got.units
        records += got.records
        offset += len(got.units)
    return Records(got.cold_min, got.cold_commit, start, units, records)


def assert_matches_hot(hot: HotStore, queue: int, got: Records) -> None:
    """Records equal the hot ones but for the physicalOffset, which is the unit's."""
    end = got.offset + len(got.units)
    hot_units = hot.read_units(TOPIC, queue, got.offset, end).tolist()
    for i, ((cold, size, tags), record) in enumerate(zip(got.units, got.records, strict=True)):
        hot_cl, hot_size, hot_tags = hot_units[i]
        assert (size, tags) == (hot_size, hot_tags)
        expected = hot.read_record_bytes(hot_cl, hot_size)
        assert record[:28] == expected[:28] and record[36:] == expected[36:]
        assert struct.unpack_from(">q", record, 28)[0] == cold
        assert struct.unpack_from(">q", record, 20)[0] == got.offset + i


@pytest.fixture(params=["memory", "posix"])
def cold_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    reset_memory_stores()
    return "memory://serving" if request.param == "memory" else str(tmp_path / "cold")


async def test_records_are_the_hot_records_across_segments(tmp_path: Path, cold_url: str) -> None:
    synthesize(tmp_path / "store", SPEC)
    settings = settings_for(tmp_path / "store", cold_url, tmp_path / "state",
                            tiering__guard="none", reads__part_bytes="8K")  # fmt: skip
    await tier(settings)
    hot = HotStore(tmp_path / "store")
    # Another sidecar holds the writer lease: reads need none.
    async with open_backend(cold_url) as backend:
        now = 1 << 41
        held = LeaseRecord("other-sidecar@elsewhere", 3, now + 600_000, now)
        await backend.write(lease_key(CLUSTER, BROKER), held.to_json())
    standby = settings_for(tmp_path / "store", cold_url, tmp_path / "standby",
                           reads__part_bytes="8K")  # fmt: skip
    async with serving(standby) as client:
        for queue in (0, 1):
            got = await drain(client, queue, 0, 37, 20_000)
            count = hot.queue_range(TOPIC, queue).max
            assert (got.cold_min, got.cold_commit, len(got.units)) == (0, count, count)
            assert_matches_hot(hot, queue, got)
            # From the middle, one record per answer: the same bytes.
            tail = await drain(client, queue, count - 5, 1, 1)
            assert tail.records == got.records[-5:]


async def test_limits_range_and_offset_by_time(tmp_path: Path) -> None:
    reset_memory_stores()
    synthesize(tmp_path / "store", SPEC)
    settings = settings_for(tmp_path / "store", "memory://limits", tmp_path / "state",
                            tiering__guard="none")  # fmt: skip
    await tier(settings)
    hot = HotStore(tmp_path / "store")
    sizes = [int(u[1]) for u in hot.read_units(TOPIC, 0, 10, 20).tolist()]
    n = hot.queue_range(TOPIC, 0).max
    async with serving(settings, max_count=50) as client:

        async def records(query: str) -> Records:
            reply = await client.get(f"/v1/cold/records?topic={TOPIC}&queue=0&{query}")
            assert reply.status == 200, await reply.text()
            return parse_records(await reply.read())

        # maxBytes: stop before the record that would pass it; one record at least.
        assert len((await records(f"offset=10&maxBytes={sum(sizes[:3])}")).units) == 3
        assert len((await records(f"offset=10&maxBytes={sum(sizes[:3]) - 1}")).units) == 2
        assert len((await records("offset=10&maxBytes=1")).units) == 1
        assert len((await records("offset=10&maxCount=4")).units) == 4
        assert len((await records(f"offset={n - 5}&maxCount=50")).units) == 5  # cold commit

        reply = await client.get(f"/v1/cold/range?topic={TOPIC}&queue=0")
        magic, lo, hi, earliest = struct.unpack(">4sqqq", await reply.read())
        first = hot.read_message(TOPIC, 0, 0)
        assert (magic, lo, hi, earliest) == (b"TSQ1", 0, n, first.store_timestamp)
        reply = await client.get("/v1/cold/range?topic=NoSuchTopic&queue=0")
        assert struct.unpack(">4sqqq", await reply.read()) == (b"TSQ1", 0, 0, 0)

        ts = hot.read_message(TOPIC, 0, 123).store_timestamp
        for boundary in BoundaryType:
            reply = await client.get(
                f"/v1/cold/offset?topic={TOPIC}&queue=0&timestamp={ts}&boundary={boundary.value}"
            )
            magic, offset, lo, hi = struct.unpack(">4sqqq", await reply.read())
            async with open_backend("memory://limits") as backend:
                expected = await ColdReader(backend, CLUSTER, BROKER).offset_by_time(
                    TOPIC, 0, ts, boundary
                )
            assert (magic, offset, lo, hi) == (b"TSO1", expected, 0, n)
            assert hot.read_message(TOPIC, 0, offset).store_timestamp == ts

        errors = {
            f"/v1/cold/records?topic={TOPIC}&queue=0&offset={n}": 404,  # at cold commit
            f"/v1/cold/records?topic={TOPIC}&queue=0&offset=0&maxCount=0": 400,
            f"/v1/cold/records?topic={TOPIC}&queue=0&offset=0&maxCount=51": 400,
            f"/v1/cold/records?topic={TOPIC}&queue=0": 400,
            "/v1/cold/offset?topic=NoSuchTopic&queue=0&timestamp=1": 404,
            f"/v1/cold/offset?topic={TOPIC}&queue=0&timestamp=1&boundary=mid": 400,
            "/v1/cold/range?topic=a/b&queue=0": 400,
        }
        for url, status in errors.items():
            reply = await client.get(url)
            assert reply.status == status, (url, await reply.text())
            assert "error" in await reply.json()


async def test_answers_over_http_are_the_reference_bytes(tmp_path: Path, cold_url: str) -> None:
    """Written as views, an answer is still byte for byte the old read service's
    (:mod:`tests.support.serving_reference`), across segments and batch slices."""
    synthesize(tmp_path / "store", SPEC)
    settings = settings_for(tmp_path / "store", cold_url, tmp_path / "state",
                            tiering__guard="none", reads__part_bytes="5K")  # fmt: skip
    await tier(settings)
    async with serving(settings) as client, open_backend(cold_url) as backend:
        plain = ColdReader(backend, CLUSTER, BROKER)
        for queue in (0, 1):
            end = (await plain.range(TOPIC, queue)).commit
            for offset, count, size in [(0, 256, 2 << 20), (1, 37, 20_000), (end - 3, 32, 1),
                                        (end // 2, 1000, 16 << 20)]:  # fmt: skip
                reply = await client.get(
                    f"/v1/cold/records?topic={TOPIC}&queue={queue}&offset={offset}"
                    f"&maxCount={count}&maxBytes={size}"
                )
                assert reply.status == 200, await reply.text()
                assert reply.content_length == len(body := await reply.read())
                expected = await reference_answer(plain, TOPIC, queue, offset, count, size)
                assert body == expected, (queue, offset, count, size)


@pytest.mark.slow
async def test_records_over_s3(tmp_path: Path, s3_bucket: S3Bucket) -> None:
    synthesize(tmp_path / "store", SPEC)
    url = f"{s3_bucket.url}/serving"
    settings = settings_for(tmp_path / "store", url, tmp_path / "state", tiering__guard="none",
                            cold__endpoint_url=s3_bucket.endpoint_url,
                            reads__part_bytes="16K", reads__cache_bytes="48K")  # fmt: skip
    await tier(settings)
    hot = HotStore(tmp_path / "store")
    async with serving(settings) as client:
        got = await drain(client, 1, 0, 64, 64_000)
        assert len(got.units) == got.cold_commit == hot.queue_range(TOPIC, 1).max
        assert_matches_hot(hot, 1, got)


async def test_a_record_that_does_not_match_its_unit_is_a_500_naming_it(tmp_path: Path) -> None:
    reset_memory_stores()
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=30, seed=4))
    settings = settings_for(tmp_path / "store", "memory://damaged", tmp_path / "state",
                            tiering__guard="none")  # fmt: skip
    await tier(settings)
    async with open_backend("memory://damaged") as backend:
        # Offset 0's commit log: a segment's COMMIT_LOG object, or a batch object's span.
        link = (await load_history(backend, CLUSTER, BROKER)).links()[0]
        assert link.start_offset == 0
        key, at = link.commit_log.key, link.commit_log.at
        data = bytearray(await backend.read(key))
        data[at + 27] ^= 1  # the first record's queueOffset field
        await backend.write(key, bytes(data))
    async with serving(settings) as client:
        reply = await client.get(f"/v1/cold/records?topic={TOPIC}&queue=0&offset=0")
        assert reply.status == 500
        error = (await reply.json())["error"]
        assert "queueOffset" in error and key in error


async def test_the_listing_is_reused_and_listed_again_past_its_end(tmp_path: Path) -> None:
    reset_memory_stores()
    store = SyntheticStore.create(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=0))
    store.append(60)
    settings = settings_for(tmp_path / "store", "memory://listing", tmp_path / "state",
                            tiering__guard="none")  # fmt: skip
    await tier(settings)
    lists: list[str] = []
    now = [0.0]
    async with open_backend("memory://listing") as inner:
        backend = CountingBackend(inner, on_request=lists.append, on_bytes=lambda _op, _n: None)
        reader = ServingReader(backend, CLUSTER, BROKER, listing_ttl=1.0, clock=lambda: now[0])
        first = await read_raw(reader, TOPIC, 0, 0, 10, 1 << 20)
        again = await read_raw(reader, TOPIC, 0, 10, 10, 1 << 20)
        # One listing of a queue is two LISTs: its MANIFEST/ and the broker's _batches/.
        assert (len(first), len(again), lists.count("list")) == (10, 10, 2)
        store.append(40)
        await tier(settings)
        # Past the cached listing's end: listed again at once, not after the TTL (the
        # miss also lists the queue's loss records, to name one if it covers the offset).
        late = await read_raw(reader, TOPIC, 0, 60, 50, 1 << 20)
        assert (late.offset, len(late), lists.count("list")) == (60, 40, 5)
        await read_raw(reader, TOPIC, 0, 0, 1, 1 << 20)
        assert lists.count("list") == 5
        now[0] = 5.0  # the TTL passed: the next read lists again
        await read_raw(reader, TOPIC, 0, 0, 1, 1 << 20)
        assert lists.count("list") == 7
