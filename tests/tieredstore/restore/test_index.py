"""The index writer: Java's key hash, slot chains, file rolling, headers.

Lookups here follow the broker's ``IndexService#queryOffset`` and
``IndexFile#selectPhyOffset`` step by step over the bytes written.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.support.broker.key_index import HEADER, java_abs, lookup
from tieredstore.formats.record import MessageRecord
from tieredstore.formats.tags import java_string_hashcode
from tieredstore.restore.index import (
    IndexGeometry,
    IndexWriter,
    index_hashes,
    index_keys,
    key_hashes,
)


@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=20))
def test_key_hashes_are_javas(strings: list[str]) -> None:
    keys = [s.encode() for s in strings]
    assert key_hashes(keys).tolist() == [java_abs(java_string_hashcode(s)) for s in strings]


@given(st.lists(st.text(st.characters(max_codepoint=127), min_size=1, max_size=40), min_size=1))
def test_ascii_key_hashes_are_javas(strings: list[str]) -> None:
    keys = [s.encode() for s in strings]
    assert key_hashes(keys).tolist() == [java_abs(java_string_hashcode(s)) for s in strings]


def _batch(n: int, topic: str = "Orders") -> tuple[bytearray, np.ndarray, np.ndarray]:
    recs = []
    for i in range(n):
        props = {"UNIQ_KEY": f"U{i:05d}", "KEYS": f"m{i % 7} shared  k{i}"}
        if i % 5 == 0:
            props = {"TAGS": "t"}  # no keys at all
        recs.append(
            MessageRecord.build(
                topic=topic,
                body=b"x" * (i % 13 + 1),
                queue_id=0,
                queue_offset=i,
                physical_offset=0,
                store_timestamp=1_700_000_000_000 + i * 1000,
                properties=props,
            ).encode()
        )
    sizes = np.array([len(r) for r in recs], dtype=np.int64)
    return bytearray(b"".join(recs)), np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes


def test_keys_come_in_broker_order() -> None:
    data, starts, _ = _batch(3)
    rec, keys = index_keys(data, starts)
    assert rec.tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
    assert [k.decode() for k in keys] == [
        "Orders#U00001",
        "Orders#m1",
        "Orders#shared",
        "Orders#k1",
        "Orders#U00002",
        "Orders#m2",
        "Orders#shared",
        "Orders#k2",
    ]


def test_keys_follow_javas_property_parsing() -> None:
    rec = MessageRecord.build(
        topic="T", body=b"x", queue_id=0, queue_offset=0, physical_offset=0, store_timestamp=1
    )
    cases = {
        b"KEYS\x01a b\x02UNIQ_KEY\x01U\x02": ["T#U", "T#a", "T#b"],  # UNIQ_KEY first
        b"KEYS\x01a\x02KEYS\x01b\x02": ["T#b"],  # the later value wins
        b"UNIQ_KEY\x01\x02KEYS\x01\x02": [],  # empty values are dropped
        b"XKEYS\x01a\x02MY_UNIQ_KEY\x01b": [],  # other names
        b"KEYS\x01 a  b \x02": ["T#a", "T#b"],
        b"KEYS\x01\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87": ["T#ключ"],
    }
    for props, want in cases.items():
        data = bytearray(replace(rec, properties_raw=props).encode())
        _, keys = index_keys(data, np.zeros(1, dtype=np.int64))
        assert [k.decode() for k in keys] == want, props


def test_every_key_is_found_across_rolled_files(tmp_path: Path) -> None:
    geo = IndexGeometry(hash_slots=7, max_entries=50)  # tiny: many collisions, many files
    writer = IndexWriter(tmp_path, geo)
    data, starts, _ = _batch(100)
    phys = 10_000 + starts
    stamps = 1_700_000_000_000 + np.arange(100, dtype=np.int64) * 1000
    writer.add(
        data[: int(starts[60])], starts[:60], phys[:60], stamps[:60], floor_ts=int(stamps[0])
    )
    writer.add(
        data[int(starts[60]) :],
        starts[60:] - starts[60],
        phys[60:],
        stamps[60:],
        floor_ts=int(stamps[60]),
    )
    writer.close()
    assert writer.entries == 80 * 4
    assert len(writer.files) == -(-320 // 49)  # 49 keys a file (entry 0 is never used)
    assert [p.stat().st_size for p in sorted(tmp_path.iterdir())] == [geo.file_size] * len(
        writer.files
    )
    for i in range(100):
        want = [] if i % 5 == 0 else [int(phys[i])]
        assert lookup(tmp_path, geo, f"Orders#U{i:05d}") == want
        assert sorted(set(lookup(tmp_path, geo, f"Orders#k{i}"))) == want
    shared = [int(p) for i, p in enumerate(phys) if i % 5]
    assert sorted(lookup(tmp_path, geo, "Orders#shared")) == shared
    # A time window finds only the keys stored inside it (second granularity).
    windowed = lookup(tmp_path, geo, "Orders#shared", int(stamps[30]), int(stamps[39]))
    assert sorted(windowed) == [int(phys[i]) for i in range(30, 40) if i % 5]
    assert lookup(tmp_path, geo, "Other#shared") == []


def test_headers_bound_the_entries(tmp_path: Path) -> None:
    geo = IndexGeometry(hash_slots=11, max_entries=1000)
    writer = IndexWriter(tmp_path, geo)
    data, starts, _ = _batch(20)
    stamps = 1_700_000_000_000 + np.arange(20, dtype=np.int64) * 1000
    writer.add(data, starts, 5_000 + starts, stamps, floor_ts=1_699_999_999_000)
    writer.close()
    (path,) = tmp_path.iterdir()
    b_ts, e_ts, b_phy, e_phy, slots_used, count = HEADER.unpack_from(path.read_bytes(), 0)
    assert (b_ts, e_ts) == (1_699_999_999_000, int(stamps[-1]))
    assert (b_phy, e_phy) == (5_000 + int(starts[1]), 5_000 + int(starts[-1]))
    assert count == 1 + writer.entries
    assert 0 < slots_used <= 11


def _java_properties(text: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties``, line by line."""
    out: dict[str, str] = {}
    index, n = 0, len(text)
    while index < n:
        new = text.find("\x02", index)
        if new < 0:
            new = n
        if new - index >= 3:
            sep = text.find("\x01", index)
            if index < sep < new - 1:
                out[text[index:sep]] = text[sep + 1 : new]
        index = new + 1
    return out


_PIECES = st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "\x01", "\x02", " ", "a", "ü", "k 1", ""])


@given(
    st.lists(
        st.tuples(
            st.lists(_PIECES, max_size=12),
            st.binary(max_size=40),
            st.sampled_from(["T", "Ordnung-ü", "t" * 130]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_keys_and_hashes_match_javas_parsing(records: list[tuple[list[str], bytes, str]]) -> None:
    blobs: list[bytes] = []
    expect: list[tuple[int, str]] = []
    for r, (pieces, body, topic) in enumerate(records):
        props = "".join(pieces)
        record = MessageRecord.build(
            topic=topic,
            body=body or b"\x01\x02",
            queue_id=0,
            queue_offset=r,
            physical_offset=0,
            store_timestamp=1,
        )
        blobs.append(replace(record, properties_raw=props.encode()).encode())
        parsed = _java_properties(props)
        wanted = [parsed["UNIQ_KEY"]] if "UNIQ_KEY" in parsed else []
        wanted += [k for k in parsed.get("KEYS", "").split(" ") if k]
        expect += [(r, f"{topic}#{k}") for k in wanted]
    data = bytearray(b"".join(blobs))
    starts = np.concatenate(([0], np.cumsum([len(b) for b in blobs])[:-1])).astype(np.int64)
    rec, found = index_keys(data, starts)
    assert list(zip(rec.tolist(), [k.decode() for k in found], strict=True)) == expect
    hrec, hashes = index_hashes(data, starts)
    assert hrec.tolist() == rec.tolist()
    assert hashes.tolist() == [java_abs(java_string_hashcode(k)) for _, k in expect]
