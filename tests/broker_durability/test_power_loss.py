"""The durability guard against a real ASYNC_FLUSH broker: its lag, and a power cut that
RocketMQ's own abnormal recovery rewinds.

* **Lag**: a steady stream (40 msg/s, 400-byte bodies: below the 16 KiB a 500 ms flush
  needs, so the broker flushes it only every 10 s) — with ``segment_max_age`` 2 s, the
  ``sync`` guard's p99 append → commit lag is at most age + the broker's flush interval +
  one tick; the ``checkpoint`` guard's is printed beside it.
* **Power cut**: both sidecars and the broker freeze mid-stream; the store is cut to what
  the checkpoint vouches for (tests/support/broker/powercut.py); the broker is killed
  and started again (``CommitLog.recoverAbnormally`` runs: the ``abort`` file is there);
  the sidecars resume; new messages reuse the lost offsets. Then: a queue whose cold is
  ahead of the recovered store is DIVERGED and its cold objects untouched; the
  ``checkpoint`` sidecar never held a record the cut took away; ``status`` and
  ``/metrics`` show the rewind; ``repair`` + ``run --once`` + ``verify --level content``
  end CLEAN for both.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.broker_durability.conftest import (
    BROKER_FLUSH_INTERVAL_S,
    BROKER_THOROUGH_FLUSH_S,
    QUEUES,
    SEGMENT_MAX_AGE_S,
    TICK_S,
    TOPIC,
    Durability,
)
from tests.support.broker.powercut import cut_power
from tests.support.broker.rocketmq import HarnessError, LocalCluster, wait_until
from tests.support.broker.sidecar import LiveSidecar
from tieredstore.hot.store import HotStore
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow, QueueState

pytestmark = pytest.mark.broker

RATE, BODY = 40, 400


def _trickle(
    cluster: LocalCluster, seconds: int, tag: str, workdir: Path
) -> tuple[subprocess.Popen[bytes], Path]:
    results = workdir / f"trickle-{tag}.tsv"
    proc = cluster.spawn_tool(
        "trickle", cluster.namesrv_addr, TOPIC, str(RATE), str(seconds), str(BODY), tag,
        str(results), log=workdir / f"trickle-{tag}.log",
    )  # fmt: skip
    return proc, results


def _sent(results: Path) -> list[tuple[int, int]]:
    """(queue id, queue offset) of every message the broker acknowledged."""
    out = []
    for line in results.read_text().splitlines():
        _i, status, qid, offset, _t0, _t1 = line.split("\t")
        if status == "SEND_OK":
            out.append((int(qid), int(offset)))
    return out


def _rows(sidecar: LiveSidecar) -> dict[int, QueueRow]:
    if not (sidecar.state / "catalogue.sqlite3").exists():
        return {}
    with Catalogue.open(
        sidecar.state, cluster=sidecar.cluster, broker=sidecar.broker, read_only=True
    ) as cat:
        return {r.queue_id: r for r in cat.queues.all() if r.topic == TOPIC}


def _hot_max(cluster: LocalCluster) -> dict[int, int]:
    hot = HotStore(cluster.store_root)
    return {q: hot.queue_range(TOPIC, q).max for q in range(QUEUES)}


def _caught_up(sidecar: LiveSidecar, cluster: LocalCluster, queues: set[int]) -> bool:
    """Every queue tiered up to what its guard allows: all of it for ``sync``; for
    ``checkpoint``, all records stored before the checkpoint's time (the newest
    millisecond waits for the broker's next flushed write: see durability.py)."""
    rows, hot = _rows(sidecar), HotStore(cluster.store_root)
    flushed = hot.checkpoint().physic_msg_timestamp
    for q in queues:
        if q not in rows:
            return False
        commit, top = rows[q].cold_commit, hot.queue_range(TOPIC, q).max
        if commit == top:
            continue
        if not _observes_checkpoint(sidecar) or commit > top:
            return False
        if _store_ms(hot, q, commit) < flushed:
            return False
    return True


def _wait_caught_up(sidecar: LiveSidecar, cluster: LocalCluster, queues: set[int]) -> None:
    """:func:`_caught_up` within a minute, or an error showing each queue and the log."""
    try:
        wait_until(lambda: _caught_up(sidecar, cluster, queues), timeout=60,
                   what=f"{sidecar.state} to catch up queues {sorted(queues)}")  # fmt: skip
    except HarnessError as exc:
        rows = {q: (r.state.name, r.cold_commit) for q, r in _rows(sidecar).items()}
        raise AssertionError(
            f"{exc}: catalogue {rows}, hot max {_hot_max(cluster)}\n{sidecar.log_tail()}"
        ) from exc


def _observes_checkpoint(sidecar: LiveSidecar) -> bool:
    return sidecar.state.parent.name.startswith("checkpoint")  # conftest's work dir


def _store_ms(hot: HotStore, queue: int, offset: int) -> int:
    unit = hot.read_units(TOPIC, queue, offset, offset + 1)[0]
    return hot.read_store_timestamp(int(unit["commitlog_offset"]))


def _beyond_checkpoint(sidecar: LiveSidecar, cluster: LocalCluster) -> bool:
    """Whether the sidecar committed a record stored at or after the checkpoint's time
    (one the checkpoint does not vouch for)."""
    hot = HotStore(cluster.store_root)
    flushed = hot.checkpoint().physic_msg_timestamp
    return any(
        r.cold_commit > 0 and _store_ms(hot, q, r.cold_commit - 1) >= flushed
        for q, r in _rows(sidecar).items()
    )


def _manifests(sidecar: LiveSidecar) -> dict[str, tuple[int, int, int, float]]:
    """Manifest key → (queue id, start, end, mtime), of the test topic."""
    out = {}
    for path in sidecar.cold.rglob("MANIFEST/*.json"):
        m = json.loads(path.read_text())
        if m["topic"] == TOPIC:
            key = str(path.relative_to(sidecar.cold))
            out[key] = (int(m["queue_id"]), int(m["start_offset"]), int(m["end_offset"]),
                        path.stat().st_mtime_ns / 1e9)  # fmt: skip
    return out


def _lags(sidecar: LiveSidecar, cluster: LocalCluster, sent: list[tuple[int, int]]) -> np.ndarray:
    """Seconds from each sent message's append (its storeTimestamp) to its commit (the
    mtime of the manifest of the segment holding it)."""
    hot = HotStore(cluster.store_root)
    commit: dict[tuple[int, int], float] = {}
    for qid, start, end, mtime in _manifests(sidecar).values():
        for offset in range(start, end):
            commit[(qid, offset)] = mtime
    lags = [
        commit[(qid, offset)] - _store_ms(hot, qid, offset) / 1000
        for qid, offset in sent
        if (qid, offset) in commit  # the checkpoint rule holds back the newest millisecond
    ]
    return np.array(lags)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _where(sidecar: LiveSidecar, cluster: LocalCluster) -> list[str]:
    return ["--store", str(cluster.store_root), "--cold", str(sidecar.cold),
            "--state-dir", str(sidecar.state), "--cluster", sidecar.cluster,
            "--broker", sidecar.broker]  # fmt: skip


def _status(sidecar: LiveSidecar, cluster: LocalCluster) -> dict[int, dict[str, Any]]:
    done = _cli("status", "--json", *_where(sidecar, cluster))
    assert done.returncode == 0, done.stderr
    return {q["queue"]: q for q in json.loads(done.stdout)["queues"] if q["topic"] == TOPIC}


def _metric(sidecar: LiveSidecar, name: str, queue: int, extra: str = "") -> float:
    url = sidecar.http_url()
    assert url is not None, sidecar.log_tail()
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    labels = f'queue="{queue}",{extra}topic="{TOPIC}"'
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(p in line for p in labels.split(",")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} for queue {queue} in /metrics")


def test_lag_on_an_async_flush_broker(durability: Durability, tmp_path: Path) -> None:
    cluster = durability.cluster
    proc, results = _trickle(cluster, 30, "lag", tmp_path)
    assert proc.wait(timeout=180) == 0
    sent = _sent(results)
    assert len(sent) >= 30 * RATE * 0.9
    everything = set(range(QUEUES))
    for sidecar in durability.sidecars:
        _wait_caught_up(sidecar, cluster, everything)
    budget = SEGMENT_MAX_AGE_S + BROKER_FLUSH_INTERVAL_S + TICK_S
    summary = {}
    for name, sidecar in (("sync", durability.sync), ("checkpoint", durability.checkpoint)):
        lag = _lags(sidecar, cluster, sent)
        summary[name] = [float(x) for x in np.percentile(lag, [50, 90, 99, 100])]
    print(
        f"\nappend -> commit lag, {len(sent)} messages, age {SEGMENT_MAX_AGE_S:g} s, tick "
        f"{TICK_S:g} s (p50 p90 p99 max, s): {summary}; sync budget {budget:g} s"
    )
    # The target (p99 within the budget) is a measurement, printed for BENCHMARKS.md:
    # a loaded machine misses it by a second without anything being wrong. What the
    # test holds is the behaviour: the sync guard does not wait for the broker's 10 s
    # thorough flush, as the checkpoint guard must.
    p99 = summary["sync"][2]
    print(f"RESULT guard_sync_lag ratio={p99 / budget:.3g} target=<=1 "
          f"{'PASS' if p99 <= budget else 'FAIL'}")  # fmt: skip
    # Waiting for that flush puts the median near half its interval (the checkpoint
    # guard's is 5.2-5.3 s); the sync guard's is 1.3-1.5 s, loaded or not.
    assert summary["sync"][0] < BROKER_THOROUGH_FLUSH_S / 2, summary
    assert 2 * summary["sync"][0] < summary["checkpoint"][0], summary


def test_power_cut_rewinds_the_broker_and_nothing_lost_stays_in_cold(
    durability: Durability, tmp_path: Path
) -> None:
    cluster, sync, checkpoint = durability.cluster, durability.sync, durability.checkpoint
    before = {s.state: _rows(s) for s in durability.sidecars}
    proc, _results = _trickle(cluster, 120, "lost", tmp_path)

    def tiered_some() -> bool:  # both sidecars committed some of this stream
        rows = {s.state: _rows(s) for s in durability.sidecars}
        return all(
            sum(r.cold_commit for r in rows[s].values())
            > sum(r.cold_commit for r in before[s].values()) + 2 * RATE
            for s in rows
        )

    wait_until(tiered_some, timeout=90, what="both sidecars to tier the new stream")
    # -- the instant of the cut: nothing moves any more. Cut when the sync sidecar has
    # tiered past what the checkpoint vouches for (its fdatasync made that durable; the
    # worst-case cut below does not know it), so the DIVERGED path is exercised.
    for _attempt in range(5):
        wait_until(lambda: _beyond_checkpoint(sync, cluster), timeout=60,
                   what="the sync sidecar to tier past the checkpoint")  # fmt: skip
        for sidecar in durability.sidecars:
            sidecar.pause()
        cluster.freeze_broker()
        if _beyond_checkpoint(sync, cluster):
            break
        cluster.thaw_broker()  # the broker's checkpoint moved in between: again
        for sidecar in durability.sidecars:
            sidecar.resume()
    proc.kill()
    proc.wait()
    at_cut = {s.state: _rows(s) for s in durability.sidecars}
    manifests_at_cut = _manifests(sync)
    cut = cut_power(cluster.store_root)
    assert cut.lost_bytes > 0, cut  # something the broker had not flushed is lost
    cluster.kill_broker()
    assert (cluster.store_root / "abort").exists()
    cluster.restart_broker()
    store_log = cluster.home / "logs" / "rocketmqlogs" / "store.log"
    assert "last shutdown abnormally" in store_log.read_text(errors="replace")
    recovered = _hot_max(cluster)
    ahead = {q for q, r in at_cut[sync.state].items() if r.cold_commit > recovered[q]}
    assert ahead, (cut, recovered, at_cut[sync.state])  # sync's cold outran the checkpoint

    # The checkpoint rule never tiered what the cut took away.
    for q, row in at_cut[checkpoint.state].items():
        assert row.cold_commit <= recovered[q], (q, row, recovered)

    for sidecar in durability.sidecars:
        sidecar.resume()

    # The sync sidecar may have been frozen mid-round: segments it had read and
    # fdatasync'ed (a real power cut keeps them; this worst-case cut does not) commit
    # after the resume, beyond the recovered store too. The next round, the one that
    # turns the queues ahead at the cut DIVERGED, turns those DIVERGED as well.
    def beyond(rows: dict[int, QueueRow]) -> set[int]:
        return {q for q, r in rows.items() if r.cold_commit > recovered[q]}

    def diverged() -> bool:
        rows = _rows(sync)
        return ahead <= beyond(rows) and all(
            rows[q].state is QueueState.DIVERGED for q in beyond(rows)
        )

    wait_until(diverged, timeout=60, what="the sync sidecar to mark cold-ahead queues DIVERGED")
    settled = _rows(sync)
    ahead, committed = beyond(settled), {q: r.cold_commit for q, r in settled.items()}
    status = _status(sync, cluster)
    for q in ahead:  # the rewind, as status and the metrics show it
        gap = committed[q] - recovered[q]
        assert status[q]["state"] == "DIVERGED"
        assert status[q]["note"] == f"hot max below cold commit: cold is {gap} ahead"
        shown = functools.partial(_metric, sync, "tieredstore_queue_cold_ahead_messages", q)
        wait_until(lambda: shown() == gap, timeout=30, what="the cold-ahead gauge")  # noqa: B023
        assert _metric(sync, "tieredstore_queue_state", q, 'state="DIVERGED",') == 1

    # New messages reuse the lost offsets; the sidecars keep running.
    for attempt in range(6):  # until the restarted broker's route reaches the producer
        proc, results = _trickle(cluster, 5, f"after-{attempt}", tmp_path)
        assert proc.wait(timeout=120) == 0
        if _sent(results):
            break
    reused = {(q, o) for q, o in _sent(results) if o < committed[q]}
    assert reused, "no new message reused a lost offset"
    print(
        f"\npower cut: checkpoint {cut.checkpoint_ms}, commitlog cut at {cut.position} "
        f"({cut.lost_bytes} bytes lost); recovered hot max {recovered}; sync cold commit at "
        f"the cut { {q: r.cold_commit for q, r in at_cut[sync.state].items()} }, after the "
        f"resume {committed} -> queues {sorted(ahead)} DIVERGED; {len(reused)} lost offsets "
        f"reused by new messages"
    )
    everything = set(range(QUEUES))
    _wait_caught_up(checkpoint, cluster, everything)
    _wait_caught_up(sync, cluster, everything - ahead)
    rows = _rows(sync)
    assert {q for q, r in rows.items() if r.state is QueueState.DIVERGED} == ahead
    assert all(r.state is QueueState.ACTIVE for r in _rows(checkpoint).values())
    # Never overwritten: every manifest of a diverged queue is as it was at the cut.
    now = _manifests(sync)
    for key, (q, start, end, mtime) in manifests_at_cut.items():
        if q in ahead:
            assert now[key] == (q, start, end, mtime), key

    # -- repair, catch up, verify ------------------------------------------------------
    for sidecar in durability.sidecars:
        assert sidecar.stop() == 0, sidecar.log_tail()
    for q in sorted(ahead):
        done = _cli("repair", "--topic", TOPIC, "--queue", str(q), *_where(sync, cluster))
        assert done.returncode == 0, done.stderr
    assert any((sync.cold).rglob("_quarantine/*/*/*/MANIFEST/*.json"))
    for sidecar in durability.sidecars:
        done = _cli("run", "--once", "--progress", "off", *_where(sidecar, cluster))
        assert done.returncode == 0, done.stderr
        report = tmp_path / f"verify-{sidecar.state.parent.name}"
        done = _cli(
            "verify", "--hot", str(cluster.store_root), "--cold", str(sidecar.cold),
            "--cluster", sidecar.cluster, "--broker", sidecar.broker, "--out", str(report),
            "--level", "content", "--lag-allowance", "30s", "--metadata", str(sidecar.state),
        )  # fmt: skip
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert json.loads((report / "report.json").read_text())["verdict"] == "CLEAN"
