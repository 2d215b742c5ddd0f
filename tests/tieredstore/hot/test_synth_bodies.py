"""Synthetic bodies: hex unchanged, JSON events exact in size, valid and deterministic."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import zlib
from pathlib import Path

import pytest

from tieredstore.errors import ConfigError
from tieredstore.formats.record import SysFlag
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, generate_messages, synthesize
from tieredstore.hot.synth_bodies import JSON_MIN_SIZE, hex_body, json_body

JSON_SPEC = SynthSpec(
    topics=2, queues=2, messages=200, body_min=2, body_max=9000, compress_over=4096,
    commitlog_file_size=256 << 10, seed=11, body_kind="json",
)  # fmt: skip


def _plain(body: bytes, sys_flag: int) -> bytes:
    return zlib.decompress(body) if sys_flag & SysFlag.COMPRESSED else body


def test_hex_bodies_are_unchanged_byte_for_byte() -> None:
    # The digest of the default spec's first 200 bodies before body kinds existed.
    spec = SynthSpec(messages=200, body_max=6000, seed=3)
    digest = hashlib.sha256(b"".join(p.body for p in generate_messages(spec))).hexdigest()
    assert digest == "2d5551bd7a972f2b9cfabda4d1c4fe0e0b38d602eb90f319a1f90e6b77189ac1"
    assert hex_body(random.Random(0), 7) == random.Random(0).randbytes(4).hex()[:7].encode()


@pytest.mark.parametrize("size", [*range(JSON_MIN_SIZE, 140), 333, 1000, 4096, 20_000])
def test_a_json_body_is_exactly_its_size_and_parses(size: int) -> None:
    for seed in range(8):
        body = json_body(random.Random(seed), size)
        assert len(body) == size
        doc = json.loads(body)
        assert isinstance(doc, dict)
        assert body.isascii()


def test_json_bodies_look_like_events() -> None:
    docs = [json.loads(json_body(random.Random(seed), 1500)) for seed in range(40)]
    kinds = {d["eventType"].split(".")[0] for d in docs}
    assert kinds == {"order", "user"}
    for d in docs:
        assert isinstance(d["note"], str) and isinstance(d["userId"], int)
        if d["eventType"].startswith("order."):
            assert d["items"] and {"sku", "title", "qty", "price"} <= set(d["items"][0])
            assert isinstance(d["shipping"], dict) and "." in d["amount"]
        else:
            assert d["pages"] and isinstance(d["device"], dict) and d["result"]


def test_json_bodies_are_deterministic_from_the_seed() -> None:
    spec = dataclasses.replace(JSON_SPEC, messages=60)
    first = [p.body for p in generate_messages(spec)]
    assert first == [p.body for p in generate_messages(spec)]
    other = dataclasses.replace(spec, seed=12)
    assert first != [p.body for p in generate_messages(other)]


def test_too_small_or_unknown_bodies_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 bytes"):
        json_body(random.Random(0), 1)
    with pytest.raises(ConfigError, match="JSON bodies need at least 2 bytes"):
        SynthSpec(body_min=1, body_kind="json").validate()
    with pytest.raises(ConfigError, match="unknown body kind 'xml'"):
        SynthSpec(body_kind="xml").validate()


def test_a_json_store_reads_back_with_producer_compressed_bodies(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "s", JSON_SPEC)
    plans = list(generate_messages(JSON_SPEC))
    scanned = list(HotStore(store.root).scan_commitlog())  # body CRCs checked as it reads
    assert [s.record.body for s in scanned] == [p.body for p in plans]
    compressed = [s.record for s in scanned if s.record.compressed]
    assert compressed and len(compressed) < len(scanned)
    for plan, s in zip(plans, scanned, strict=True):
        plain = _plain(s.record.body, s.record.sys_flag)
        assert len(plain) >= JSON_SPEC.body_min and isinstance(json.loads(plain), dict)
        assert s.record.compressed == (len(plain) > JSON_SPEC.compress_over)
        assert s.record.sys_flag == plan.sys_flag
    assert all(s.record.decompressed_body() == zlib.decompress(s.record.body) for s in scanned
               if s.record.compressed)  # fmt: skip
