"""Offline conformance: the committed golden store, written by a real RocketMQ broker.

``tests/data/golden_store/`` is a store a RocketMQ 5.3 broker wrote (regenerate with
``python -m tests.support.broker.make_golden``); ``golden_store_manifest.json``
records what was sent and what the broker answered. The same suite as the live broker
tests runs here without Java. The last tests damage a copy of the store or the manifest
and check the suite notices: the conformance checks can fail.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tests.support.broker.conformance import (
    check_messages,
    check_offsets,
    check_records,
    index_store,
)
from tests.support.broker.make_golden import (
    GOLDEN_MANIFEST,
    GOLDEN_STORE,
    KEEP_DIRS,
    KEEP_FILES,
)
from tests.support.broker.manifest import Manifest
from tests.support.broker.rocketmq import BrokerOffsets
from tests.support.broker.suite import ConformanceSuite, StoreView
from tieredstore.errors import CorruptRecordError
from tieredstore.formats.record import MagicCode
from tieredstore.hot.store import HotStore


@pytest.fixture(scope="module")
def golden_manifest() -> Manifest:
    return Manifest.load(GOLDEN_MANIFEST)


@pytest.fixture(scope="module")
def golden_view(golden_manifest: Manifest) -> StoreView:
    store = HotStore(GOLDEN_STORE)
    index = index_store(store, golden_manifest)
    return StoreView(store, golden_manifest, index, clean=True, min_messages=600)


class TestGoldenStore(ConformanceSuite):
    @pytest.fixture
    def view(self, golden_view: StoreView) -> StoreView:
        return golden_view

    def test_holds_only_the_documented_files(self) -> None:
        top = sorted(p.name for p in GOLDEN_STORE.iterdir())
        assert top == sorted({*KEEP_DIRS, *(f.split("/")[0] for f in KEEP_FILES)})
        config = sorted(p.name for p in (GOLDEN_STORE / "config").iterdir())
        assert config == sorted(f.split("/")[1] for f in KEEP_FILES if f.startswith("config/"))


# -- the checks can fail -----------------------------------------------------------------
def test_a_flipped_body_byte_is_caught(tmp_path: Path, golden_view: StoreView) -> None:
    store_dir = tmp_path / "store"
    shutil.copytree(GOLDEN_STORE, store_dir)
    victim = next(loc for loc in golden_view.index.records if len(loc.record.body) > 100)
    rec = victim.record
    # The record ends with the body, the topic (with its length) and the properties.
    topic_len_size = 1 if rec.magic is MagicCode.V1 else 2
    after_body = topic_len_size + len(rec.topic.encode()) + 2 + len(rec.properties_raw)
    body_at = rec.physical_offset + rec.total_size - after_body - len(rec.body) // 2
    files = HotStore(store_dir).commitlog_files()
    f = files.find(body_at)
    assert f is not None
    with f.path.open("r+b") as fh:
        fh.seek(body_at - f.base)
        byte = fh.read(1)
        fh.seek(body_at - f.base)
        fh.write(bytes([byte[0] ^ 0xFF]))
    # read_message refuses the record (or, were it lenient, check_records reports it).
    with pytest.raises((CorruptRecordError, AssertionError), match="CRC"):
        check_records(index_store(HotStore(store_dir), golden_view.manifest))


def test_a_wrong_send_result_is_caught(golden_view: StoreView) -> None:
    first = golden_view.manifest.messages[0]
    wrong = dataclasses.replace(first, queue_offset=first.queue_offset + 1)
    manifest = dataclasses.replace(
        golden_view.manifest, messages=(wrong, *golden_view.manifest.messages[1:])
    )
    with pytest.raises(AssertionError, match="queue offset vs SendResult"):
        check_messages(golden_view.index, manifest)


def test_a_wrong_body_digest_is_caught(golden_view: StoreView) -> None:
    first = golden_view.manifest.messages[0]
    wrong = dataclasses.replace(first, body_sha256="0" * 64)
    manifest = dataclasses.replace(
        golden_view.manifest, messages=(wrong, *golden_view.manifest.messages[1:])
    )
    with pytest.raises(AssertionError, match="decompressed body sha256"):
        check_messages(golden_view.index, manifest)


def test_a_wrong_broker_offset_is_caught(golden_view: StoreView) -> None:
    o = next(o for o in golden_view.manifest.broker_offsets if o.max > 0)
    wrong = BrokerOffsets(o.topic, o.queue_id, o.min, o.max - 1)
    offsets = tuple(wrong if x == o else x for x in golden_view.manifest.broker_offsets)
    manifest = dataclasses.replace(golden_view.manifest, broker_offsets=offsets)
    with pytest.raises(AssertionError, match=r"\[min, max\)"):
        check_offsets(golden_view.store, manifest)
