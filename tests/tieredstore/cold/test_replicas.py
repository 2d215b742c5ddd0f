"""Replica reports (tieredstore/cold/replicas.py): round trip, strict parsing, listing."""

from __future__ import annotations

import pytest

from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.cold.layout import replica_key
from tieredstore.cold.replicas import ReplicaReport, publish_report, read_reports
from tieredstore.errors import CorruptProvenanceError, InvalidNameError

REPORT = ReplicaReport("broker-a-1", confirmed=4096, beat=7, written_ms=1_700_000_000_000)


def test_round_trip_and_the_key() -> None:
    assert ReplicaReport.decode(REPORT.encode(), where="k") == REPORT
    assert replica_key("C", "b", "r1").endswith("_C/b/_replicas/r1.json")
    with pytest.raises(InvalidNameError):
        replica_key("C", "b", "../x")


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"{", "not valid JSON"),
        (b'{"format_version": 1, "replica": "r", "confirmed": 1, "beat": 1}', "written_ms"),
        (
            b'{"format_version": 1, "replica": "r", "confirmed": -1, "beat": 1, "written_ms": 0}',
            "negative",
        ),
        (
            b'{"format_version": 1, "replica": "r", "confirmed": 1, "beat": 1, "written_ms": 0,'
            b' "x": 1}',
            "unknown fields",
        ),
    ],
)
def test_a_bad_report_is_refused_naming_the_object(data: bytes, says: str) -> None:
    with pytest.raises(CorruptProvenanceError, match=says) as err:
        ReplicaReport.decode(data, where="_replicas/r.json")
    assert "_replicas/r.json" in str(err.value)


async def test_read_reports_lists_every_replica_and_checks_the_name() -> None:
    reset_memory_stores()
    backend = MemoryBackend("replica-reports")
    assert await read_reports(backend, "C", "b") == []
    await publish_report(backend, "C", "b", REPORT)
    await publish_report(backend, "C", "b", ReplicaReport("broker-a-0", 1, 1, 1))
    assert [r.replica for r in await read_reports(backend, "C", "b")] == [
        "broker-a-0",
        "broker-a-1",
    ]
    await backend.write(replica_key("C", "b", "other"), REPORT.encode())
    with pytest.raises(CorruptProvenanceError, match="names replica 'broker-a-1'"):
        await read_reports(backend, "C", "b")
