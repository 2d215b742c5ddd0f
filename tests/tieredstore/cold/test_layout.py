"""Cold-store naming: the fixed examples, round trips, and refusal of unsafe names."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tieredstore.cold.layout import (
    MAX_OFFSET,
    MAX_QUEUE_ID,
    ObjectKey,
    QueuePath,
    SegmentKind,
    broker_prefix,
    cluster_dir,
    kind_prefix,
    lease_key,
    object_key,
    object_name,
    parse_object_key,
    quarantine_key,
    quarantine_prefix,
    queue_root,
)
from tieredstore.errors import InvalidNameError

# -- the examples RocketMQ's own tiered store produces (docs/format.md, cold layout) ------


@pytest.mark.parametrize(
    ("base", "name"),
    [
        (0, "cfcd208400000000000000000000"),
        (20, "98f1370800000000000000000020"),
        (1073741824, "952eb02900000000001073741824"),
    ],
)
def test_object_name_examples(base: int, name: str) -> None:
    assert object_name(base) == name


def test_cluster_dir_example() -> None:
    assert cluster_dir("DefaultCluster") == "212d6b50_DefaultCluster"


def test_full_keys() -> None:
    q = QueuePath("DefaultCluster", "broker-a", "TopicTest", 3)
    assert queue_root("DefaultCluster", "broker-a", "TopicTest", 3) == (
        "212d6b50_DefaultCluster/broker-a/TopicTest/3"
    )
    assert object_key(q, SegmentKind.COMMIT_LOG, 0) == (
        "212d6b50_DefaultCluster/broker-a/TopicTest/3/COMMIT_LOG/cfcd208400000000000000000000"
    )
    assert object_key(q, SegmentKind.CONSUME_QUEUE, 20) == (
        "212d6b50_DefaultCluster/broker-a/TopicTest/3/CONSUME_QUEUE/98f1370800000000000000000020"
    )
    assert object_key(q, SegmentKind.MANIFEST, 1) == (
        "212d6b50_DefaultCluster/broker-a/TopicTest/3/MANIFEST/c4ca423800000000000000000001.json"
    )
    assert kind_prefix(q, SegmentKind.MANIFEST) == (
        "212d6b50_DefaultCluster/broker-a/TopicTest/3/MANIFEST"
    )
    assert broker_prefix("DefaultCluster", "broker-a") == "212d6b50_DefaultCluster/broker-a"
    assert lease_key("DefaultCluster", "broker-a") == (
        "212d6b50_DefaultCluster/broker-a/_lease.json"
    )


def test_retry_and_dlq_topics_pass_through_unchanged() -> None:
    for topic in ("%RETRY%group-1", "%DLQ%group_1", "a|b", "%LMQ%x"):
        key = object_key(QueuePath("c", "b", topic, 0), SegmentKind.COMMIT_LOG, 0)
        assert f"/{topic}/0/" in key
        assert parse_object_key(key).topic == topic


# -- round trips -------------------------------------------------------------------------

# RocketMQ's topic alphabet, without a leading '_' (reserved, see the layout docstring).
_TOPIC_CHARS = "%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
topics = st.text(alphabet=_TOPIC_CHARS, min_size=1, max_size=255).filter(
    lambda t: not t.startswith("_")
)
# Cluster and broker names: anything a path component can hold, non-ASCII included.
names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/\\."),
    min_size=1,
    max_size=60,
).filter(lambda n: all(ord(c) >= 0x20 and ord(c) != 0x7F for c in n))
queue_ids = st.integers(0, MAX_QUEUE_ID)
offsets = st.integers(0, MAX_OFFSET)
kinds = st.sampled_from(list(SegmentKind))


@given(names, names, topics, queue_ids, kinds, offsets)
def test_object_key_round_trips(
    cluster: str, broker: str, topic: str, qid: int, kind: SegmentKind, base: int
) -> None:
    key = object_key(QueuePath(cluster, broker, topic, qid), kind, base)
    parsed = parse_object_key(key)
    assert parsed == ObjectKey(cluster, broker, topic, qid, kind, base)
    assert parsed.key == key


@given(offsets)
def test_object_name_shape(base: int) -> None:
    name = object_name(base)
    assert len(name) == 28
    assert int(name[8:]) == base


@given(names, names, topics, queue_ids, offsets)
def test_quarantine_never_collides_with_a_topic(
    cluster: str, broker: str, topic: str, qid: int, stamp: int
) -> None:
    obj = parse_object_key(
        object_key(QueuePath(cluster, broker, topic, qid), SegmentKind.MANIFEST, 0)
    )
    qkey = quarantine_key(obj, stamp_ms=stamp)
    assert qkey.startswith(quarantine_prefix(obj.queue) + "/")
    # Neither the quarantine copy nor the lease parses as a segment object of any topic.
    for key in (qkey, lease_key(cluster, broker)):
        with pytest.raises(InvalidNameError):
            parse_object_key(key)


def test_quarantine_key_layout() -> None:
    obj = ObjectKey("DefaultCluster", "b", "T", 2, SegmentKind.CONSUME_QUEUE, 20)
    assert quarantine_key(obj, stamp_ms=1_700_000_000_000) == (
        "212d6b50_DefaultCluster/b/_quarantine/T/2/1700000000000/CONSUME_QUEUE/"
        "98f1370800000000000000000020"
    )


# -- refusals ----------------------------------------------------------------------------

UNSAFE = [
    "",
    ".",
    "..",
    "../etc",
    "a/../b",
    "a..b",
    "a/b",
    "/abs",
    "a\\b",
    "a\x00b",
    "tab\there",
    "new\nline",
    "del\x7f",
    "\udcff",  # a lone surrogate is not UTF-8
    "x" * 256,
    "é" * 128,  # 256 bytes
]


@pytest.mark.parametrize("bad", UNSAFE)
@pytest.mark.parametrize("field", ["cluster", "broker", "topic"])
def test_unsafe_names_are_refused(field: str, bad: str) -> None:
    parts = {"cluster": "c", "broker": "b", "topic": "t"} | {field: bad}
    with pytest.raises(InvalidNameError, match=field):
        QueuePath(parts["cluster"], parts["broker"], parts["topic"], 0)


def test_limits_are_exact() -> None:
    QueuePath("c" * 246, "b" * 255, "t" * 255, MAX_QUEUE_ID)
    assert len(cluster_dir("c" * 246)) == 255
    with pytest.raises(InvalidNameError, match="cluster"):
        cluster_dir("c" * 247)
    with pytest.raises(InvalidNameError, match="queue id"):
        QueuePath("c", "b", "t", MAX_QUEUE_ID + 1)
    with pytest.raises(InvalidNameError, match="queue id"):
        QueuePath("c", "b", "t", -1)
    with pytest.raises(InvalidNameError, match="base offset"):
        object_name(-1)
    with pytest.raises(InvalidNameError, match="base offset"):
        object_name(MAX_OFFSET + 1)


@pytest.mark.parametrize("topic", ["_quarantine", "_lease.json", "_anything"])
def test_topics_may_not_start_with_underscore(topic: str) -> None:
    with pytest.raises(InvalidNameError, match="reserved"):
        QueuePath("c", "b", topic, 0)


def test_cluster_and_broker_may_start_with_underscore() -> None:
    key = object_key(QueuePath("_c", "_b", "t", 0), SegmentKind.MANIFEST, 7)
    assert parse_object_key(key).broker == "_b"


GOOD = object_key(QueuePath("DefaultCluster", "broker-a", "T", 1), SegmentKind.MANIFEST, 20)


@pytest.mark.parametrize(
    ("key", "complaint"),
    [
        (GOOD.replace("/MANIFEST/", "/../"), "kind"),
        (GOOD.replace("/T/", "/../"), "traversal"),
        (GOOD.replace("broker-a", ".."), "traversal"),
        ("/" + GOOD, "parts"),
        (GOOD + "/", "parts"),
        (GOOD.replace("/T/", "//"), "empty"),
        (GOOD.replace("/T/", "/_quarantine/T/"), "parts"),
        (GOOD.replace(".json", ""), "lacks"),
        (GOOD.replace(".json", ".tmp"), "lacks"),
        (GOOD.replace("98f13708", "98f13709"), "hash prefix"),
        (GOOD.replace("98f13708", "98F13708"), "hash prefix"),
        (GOOD.replace("212d6b50", "212d6b51"), "hash prefix"),
        (GOOD.replace("212d6b50_", "212d6b50"), "cluster directory"),
        (GOOD.replace("/1/", "/01/"), "canonical"),
        (GOOD.replace("/1/", "/+1/"), "canonical"),
        (GOOD.replace("/1/", "/2147483648/"), "queue id"),
        (GOOD.replace("/MANIFEST/", "/INDEX/"), "kind"),
        (GOOD.replace("/MANIFEST/", "/manifest/"), "kind"),
        (GOOD.replace("00000000000000000020", "0000000000000000002x"), "digits"),
        (GOOD.replace("/T/", "/_T/"), "reserved"),
    ],
)
def test_parse_refuses_foreign_and_hostile_keys(key: str, complaint: str) -> None:
    with pytest.raises(InvalidNameError, match=complaint) as info:
        parse_object_key(key)
    assert info.value.where == key


def test_parse_refuses_offsets_beyond_int64() -> None:
    base = MAX_OFFSET + 1
    name = hashlib.md5(str(base).encode()).hexdigest()[:8] + f"{base:020d}"
    key = GOOD.rsplit("/", 1)[0] + f"/{name}.json"
    with pytest.raises(InvalidNameError, match="exceeds"):
        parse_object_key(key)


# -- config copies ----------------------------------------------------------------------


def test_config_copy_key_layout_and_round_trip() -> None:
    from tieredstore.cold.layout import ConfigCopyKey, config_copy_key, parse_config_copy_key

    digest = hashlib.sha256(b"{}").hexdigest()
    key = config_copy_key("DefaultCluster", "broker-a", "consumerOffset.json", 1_700_000_000_000,
                          digest)  # fmt: skip
    assert key == (
        f"212d6b50_DefaultCluster/broker-a/_config/consumerOffset.json/1700000000000-{digest[:16]}"
    )
    parsed = parse_config_copy_key(key)
    assert parsed == ConfigCopyKey("DefaultCluster", "broker-a", "consumerOffset.json",
                                   1_700_000_000_000, digest[:16])  # fmt: skip
    assert parsed.key == key
    # Zero-padded stamps sort like times.
    early = config_copy_key("C", "b", "topics.json", 5, digest)
    late = config_copy_key("C", "b", "topics.json", 10**13, digest)
    assert early < late and parse_config_copy_key(early) < parse_config_copy_key(late)


@pytest.mark.parametrize(
    "key",
    [
        "212d6b50_DefaultCluster/broker-a/_config/broker.conf/1700000000000-0123456789abcdef",
        "212d6b50_DefaultCluster/broker-a/_config/topics.json/17-0123456789abcdef",
        "212d6b50_DefaultCluster/broker-a/_config/topics.json/1700000000000-XYZ",
        "212d6b50_DefaultCluster/broker-a/_config/topics.json/1700000000000",
        "212d6b50_DefaultCluster/broker-a/_lease.json",
        "00000000_DefaultCluster/broker-a/_config/topics.json/1700000000000-0123456789abcdef",
    ],
)
def test_parse_config_copy_key_refuses_other_keys(key: str) -> None:
    from tieredstore.cold.layout import parse_config_copy_key

    with pytest.raises(InvalidNameError):
        parse_config_copy_key(key)


# -- per-queue records ----------------------------------------------------------------------


def test_queue_records_live_under_the_brokers_queues_directory() -> None:
    from tieredstore.cold.layout import (
        init_key,
        parse_queue_record_key,
        queue_record_prefix,
        queue_records_prefix,
    )

    records = queue_records_prefix("DefaultCluster", "broker-a")
    assert records == "212d6b50_DefaultCluster/broker-a/_queues"
    queue = QueuePath("DefaultCluster", "broker-a", "T", 3)
    assert queue_record_prefix(queue) == f"{records}/T/3"
    assert init_key(queue).startswith(records + "/")
    parsed = parse_queue_record_key(
        init_key(queue), broker_prefix("DefaultCluster", "broker-a") + "/"
    )
    assert parsed is not None and parsed.queue == queue
    with pytest.raises(InvalidNameError, match="broker"):
        queue_records_prefix("DefaultCluster", "a/b")


# -- batch objects ------------------------------------------------------------------------


def test_batch_key_layout() -> None:
    from tieredstore.cold.layout import batch_key, batch_prefix

    assert batch_prefix("DefaultCluster", "broker-a") == "212d6b50_DefaultCluster/broker-a/_batches"
    assert batch_key("DefaultCluster", "broker-a", 0) == (
        "212d6b50_DefaultCluster/broker-a/_batches/cfcd208400000000000000000000.batch"
    )
    assert batch_key("DefaultCluster", "broker-a", 20) == (
        "212d6b50_DefaultCluster/broker-a/_batches/98f1370800000000000000000020.batch"
    )
    for bad in (-1, MAX_OFFSET + 1):
        with pytest.raises(InvalidNameError, match="batch sequence"):
            batch_key("DefaultCluster", "broker-a", bad)
    with pytest.raises(InvalidNameError, match="broker"):
        batch_key("DefaultCluster", "a/b", 0)


@given(names, names, offsets)
def test_batch_key_round_trips(cluster: str, broker: str, sequence: int) -> None:
    from tieredstore.cold.layout import batch_key, batch_prefix, parse_batch_key

    key = batch_key(cluster, broker, sequence)
    prefix = batch_prefix(cluster, broker) + "/"
    assert key.startswith(prefix)
    assert parse_batch_key(key, prefix) == sequence
    assert batch_key(cluster, broker, sequence) == key


def test_batch_keys_sort_by_parsed_sequence_not_by_key() -> None:
    from tieredstore.cold.layout import batch_key, batch_prefix, parse_batch_key

    prefix = batch_prefix("C", "b") + "/"
    keys = [batch_key("C", "b", n) for n in range(12)]
    assert sorted(keys) != keys  # the md5 prefix scrambles the listing order
    assert sorted(keys, key=lambda k: parse_batch_key(k, prefix) or 0) == keys


_BP = "212d6b50_DefaultCluster/broker-a/_batches/"


@pytest.mark.parametrize(
    ("key", "prefix"),
    [
        (_BP + "cfcd208400000000000000000000.json", _BP),  # another suffix
        (_BP + "cfcd208400000000000000000000", _BP),  # no suffix
        (_BP + "cfcd208400000000000000000000.0123456789abcdef.batch", _BP),  # an attempt
        (_BP + "00000000000000000000000000000.batch", _BP),  # wrong hash prefix
        (_BP + "c4ca423800000000000000000000.batch", _BP),  # hash of 1, digits of 0
        (_BP + "cfcd20840000000000000000000.batch", _BP),  # 19 digits
        (_BP + "cfcd2084000000000000000000x0.batch", _BP),  # not digits
        (_BP + "x/cfcd208400000000000000000000.batch", _BP),  # nested
        (_BP + ".batch", _BP),
        (_BP, _BP),
        # Under another broker's or another directory's prefix.
        (_BP + "cfcd208400000000000000000000.batch", "212d6b50_DefaultCluster/broker-b/_batches/"),
        (
            "212d6b50_DefaultCluster/broker-a/_config/cfcd208400000000000000000000.batch",
            "212d6b50_DefaultCluster/broker-a/_config/",
        ),
        (
            "212d6b50_DefaultCluster/broker-a/cfcd208400000000000000000000.batch",
            "212d6b50_DefaultCluster/broker-a/",
        ),
        (_BP + "cfcd208400000000000000000000.batch", _BP.rstrip("/")),  # prefix lacks '/'
        ("212d6b50_DefaultCluster/broker-a/_lease.json", _BP),
    ],
)
def test_parse_batch_key_gives_none_for_foreign_keys(key: str, prefix: str) -> None:
    from tieredstore.cold.layout import parse_batch_key

    assert parse_batch_key(key, prefix) is None


def test_classify_listed_calls_batches_own_entries() -> None:
    from tieredstore.cold.layout import OwnEntry, batch_key, broker_prefix, classify_listed

    prefix = broker_prefix("DefaultCluster", "broker-a") + "/"
    for key in (batch_key("DefaultCluster", "broker-a", 3), _BP + "garbage"):
        assert classify_listed(key, prefix) == OwnEntry(key)
