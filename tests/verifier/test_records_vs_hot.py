"""Records are checked against what hot proves (issue 34): each verifier-side row of its
table as a test, on POSIX and on S3 (the suite's moto server), and the verdicts that
must not change beside them. Each row is also run through the fleet job (``fleet``:
``tieredstore fingerprint`` then ``verify --fleet``, POSIX): the same verdict and the
same findings, from the fingerprint instead of the hot files (issue 35).

The store is the verifier suite's tiered synthetic store: message ``i`` was stored at
``CREATED_AT_MS + i`` ms, and the tiering record tiers every topic from
``CREATED_AT_MS``, so every message hot holds was stored while a rule tiered its topic.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pytest
from pyspark.sql import SparkSession

from tests.support.moto import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER, location_args
from tests.support.stores.coldimage import CREATED_AT_MS, ColdImage, init_record
from tests.support.verification.report_doc import found, queue_doc
from tieredstore.cli.main import main as cli_main
from tieredstore.cold.layout import QueuePath, broker_prefix, init_key
from tieredstore.cold.loss import LossRecord
from tieredstore.cold.provenance import RetentionMark, RuleEpoch, StopMark, TieringRecord
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.topic_rules import TopicRules
from tieredstore.verifier.verdict import Verdict

from .conftest import World

pytestmark = pytest.mark.spark

TOPIC = "SynthTopic1"
Q = QueueKey(TOPIC, 0)
Q1 = QueueKey(TOPIC, 1)
#: When the operator excluded TOPIC: half of the synthetic store's messages were stored.
EXCLUDED_MS = CREATED_AT_MS + 1500


def qpath(q: QueueKey) -> QueuePath:
    return QueuePath(CLUSTER, BROKER, q.topic, q.queue_id)


@dataclass
class Site:
    """The pristine store's cold copy at a URL (a local directory or an S3 bucket)."""

    url: str
    flags: tuple[str, ...]
    storage: dict[str, Any]
    world: World
    out: Path
    #: Verify through the fleet job against a fresh fingerprint, not the hot files.
    fleet: bool = False
    #: ``tieredstore fingerprint``'s flags to reach the cold store.
    fingerprint_flags: tuple[str, ...] = ()

    def _fs(self) -> tuple[Any, str]:
        fs, root = fsspec.core.url_to_fs(self.url, **self.storage)
        return fs, str(root).rstrip("/")

    def put(self, key: str, data: bytes) -> None:
        fs, root = self._fs()
        if "file" in fs.protocol:
            fs.makedirs(f"{root}/{key}".rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(f"{root}/{key}", data)

    def rm(self, *keys: str) -> None:
        fs, root = self._fs()
        fs.rm([f"{root}/{k}" for k in keys])

    def drop_queue_data(self, q: QueueKey) -> None:
        fs, root = self._fs()
        fs.rm(f"{root}/{broker_prefix(CLUSTER, BROKER)}/{q.topic}/{q.queue_id}", recursive=True)

    def drop_segments(self, q: QueueKey, first: int, last: int | None = None) -> None:
        for m in self.world.manifests(q)[first:last]:
            self.rm(m.key, m.commit_log_key, m.consume_queue_key)

    def verify(self) -> tuple[int, dict[str, Any]]:
        if self.fleet:
            return self._verify_fleet()
        argv = ["verify", "--store", str(self.world.hot), "--cold", self.url, "--cluster",
                CLUSTER, "--broker", BROKER, "--out", str(self.out), "--lag-allowance", "0",
                *self.flags]  # fmt: skip
        code = cli_main(argv)
        return code, json.loads((self.out / "report.json").read_text())

    def fingerprint(self) -> None:
        """``tieredstore fingerprint`` of the hot store now (the tiering record's times)."""
        assert cli_main(["fingerprint", "--store", str(self.world.hot), "--cold", self.url,
                         "--cluster", CLUSTER, "--broker", BROKER,
                         "--max-bytes-per-second", "0", *self.fingerprint_flags]) == 0  # fmt: skip

    def verify_fleet(self) -> tuple[int, dict[str, Any]]:
        """``verify --fleet`` against the newest fingerprint: the broker's report.json."""
        code = cli_main(["verify", "--fleet", "--cold", self.url, "--cluster", CLUSTER,
                         "--out", str(self.out), "--lag-allowance", "0", *self.flags])  # fmt: skip
        return code, json.loads((self.out / CLUSTER / BROKER / "report.json").read_text())

    def _verify_fleet(self) -> tuple[int, dict[str, Any]]:
        self.fingerprint()
        return self.verify_fleet()


@pytest.fixture(params=["posix", pytest.param("s3", marks=pytest.mark.s3), "fleet"])
def site(
    request: pytest.FixtureRequest, world: World, tmp_path: Path, spark: SparkSession
) -> Iterator[Site]:
    if request.param in ("posix", "fleet"):
        yield Site(str(world.cold), (), {}, world, tmp_path / "out", request.param == "fleet")
        return
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    storage = bucket.fsspec_options()
    fs, root = fsspec.core.url_to_fs(bucket.url, **storage)
    fs.pipe({f"{root.rstrip('/')}/{k}": v for k, v in world.image.objects.items()})
    flags = ("--endpoint-url", bucket.endpoint_url, "--region", REGION, "--storage-option",
             f"key={ACCESS_KEY}", "--storage-option", f"secret={SECRET_KEY}")  # fmt: skip
    reach = ("--endpoint-url", bucket.endpoint_url, "--region", REGION)
    fleet = request.param == "s3-fleet"
    yield Site(bucket.url, flags, storage, world, tmp_path / "out", fleet, reach)


def hot_range(site: Site, q: QueueKey = Q) -> tuple[int, int]:
    rng = HotStore(site.world.hot).queue_range(q.topic, q.queue_id)
    return rng.min, rng.max


def stored_before_exclusion(site: Site, q: QueueKey = Q) -> int:
    """The first offset of ``q`` stored at or after EXCLUDED_MS (the hot store's own
    search, not the verifier's)."""
    return HotStore(site.world.hot).offset_by_time(q.topic, q.queue_id, EXCLUDED_MS)


def exclude_topic(site: Site, *, stops: dict[QueueKey, int]) -> None:
    """TOPIC tiered from the start, excluded from EXCLUDED_MS on (a normal sidecar run):
    the tiering record says so; each queue of ``stops`` has its stop record, and cold
    holds it only below its stop offset (a segment boundary)."""
    history = (
        RuleEpoch(CREATED_AT_MS, TopicRules(), "test-writer", 1),
        RuleEpoch(EXCLUDED_MS, TopicRules(exclude=(TOPIC,)), "test-writer", 2),
    )
    record = TieringRecord(CLUSTER, BROKER, history)
    site.put(record.key, record.to_json())
    for q, offset in stops.items():
        mark = StopMark.new(qpath(q), excluded_since_ms=EXCLUDED_MS, stop_offset=offset,
                            stopped_at_ms=EXCLUDED_MS + 10, writer_id="test-writer",
                            lease_epoch=2)  # fmt: skip
        site.put(mark.key, mark.to_json())
        starts = [m.start_offset for m in site.world.manifests(q)]
        if offset in starts:
            site.drop_segments(q, starts.index(offset))


def stop_at(site: Site, q: QueueKey, segment: int) -> int:
    return site.world.manifests(q)[segment].start_offset


# -- row 1: a topic tiered, then excluded: what was tiered stays required ---------------


def test_a_stopped_queue_holding_its_history_is_clean(site: Site) -> None:
    stop = stop_at(site, Q, 5)
    exclude_topic(site, stops={Q: stop, Q1: hot_range(site, Q1)[1]})
    code, doc = site.verify()
    assert (code, doc["verdict"], doc["anomalies"]) == (0, "CLEAN", [])
    q = queue_doc(doc, Q)
    assert (q["status"], q["required_end"], q["tiering"]["tiered"]) == ("ok", stop, True)
    assert "stop record" in q["required_because"]


def test_a_stopped_queue_whose_cold_data_is_lost_is_corrupt(site: Site) -> None:
    stop = stop_at(site, Q, 5)
    exclude_topic(site, stops={Q: stop, Q1: hot_range(site, Q1)[1]})
    site.drop_queue_data(Q)
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {("hot_not_covered", TOPIC, 0, 0, stop, None)}
    q = queue_doc(doc, Q)
    assert (q["status"], q["tiering"]["tiered"]) == ("corrupt", True)


def test_a_stopped_queue_missing_its_tail_before_the_stop_is_corrupt(site: Site) -> None:
    stop = stop_at(site, Q, 5)
    exclude_topic(site, stops={Q: stop, Q1: hot_range(site, Q1)[1]})
    site.drop_segments(Q, 3, 5)
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {("hot_not_covered", TOPIC, 0, stop_at(site, Q, 3), stop, None)}


def test_without_a_stop_record_what_was_stored_while_tiered_is_required(site: Site) -> None:
    exclude_topic(site, stops={Q1: hot_range(site, Q1)[1]})
    site.drop_queue_data(Q)
    end = stored_before_exclusion(site)
    assert 0 < end < hot_range(site)[1]
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("hot_not_covered", TOPIC, 0, 0, end, None),
        ("unproven_stop", TOPIC, 0, end, end, None),
    }


def test_without_a_stop_record_an_intact_queue_is_dirty(site: Site) -> None:
    exclude_topic(site, stops={Q1: hot_range(site, Q1)[1]})
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (1, "DIRTY")
    end = stored_before_exclusion(site)
    assert found(doc) == {("unproven_stop", TOPIC, 0, end, end, None)}


# -- row 2: a loss record over offsets hot still holds ----------------------------------


def test_a_loss_record_over_offsets_hot_holds_is_corrupt(site: Site) -> None:
    m = site.world.manifests(Q)[3]
    site.drop_segments(Q, 3, 4)
    record = LossRecord.new(qpath(Q), m.start_offset, m.end_offset, accepted_at_ms=1,
                            writer_id="w-1", lease_epoch=4)  # fmt: skip
    site.put(record.key, record.to_json())
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("impossible_loss_record", TOPIC, 0, m.start_offset, m.end_offset, record.key),
        ("gap", TOPIC, 0, m.start_offset, m.end_offset, None),
    }


@pytest.mark.parametrize("site", [pytest.param("s3-fleet", marks=pytest.mark.s3)], indirect=True)
def test_on_s3_the_fleet_job_finds_a_loss_record_over_hot_impossible(site: Site) -> None:
    test_a_loss_record_over_offsets_hot_holds_is_corrupt(site)


# -- row 3: a retention record past what cold committed, or past hot max ----------------


@pytest.mark.parametrize("past", [0, 100])
def test_a_retention_record_past_everything_committed_is_corrupt(site: Site, past: int) -> None:
    lo, hi = hot_range(site)
    last = site.world.manifests(Q)[-1]
    site.drop_queue_data(Q)
    mark = RetentionMark(1, CLUSTER, BROKER, TOPIC, 0, "test-writer", 1, hi + past, last.key,
                         last.max_store_timestamp, CREATED_AT_MS + 5000)  # fmt: skip
    site.put(mark.key, mark.to_json())
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("impossible_retention_record", TOPIC, 0, hi + past, hi + past, mark.key),
        ("hot_not_covered", TOPIC, 0, lo, hi, None),
    }


# -- row 4: init record and head deleted while the tiering record proves tiering --------


def test_a_deleted_init_record_and_head_are_corrupt_where_hot_proves_tiering(
    site: Site,
) -> None:
    site.rm(init_key(qpath(Q)))
    site.drop_segments(Q, 0, 2)
    cold_min = stop_at(site, Q, 2)
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("unproven_start", TOPIC, 0, cold_min, cold_min, None),
        ("missing_head", TOPIC, 0, 0, cold_min, None),
    }


# -- row 5 of issue 46: the init policy on record; init record and head deleted ----------


def tier_late(site: Site, *policies: str | None) -> int:
    """The tiering record of a sidecar started after every message hot holds was stored
    (one entry per policy of ``policies``, in turn); then Q's init record and first two
    segments deleted. Returns Q's cold min."""
    history = tuple(
        RuleEpoch(CREATED_AT_MS + 10_000 + i, TopicRules(), "test-writer", 1, policy)
        for i, policy in enumerate(policies)
    )
    record = TieringRecord(CLUSTER, BROKER, history)
    site.put(record.key, record.to_json())
    site.rm(init_key(qpath(Q)))
    site.drop_segments(Q, 0, 2)
    return stop_at(site, Q, 2)


def test_a_deleted_init_record_and_head_are_corrupt_under_an_earliest_policy(
    site: Site,
) -> None:
    cold_min = tier_late(site, "earliest")
    assert hot_range(site)[0] == 0 < cold_min
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("unproven_start", TOPIC, 0, cold_min, cold_min, None),
        ("missing_head", TOPIC, 0, 0, cold_min, None),
    }


@pytest.mark.parametrize("site", [pytest.param("s3-fleet", marks=pytest.mark.s3)], indirect=True)
def test_on_s3_the_fleet_job_holds_an_earliest_policy_to_hot_min(site: Site) -> None:
    test_a_deleted_init_record_and_head_are_corrupt_under_an_earliest_policy(site)


@pytest.mark.parametrize(
    "policies",
    [("latest",), ("timestamp:5",), (None,), (None, "earliest"), ("earliest", "latest")],
    ids=["latest", "timestamp", "unknown", "earliest-since-an-upgrade", "earliest-then-latest"],
)
def test_a_deleted_init_record_under_another_policy_stays_dirty(
    site: Site, policies: tuple[str | None, ...]
) -> None:
    cold_min = tier_late(site, *policies)
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (1, "DIRTY")
    assert found(doc) == {("unproven_start", TOPIC, 0, cold_min, cold_min, None)}


# -- verdicts that must not change ---------------------------------------------------------


def test_messages_stored_before_any_rule_tiered_them_prove_nothing(world: World) -> None:
    site = Site(str(world.cold), (), {}, world, world.out)
    late = RuleEpoch(CREATED_AT_MS + 10_000, TopicRules(), "test-writer", 1)
    record = TieringRecord(CLUSTER, BROKER, (late,))
    site.put(record.key, record.to_json())
    site.rm(init_key(qpath(Q)))
    site.drop_segments(Q, 0, 2)
    cold_min = stop_at(site, Q, 2)
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (1, "DIRTY")
    assert found(doc) == {("unproven_start", TOPIC, 0, cold_min, cold_min, None)}


def test_an_earliest_init_record_above_hot_min_explains_nothing(world: World) -> None:
    site = Site(str(world.cold), (), {}, world, world.out)
    site.drop_segments(Q, 0, 2)
    cold_min = stop_at(site, Q, 2)
    forged = init_record(Q, cold_min, "earliest")  # written as if hot min were there
    site.put(forged.key, forged.to_json())
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("unproven_start", TOPIC, 0, cold_min, cold_min, forged.key),
        ("missing_head", TOPIC, 0, 0, cold_min, None),
    }


def test_a_fingerprint_taken_before_a_tiering_entry_leaves_the_broker_incomplete(
    world: World,
) -> None:
    site = Site(str(world.cold), (), {}, world, world.out, fleet=True)
    site.fingerprint()
    exclude_topic(site, stops={Q: stop_at(site, Q, 5), Q1: hot_range(site, Q1)[1]})
    code, doc = site.verify_fleet()  # CLEAN with a new fingerprint (row 1 above)
    assert (code, doc["verdict"]) == (Verdict.INCOMPLETE.exit_code, "INCOMPLETE")
    assert "no stored_from" in doc["incomplete"] and str(EXCLUDED_MS) in doc["incomplete"]


# -- row 1 with the real sidecar: tiered, excluded by a normal run, data lost ------------


@pytest.mark.slow
def test_a_topic_excluded_by_a_sidecar_run_owes_what_was_tiered(
    tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Per-queue segments: the damage below deletes the queue's own objects.
    monkeypatch.setenv("TIEREDSTORE_TIERING_BATCHING", "false")
    spec = SynthSpec(topics=2, queues=1, messages=400, body_min=200, body_max=200,
                     commitlog_file_size=64 << 10, seed=3)  # fmt: skip
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    synthesize(store, spec)
    where = location_args(store, cold, state)
    assert cli_main(["run", "--once", *where]) == 0
    stop = HotStore(store).queue_range(TOPIC, 0).max
    config = tmp_path / "sidecar.toml"
    config.write_text(f'[tiering]\nexclude_topics = ["{TOPIC}"]\n')
    live = SyntheticStore.open(store)
    live.append(200)
    assert cli_main(["run", "--once", "--config", str(config), *where]) == 0
    live.append(200)  # the excluded topic's new messages are never tiered
    assert cli_main(["run", "--once", "--config", str(config), *where]) == 0
    assert HotStore(store).queue_range(TOPIC, 0).max > stop

    world = World(store, cold, tmp_path / "intact", ColdImage())
    site = Site(str(cold), (), {}, world, tmp_path / "intact")
    code, doc = site.verify()
    assert (code, doc["verdict"], doc["anomalies"]) == (0, "CLEAN", [])
    assert queue_doc(doc, Q)["required_end"] == stop

    site.drop_queue_data(Q)
    site.out = tmp_path / "lost"
    code, doc = site.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {("hot_not_covered", TOPIC, 0, 0, stop, None)}
