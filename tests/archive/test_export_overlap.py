"""``export`` reads like ``restore``: two committed segments over the same offsets are
refused, exit 2 naming both, nothing written (issue 34, row 8).

The cold store holds the queue tiered in 16 KiB segments plus one whole segment of a
second tiering in 9 KiB segments (manifest and objects, all valid) whose start is no
start of the first: its offsets are committed twice. Before, ``export`` exited 0 and
wrote both versions (more rows than offsets).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import fsspec
import pytest

from tests.fixtures_sidecar import Tier
from tests.support.moto import ACCESS_KEY, SECRET_KEY, S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.cli.main import main
from tieredstore.cold.layout import SegmentKind, broker_prefix, parse_object_key
from tieredstore.cold.manifest import Manifest, read_manifest
from tieredstore.hot.synth import SynthSpec, synthesize

pytestmark = pytest.mark.slow  # two tierings: over a second

SPEC = SynthSpec(topics=1, queues=1, messages=600, body_min=100, body_max=400, seed=7)


def _manifests(cold: Path) -> dict[int, tuple[Path, Manifest]]:
    root = cold / broker_prefix(CLUSTER, BROKER)
    out = {}
    for path in root.rglob("MANIFEST/*"):
        key = str(path.relative_to(cold))
        if parse_object_key(key).kind is SegmentKind.MANIFEST:
            m = read_manifest(path.read_bytes(), key)
            out[m.start_offset] = (path, m)
    return out


def _overlapping_cold(tmp_path: Path, tier: Tier) -> tuple[Path, Manifest]:
    """A cold root whose queue commits some offsets twice; return it and the intruder."""
    store = synthesize(tmp_path / "store", SPEC).root
    cold, other = tmp_path / "cold", tmp_path / "other"
    asyncio.run(tier(store, str(cold), tmp_path / "s1", tiering__segment_max_bytes="16K"))
    asyncio.run(tier(store, str(other), tmp_path / "s2", tiering__segment_max_bytes="9K"))
    mine, theirs = _manifests(cold), _manifests(other)
    start = next(s for s in sorted(theirs) if s not in mine and s > 0)
    path, intruder = theirs[start]
    for key in (intruder.key, intruder.commit_log_key, intruder.consume_queue_key):
        (cold / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(other / key, cold / key)
    assert path.exists()
    return cold, intruder


def _export(cold: str, out: str, *flags: str) -> int:
    return main(["export", "--format", "parquet", "--cold", cold, "--cluster", CLUSTER,
                 "--broker", BROKER, "--out", out, *flags])  # fmt: skip


def test_overlapping_history_is_refused_with_exit_2_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tier: Tier
) -> None:
    cold, intruder = _overlapping_cold(tmp_path, tier)
    out = tmp_path / "out"
    capsys.readouterr()
    assert _export(str(cold), str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("tieredstore export: committed segments")
    assert "overlap" in err and intruder.key in err
    assert not out.exists() or not list(out.rglob("*.parquet"))


@pytest.mark.s3
def test_overlapping_history_on_s3_is_refused(
    tmp_path: Path, s3_bucket: S3Bucket, capsys: pytest.CaptureFixture[str], tier: Tier
) -> None:
    cold, intruder = _overlapping_cold(tmp_path, tier)
    fs = fsspec.filesystem("s3", endpoint_url=s3_bucket.endpoint_url, key=ACCESS_KEY,
                           secret=SECRET_KEY)  # fmt: skip
    fs.pipe({f"{s3_bucket.name}/cold/{p.relative_to(cold)}": p.read_bytes()
             for p in cold.rglob("*") if p.is_file()})  # fmt: skip
    capsys.readouterr()
    code = _export(f"{s3_bucket.url}/cold", f"{s3_bucket.url}/lake",
                   "--endpoint-url", s3_bucket.endpoint_url)  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert intruder.key in err
    assert not fs.glob(f"{s3_bucket.name}/lake/**/*.parquet")
