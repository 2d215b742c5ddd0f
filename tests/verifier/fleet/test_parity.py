"""Property (issue 46): for every damage the generator makes, the single-broker job (hot
files) and the fleet job (a hot fingerprint) give the same verdict and the same anomaly
classes per queue; a forged newest fingerprint never lets the fleet job say CLEAN.

The store: one broker of a small synthetic hot store, tiered into 100-message segments,
one queue's head expired by retention (on record), each queue's tail moved into one
batch object (as the batch writer commits small queues), fingerprinted by ``tieredstore
fingerprint`` (format 3: leaves of 64). Each example damages up to three objects —
delete, cut short, or flip a byte (of a data object; of a batch: a byte of its head or
of a slice) — and may forge the newest fingerprint: one dated a day ahead, another
broker's, or one with a block's leaf digests cut short (a partial block).

Classes the fleet job does not decide by design (docs/verification.md, "verify
--fleet"): ``orphan_object`` (its listing has no write times for the grace period),
``catalogue_drift`` and ``cold_ahead_of_hot``; they are left out of the comparison.

One decision (issue 46, deliverable 4): what a link's objects say (``missing_object``,
``size_mismatch``, ``digest_mismatch``) and whether its records and content are judged
(only on a link read whole; content only where its units tile its commit log) is
:mod:`tieredstore.verifier.decision.link`, which both jobs drive, so ``record_mismatch`` and
``content_mismatch`` are compared on every queue, damaged objects or not — but for one
exception by design: the fleet job compares content per leaf of 64 offsets, so a leaf
that reaches into a missing or cut-short object (:func:`_beside_unread`), or across the
retention cut, or into another damaged link whose units do not tile its commit log
(:func:`_held_in_part`), is held in part and not compared, where the single job still
compares each record it reads.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from tests.support.stores.coldimage import ColdImage, write_local
from tests.support.verification.fleet import fleet_image
from tieredstore.cli.main import main as cli_main
from tieredstore.clock import SystemClock
from tieredstore.cold.batch import SlicePart, build_batch
from tieredstore.cold.fingerprint import read_fingerprint
from tieredstore.cold.layout import (
    QueuePath,
    fingerprint_key,
    fingerprint_prefix,
    init_key,
    parse_fingerprint_name,
)
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.provenance import RetentionMark
from tieredstore.findings import FindingKind
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.fleet.job import FleetOptions, verify_fleet
from tieredstore.verifier.job import verify
from tieredstore.verifier.outcome import Anomaly, VerificationResult
from tieredstore.verifier.verdict import Verdict
from tieredstore.verifier.vocabulary import LagAllowance, LagUnit, Level, VerifyOptions

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLUSTER, BROKER = "ParityCluster", "broker-parity"
SPEC = SynthSpec(
    topics=1, queues=2, messages=1000, body_min=100, body_max=300,
    commitlog_file_size=256 << 10, cq_file_size=200 * CQ_UNIT_SIZE, seed=47,
)  # fmt: skip
QUEUES = (QueueKey("SynthTopic0", 0), QueueKey("SynthTopic0", 1))
EXPIRED = QUEUES[1]  # its first segment expired by retention (on record)
NO_LAG = LagAllowance(LagUnit.MESSAGES, 0)
NOT_DECIDED = {FindingKind.ORPHAN_OBJECT, FindingKind.CATALOGUE_DRIFT,
               FindingKind.COLD_AHEAD_OF_HOT}  # fmt: skip
ACTIONS = ("delete", "truncate", "flip")
LEAF = 64  # the fingerprint's --leaf-offsets default
FORGERIES = ("none", "ahead", "other", "partial")
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class Base:
    hot: Path
    cold: Path
    #: (key, kind): kind is "data", "json" or "batch".
    targets: tuple[tuple[str, str], ...]
    #: Per queue, the offsets of the leaf cold holds in part at its retention cut.
    cut_leaves: dict[tuple[str, int], range]


def _manifests(image: ColdImage, q: QueueKey) -> list[Manifest]:
    mark = f"/{BROKER}/{q.topic}/{q.queue_id}/MANIFEST/"
    found = [Manifest.from_json(v, where=k) for k, v in image.objects.items() if mark in k]
    return sorted(found, key=lambda m: m.start_offset)


def _drop(image: ColdImage, m: Manifest) -> None:
    for key in (m.key, m.commit_log_key, m.consume_queue_key):
        del image.objects[key]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    root = tmp_path_factory.mktemp("parity")
    synthesize(root / "hot", SPEC)
    image = fleet_image(root / "hot", CLUSTER, [BROKER], segment_messages=100)
    first = _manifests(image, EXPIRED)[0]
    _drop(image, first)
    mark = RetentionMark(1, CLUSTER, BROKER, EXPIRED.topic, EXPIRED.queue_id, "test-writer",
                         1, first.end_offset, first.key, first.max_store_timestamp,
                         1_700_000_100_000)  # fmt: skip
    image.objects[mark.key] = mark.to_json()
    parts = []
    for q in QUEUES:  # each queue's last two segments become one slice of batch 0
        segs = _manifests(image, q)[-2:]
        parts.append(SlicePart(
            q.topic, q.queue_id, segs[0].start_offset, segs[-1].end_offset, segs[0].cl_base,
            b"".join(image.objects[m.commit_log_key] for m in segs),
            b"".join(image.objects[m.consume_queue_key] for m in segs),
            min(m.min_store_timestamp for m in segs), max(m.max_store_timestamp for m in segs),
        ))  # fmt: skip
        for m in segs:
            _drop(image, m)
    index, data = build_batch(
        cluster=CLUSTER, broker=BROKER, sequence=0, writer_id="w", lease_epoch=1,
        created_at_ms=1_700_000_000_000, parts=parts,
    )  # fmt: skip
    image.objects[index.key] = data
    targets: list[tuple[str, str]] = [(index.key, "batch"), (mark.key, "json")]
    for q in QUEUES:
        for m in _manifests(image, q):
            targets += [(m.key, "json"), (m.commit_log_key, "data"), (m.consume_queue_key, "data")]
        targets.append((init_key(QueuePath(CLUSTER, BROKER, q.topic, q.queue_id)), "json"))
    write_local(image, root / "cold")
    assert cli_main([
        "fingerprint", "--store", str(root / "hot"), "--cold", str(root / "cold"),
        "--cluster", CLUSTER, "--broker", BROKER, "--max-bytes-per-second", "0",
    ]) == 0  # fmt: skip
    cut = first.end_offset  # the leaf [64, 128) across the cut: cold holds [100, 128)
    cut_leaves = {(EXPIRED.topic, EXPIRED.queue_id): range(cut, -(-cut // LEAF) * LEAF)}
    return Base(root / "hot", root / "cold", tuple(sorted(targets)), cut_leaves)


def _damage(path: Path, kind: str, action: str, where: float) -> str:
    """Damage the object at ``path``; return what was done (for the failure message)."""
    data = path.read_bytes()
    if action == "delete":
        path.unlink()
        return "deleted"
    if action == "flip" and kind == "batch":  # a byte of the head's first 16, or of a slice
        head = where < 0.5
        pos = int(where * 2 * 15) if head else len(data) - 1 - int((where - 0.5) * 400)
        path.write_bytes(data[:pos] + bytes([data[pos] ^ 0x41]) + data[pos + 1 :])
        return f"flipped byte {pos} ({'head' if head else 'slice'})"
    if action == "flip" and kind == "data":
        pos = int(where * (len(data) - 1))
        path.write_bytes(data[:pos] + bytes([data[pos] ^ 0x41]) + data[pos + 1 :])
        return f"flipped byte {pos}"
    cut = int(where * (len(data) - 1))  # JSON: cut short (a flipped byte may change nothing)
    path.write_bytes(data[:cut])
    return f"cut to {cut} bytes"


def _forge(cold: Path, forgery: str) -> str | None:
    """Write a forged fingerprint at the broker's next sequence; return its key."""
    folder = cold / fingerprint_prefix(CLUSTER, BROKER)
    newest = max(n for p in folder.iterdir() if (n := parse_fingerprint_name(p.name)))
    fp = read_fingerprint((folder / newest.name).read_bytes(), newest.name)
    seq = newest.sequence + 1
    if forgery == "ahead":
        fp = dataclasses.replace(fp, taken_ms=SystemClock().now_ms() + DAY_MS, sequence=seq)
        body = fp.to_bytes()
    elif forgery == "other":  # another broker's fingerprint, copied under this broker
        body = dataclasses.replace(fp, broker="broker-other", sequence=seq).to_bytes()
    else:  # "partial": a block whose leaf digests were cut short
        doc = json.loads(dataclasses.replace(fp, sequence=seq).to_bytes())
        doc["queues"][0]["blocks"][0][5] = doc["queues"][0]["blocks"][0][5][:-12]
        body = json.dumps(doc).encode()
    key = fingerprint_key(CLUSTER, BROKER, stamp_ms=fp.taken_ms, sequence=seq)
    (cold / key).write_bytes(body)
    return key


Classes = set[tuple[str, str, int]]
#: What leaves a link not read whole: the fleet job cannot hash a leaf of 64 offsets
#: that reaches into it, so content there is judged per record by the single job only.
UNREAD = {FindingKind.MISSING_OBJECT.value, FindingKind.SIZE_MISMATCH.value}


def _content(classes: Classes) -> Classes:
    return {c for c in classes if c[0] == FindingKind.CONTENT_MISMATCH.value}


def _beside_unread(classes: Classes) -> Classes:
    """``classes`` without the ``content_mismatch`` of a queue that also has an object
    not read whole (the fleet job's leaves beside it are held in part: not compared)."""
    unread = {(t, q) for kind, t, q in classes if kind in UNREAD}
    return classes - {c for c in _content(classes) if (c[1], c[2]) in unread}


def _held_in_part(single: VerificationResult, base: Base) -> Classes:
    """The single job's ``content_mismatch`` classes whose every mismatch lies in a leaf
    the fleet job may hold in part and so not compare: the leaf across the retention cut
    (its digest covers offsets cold no longer has), or a leaf reaching into another link
    the single job found damaged (one not read whole, or whose units do not tile its
    commit log, is not compared). The single job compares such records one by one."""
    damaged = [
        (a.topic, a.queue_id, a.start, a.end)
        for a in single.anomalies
        if a.anomaly is not FindingKind.CONTENT_MISMATCH
        and a.start is not None
        and a.end is not None
    ]

    def held(a: Anomaly) -> bool:
        if a.start is None or a.end is None:
            return False
        cut = base.cut_leaves.get((a.topic, a.queue_id), range(0))
        if a.start in cut and a.end - 1 in cut:
            return True
        lo, hi = a.start // LEAF * LEAF, -(-a.end // LEAF) * LEAF  # the leaves it lies in
        return any(
            (t, q) == (a.topic, a.queue_id) and s < hi and e > lo
            and not (s <= a.start and a.end <= e)  # not the link holding it
            for t, q, s, e in damaged
        )  # fmt: skip

    by_queue: dict[tuple[str, int], list[bool]] = {}
    for a in single.anomalies:
        if a.anomaly is FindingKind.CONTENT_MISMATCH:
            by_queue.setdefault((a.topic, a.queue_id), []).append(held(a))
    kind = FindingKind.CONTENT_MISMATCH.value
    return {(kind, t, q) for (t, q), inside in by_queue.items() if all(inside)}


def _classes(*results: VerificationResult) -> list[Classes]:
    """Each result's (class, topic, queue id), leaving out :data:`NOT_DECIDED`."""
    found = [{(a.anomaly.value, a.topic, a.queue_id) for a in r.anomalies} for r in results]
    left_out = {k.value for k in NOT_DECIDED}
    return [{c for c in classes if c[0] not in left_out} for classes in found]


def test_the_undamaged_base_is_clean_by_both_jobs(base: Base, spark: SparkSession) -> None:
    single, fleet = _both(base.hot, base.cold, spark)
    assert (single.verdict, fleet.verdict) == (Verdict.CLEAN, Verdict.CLEAN), (
        single.anomalies,
        fleet.anomalies,
    )
    assert fleet.totals.units_compared == sum(
        q.cold_max - q.cold_min for q in fleet.queues if q.cold_max and q.cold_min is not None
    ) - (128 - 100)  # all but cold's part of the leaf across the retention cut, [64, 128)


def _both(hot: Path, cold: Path, spark: SparkSession) -> tuple[VerificationResult, ...]:
    now = SystemClock().now_ms()
    single = verify(spark, VerifyOptions(
        hot=hot, cold_url=str(cold), cluster=CLUSTER, broker=BROKER, now_ms=now,
        level=Level.CONTENT, lag_allowance=NO_LAG,
    ))  # fmt: skip
    fleet = verify_fleet(spark, FleetOptions(str(cold), now, lag_allowance=NO_LAG))
    (broker,) = fleet.brokers
    return single, broker


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_both_jobs_give_the_same_verdict_and_classes_for_any_damage(
    base: Base, spark: SparkSession, data: st.DataObject
) -> None:
    chosen = data.draw(
        st.lists(st.sampled_from(base.targets), min_size=1, max_size=3, unique=True), label="hit"
    )
    forgery = data.draw(st.sampled_from(FORGERIES), label="fingerprint forgery")
    done = []
    with tempfile.TemporaryDirectory() as tmp:
        cold = Path(tmp) / "cold"
        shutil.copytree(base.cold, cold)
        for key, kind in chosen:
            action = data.draw(st.sampled_from(ACTIONS), label=f"action on {key}")
            where = data.draw(st.floats(0.0, 0.99), label="where")
            done.append((key, _damage(cold / key, kind, action, where)))
        forged = _forge(cold, forgery) if forgery != "none" else None
        single, fleet = _both(base.hot, cold, spark)
    assert single.verdict is not Verdict.CLEAN, f"CLEAN after {done}"
    if forged is None:
        assert fleet.verdict is single.verdict, (done, single.anomalies, fleet.anomalies)
        got, want = _classes(fleet, single)
        held = _held_in_part(single, base)
        assert _beside_unread(got) - held == _beside_unread(want) - held, done
        assert _content(got) <= _content(want), done  # the fleet job never invents one
    else:  # a forged newest fingerprint: never trusted, never CLEAN, named
        assert fleet.verdict.rank >= Verdict.INCOMPLETE.rank, (forgery, done)
        assert fleet.incomplete is not None and forged in fleet.incomplete


def _segment(base: Base, queue: QueueKey, start: int) -> Manifest:
    mark = f"/{queue.topic}/{queue.queue_id}/MANIFEST/"
    found = [Manifest.from_json((base.cold / k).read_bytes(), where=k)
             for k, _ in base.targets if mark in k]  # fmt: skip
    (segment,) = [m for m in found if m.start_offset == start]
    return segment


# The examples that taught the oracle :func:`_held_in_part`: byte 0 of a segment's first
# record flipped, (1) in the leaf across the expired queue's retention cut, [64, 128);
# (2) in the leaf [192, 256) that reaches back into the segment [100, 200), whose first
# consume-queue unit is flipped too (its units no longer tile its commit log).
HELD_IN_PART = {
    "retention-cut": (EXPIRED, 100, ()),
    "beside-units-that-do-not-tile": (QUEUES[0], 200, ((100, "CONSUME_QUEUE"),)),
}


@pytest.mark.parametrize("case", sorted(HELD_IN_PART))
def test_a_flipped_record_in_a_leaf_held_in_part(
    base: Base, spark: SparkSession, case: str
) -> None:
    """Both jobs: CORRUPT, with the same classes but one: only the single job compares
    the flipped record's content, since the fleet job holds its leaf in part."""
    queue, start, beside = HELD_IN_PART[case]
    with tempfile.TemporaryDirectory() as tmp:
        cold = Path(tmp) / "cold"
        shutil.copytree(base.cold, cold)
        _damage(cold / _segment(base, queue, start).commit_log_key, "data", "flip", 0.0)
        for at, kind in beside:
            m = _segment(base, queue, at)
            key = m.consume_queue_key if kind == "CONSUME_QUEUE" else m.commit_log_key
            _damage(cold / key, "data", "flip", 0.0)
        single, fleet = _both(base.hot, cold, spark)
    assert single.verdict is fleet.verdict is Verdict.CORRUPT
    got, want = _classes(fleet, single)
    content = ("content_mismatch", queue.topic, queue.queue_id)
    assert want - got == _held_in_part(single, base) == {content}, (single.anomalies, fleet)
    assert got == want - {content}, fleet.anomalies
    (found,) = [a for a in single.anomalies if a.anomaly is FindingKind.CONTENT_MISMATCH]
    assert (found.start, found.end) == (start, start + 1)


def test_a_unit_pointing_off_its_record_is_judged_alike_by_both_jobs(
    base: Base, spark: SparkSession
) -> None:
    """A consume-queue unit whose commit-log offset is changed (its digest fails, its
    units no longer tile the commit log): both jobs report the object, the records and
    the manifest claims they no longer match, and neither compares content the units no
    longer point at (the one rule of :mod:`tieredstore.verifier.decision.link`)."""
    key = next(k for k, kind in base.targets if kind == "json" and "/MANIFEST/" in k)
    m = Manifest.from_json((base.cold / key).read_bytes(), where=key)
    with tempfile.TemporaryDirectory() as tmp:
        cold = Path(tmp) / "cold"
        shutil.copytree(base.cold, cold)
        cq = bytearray((cold / m.consume_queue_key).read_bytes())
        cq[5 * CQ_UNIT_SIZE + 7] ^= 0x04  # the low byte of unit 5's commit-log offset
        (cold / m.consume_queue_key).write_bytes(bytes(cq))
        single, fleet = _both(base.hot, cold, spark)
    got, want = _classes(fleet, single)
    assert (
        got
        == want
        == {
            (FindingKind.DIGEST_MISMATCH.value, m.topic, m.queue_id),
            (FindingKind.RECORD_MISMATCH.value, m.topic, m.queue_id),
            (FindingKind.MANIFEST_MISMATCH.value, m.topic, m.queue_id),
        }
    )
    assert (single.verdict, fleet.verdict) == (Verdict.CORRUPT, Verdict.CORRUPT)


def test_a_flip_beside_a_deleted_commit_log_is_named_by_the_single_job_only(
    base: Base, spark: SparkSession
) -> None:
    """The one difference the property allows (:func:`_beside_unread`): queue 0's
    segment [0, 100) loses its commit log, and the first record of [100, 200) a byte.
    The single job compares that record with hot (``content_mismatch``); the fleet job's
    leaf [64, 128) reaches into the lost object, so it is held in part and not compared
    (docs/verification.md). Both say CORRUPT, and agree on everything else."""
    q = QUEUES[0]
    segments = [
        Manifest.from_json((base.cold / k).read_bytes(), where=k)
        for k, kind in base.targets
        if kind == "json" and f"/{q.topic}/{q.queue_id}/MANIFEST/" in k
    ]
    first, second = sorted(segments, key=lambda m: m.start_offset)[:2]
    assert (first.start_offset, second.start_offset) == (0, 100)
    with tempfile.TemporaryDirectory() as tmp:
        cold = Path(tmp) / "cold"
        shutil.copytree(base.cold, cold)
        (cold / first.commit_log_key).unlink()
        data = bytearray((cold / second.commit_log_key).read_bytes())
        data[int.from_bytes(data[:4], "big") - 1] ^= 0xFF  # the last byte of record 100
        (cold / second.commit_log_key).write_bytes(bytes(data))
        single, fleet = _both(base.hot, cold, spark)
    got, want = _classes(fleet, single)
    content = (FindingKind.CONTENT_MISMATCH.value, q.topic, q.queue_id)
    assert content in want and content not in got
    assert (FindingKind.MISSING_OBJECT.value, q.topic, q.queue_id) in got
    assert _beside_unread(got) == _beside_unread(want)
    assert (single.verdict, fleet.verdict) == (Verdict.CORRUPT, Verdict.CORRUPT)
