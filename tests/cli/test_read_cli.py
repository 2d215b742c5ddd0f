"""``tieredstore read``: the command line over ColdReader, on a POSIX cold store."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path

import pytest

from tests.fixtures_sidecar import Tier
from tests.support.broker.make_golden import GOLDEN_MANIFEST, GOLDEN_STORE
from tests.support.broker.manifest import Manifest as GoldenManifest
from tests.support.broker.traffic import Kind
from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.cli.main import main
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize

SPEC = SynthSpec(topics=1, queues=2, messages=600, interval_ms=2, compress_over=800, seed=21)
TOPIC = SPEC.topic_names()[0]


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory, tier: Tier) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("read-cli")
    synthesize(root / "store", SPEC)
    asyncio.run(tier(root / "store", str(root / "cold"), root / "state"))
    return root / "store", root / "cold"


def _read(cold: Path, *args: str) -> list[str]:
    return ["read", "--cold", str(cold), "--cluster", CLUSTER, "--broker", BROKER, *args]


def _json_lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_reads_messages_as_json_lines(
    tiered: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    store, cold = tiered
    code = main(_read(cold, "--topic", TOPIC, "--queue", "1", "--offset", "5", "--count", "3"))
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    docs = _json_lines(out)
    assert [d["queueOffset"] for d in docs] == [5, 6, 7]
    hot = HotStore(store)
    for d in docs:
        record = hot.read_message(TOPIC, 1, int(str(d["queueOffset"])))
        assert d["storeTimestamp"] == record.store_timestamp
        assert d["msgId"] == record.properties["UNIQ_KEY"]
        assert d["body"] == record.decompressed_body().decode()
        assert d["properties"] == record.properties
        assert d["keys"] == record.keys and d["tags"] == record.tags


def test_a_read_stops_at_cold_commit(
    tiered: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    store, cold = tiered
    hot_max = HotStore(store).queue_range(TOPIC, 0).max
    code = main(_read(cold, "--topic", TOPIC, "--queue", "0", "--offset", str(hot_max - 2),
                      "--count", "100"))  # fmt: skip
    assert code == 0
    assert [d["queueOffset"] for d in _json_lines(capsys.readouterr().out)] == [
        hot_max - 2,
        hot_max - 1,
    ]


def test_reads_by_timestamp_at_both_boundaries(
    tiered: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    store, cold = tiered
    hot = HotStore(store)
    record = hot.read_message(TOPIC, 0, 10)
    assert hot.read_message(TOPIC, 0, 9).store_timestamp < record.store_timestamp - 1
    cases = [
        (record.store_timestamp, "lower", 10),
        (record.store_timestamp, "upper", 10),
        (record.store_timestamp - 1, "lower", 10),  # between 9 and 10: next one
        (record.store_timestamp - 1, "upper", 9),  # ... and the previous one
        (0, "lower", 0),  # older than everything: cold min
        (0, "upper", 0),
    ]
    for ts, boundary, offset in cases:
        code = main(_read(cold, "--topic", TOPIC, "--queue", "0", "--timestamp", str(ts),
                          "--boundary", boundary))  # fmt: skip
        assert code == 0
        (doc,) = _json_lines(capsys.readouterr().out)
        assert doc["queueOffset"] == offset, (ts, boundary)


def test_text_format(tiered: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    store, cold = tiered
    record = HotStore(store).read_message(TOPIC, 1, 0)
    code = main(_read(cold, "--topic", TOPIC, "--queue", "1", "--offset", "0", "--format", "text"))
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith(f"{TOPIC}/1 offset 0  msgId {record.properties['UNIQ_KEY']}")
    assert f"tags {record.tags}" in out
    assert f"body (utf-8, {len(record.decompressed_body())} bytes): " in out


def test_settings_from_a_config_file_and_the_environment(
    tiered: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, cold = tiered
    cfg = tmp_path / "sidecar.toml"
    cfg.write_text(f'[cold]\nurl = "{cold}"\ncluster = "{CLUSTER}"\n')
    monkeypatch.setenv("TIEREDSTORE_COLD_BROKER", BROKER)
    code = main(["read", "--config", str(cfg), "--topic", TOPIC, "--queue", "0", "--offset", "1"])
    assert code == 0
    assert _json_lines(capsys.readouterr().out)[0]["queueOffset"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--offset", "100000"],
            "queue offset 100000 of {topic}/0 is outside what cold holds [0, ",
        ),
        (["--timestamp", "9999999999999"], "every message of {topic}/0 in cold [0, "),
    ],
)
def test_offsets_outside_cold_are_one_line_errors(
    tiered: tuple[Path, Path], capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    _, cold = tiered
    code = main(_read(cold, "--topic", TOPIC, "--queue", "0", *args))
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.startswith("tieredstore read: " + message.format(topic=TOPIC))
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [
        [],  # neither --offset nor --timestamp
        ["--offset", "1", "--timestamp", "5"],
        ["--offset", "-1"],
        ["--offset", "1", "--count", "0"],
    ],
)
def test_bad_usage_exits_3(
    tiered: tuple[Path, Path], capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    _, cold = tiered
    with pytest.raises(SystemExit) as info:
        main(_read(cold, "--topic", TOPIC, "--queue", "0", *args))
    assert info.value.code == 3
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("tieredstore read: error:")


@pytest.mark.slow
def test_the_golden_store_reads_back_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tier: Tier
) -> None:
    golden = GoldenManifest.load(GOLDEN_MANIFEST)
    asyncio.run(tier(GOLDEN_STORE, str(tmp_path / "cold"), tmp_path / "state"))
    sent = [m for m in golden.messages if m.kind is Kind.NORMAL]
    queues = {(m.topic, m.queue_id) for m in sent}
    compressed = 0
    for topic, queue_id in sorted(queues):
        expected = sorted(
            (m for m in sent if (m.topic, m.queue_id) == (topic, queue_id)),
            key=lambda m: m.queue_offset,
        )
        first = expected[0].queue_offset
        code = main(_read(tmp_path / "cold", "--topic", topic, "--queue", str(queue_id),
                          "--offset", str(first), "--count", "1000"))  # fmt: skip
        assert code == 0
        docs = {int(str(d["queueOffset"])): d for d in _json_lines(capsys.readouterr().out)}
        for m in expected:
            doc = docs[m.queue_offset]
            assert doc["msgId"] == m.msg_id
            text = str(doc["body"])
            body = text.encode() if doc["bodyEncoding"] == "utf-8" else base64.b64decode(text)
            assert hashlib.sha256(body).hexdigest() == m.body_sha256
            assert doc["tags"] == m.tags
            assert doc["keys"] == list(m.keys)
            # As a consumer sees it: a decompressed body comes with the COMPRESSED bit
            # cleared, the compression-type bits kept (RocketMQ's MessageDecoder).
            stored = HotStore(GOLDEN_STORE).read_message(topic, queue_id, m.queue_offset)
            assert doc["sysFlag"] == stored.sys_flag & ~1
            if stored.compressed:
                assert stored.sys_flag & 1 and doc["compression"] != "NONE"
                compressed += 1
    assert compressed > 0  # the golden store holds zlib bodies (sysFlag 769 -> 768)
