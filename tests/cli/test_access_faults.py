"""The first hour on S3: no credentials, wrong credentials, a missing bucket, a key denied
one operation. Every command that touches the cold store gives the one line of
:class:`~tieredstore.errors.ColdStoreAccessError`, exits 3 and leaves nothing behind.

No credentials and a missing bucket run against the suite's moto server; wrong keys and
denied operations against ``auth_moto``, a second moto server that checks signatures and
IAM policies as S3 does. Commands run in-process (``main``), each in an environment
holding only what the fault leaves: no AWS variable at all, an empty HOME, no profile
files, no instance-role lookup.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import botocore.exceptions
import pytest

from tests.fixtures_s3 import AuthMoto
from tests.support.moto import REGION, IamKey, S3Bucket
from tieredstore.backends.s3 import access_fault
from tieredstore.cli.main import main
from tieredstore.errors import AccessFault
from tieredstore.hot.synth import SynthSpec, synthesize


@dataclass(frozen=True)
class Case:
    """Where the cold store is, the credentials the environment holds, and the words the
    one line must say."""

    endpoint: str
    bucket: str
    key: IamKey | None
    words: str


def _commands(tmp: Path, store: Path) -> dict[str, list[str]]:
    state = ["--store", str(store), "--state-dir", str(tmp / "state")]
    queue = ["--topic", "SynthTopic0", "--queue", "0"]
    return {
        "run": ["run", *state],
        "run --once": ["run", "--once", *state],
        "verify": ["verify", "--hot", str(store), "--out", str(tmp / "report")],
        "verify --fleet": ["verify", "--fleet", "--out", str(tmp / "fleet")],
        "fingerprint": ["fingerprint", "--store", str(store)],
        "read": ["read", *queue, "--offset", "0"],
        "export": ["export", "--format", "parquet", "--out", str(tmp / "lake")],
        "restore": ["restore", "--out", str(tmp / "restored")],
        "lease show": ["lease", "show"],
        "gc": ["gc", *state],
        "expire": ["expire", *state],
        "repair": ["repair", *queue, *state],
        "resume": ["resume", *queue, *state],
        "rebuild-metadata": ["rebuild-metadata", "--state-dir", str(tmp / "state")],
        "check-cold": ["check-cold"],
    }


COMMANDS = list(_commands(Path("/"), Path("/")))


def _environment(monkeypatch: pytest.MonkeyPatch, tmp: Path, key: IamKey | None) -> None:
    """Only what the fault leaves: ``key`` (or no credentials at all) and the region."""
    import os

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    home = tmp.parent / f"home-{uuid.uuid4().hex[:8]}"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    for name, value in (key.env if key is not None else {}).items():
        monkeypatch.setenv(name, value)


@pytest.fixture(params=["no credentials", "no such bucket", "bad credentials", "denied"])
def case(request: pytest.FixtureRequest) -> Case:
    fault = str(request.param)
    if fault in ("no credentials", "no such bucket"):
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        name = bucket.name if fault == "no credentials" else f"missing-{uuid.uuid4().hex[:12]}"
        key = None if fault == "no credentials" else IamKey("testing", "testing")
        return Case(bucket.endpoint_url, name, key, fault)
    auth: AuthMoto = request.getfixturevalue("auth_moto")
    if fault == "bad credentials":
        wrong = IamKey(auth.no_list.access_key, "not-the-secret")
        return Case(auth.endpoint_url, auth.new_bucket(), wrong, "credentials refused")
    return Case(auth.endpoint_url, auth.new_bucket(), auth.no_list, "access denied")


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_gives_the_one_line_and_exit_3(
    command: str,
    case: Case,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = tmp_path / "store"
    synthesize(store, SynthSpec(topics=1, queues=1, messages=10))
    _environment(monkeypatch, tmp_path, case.key)
    cold = f"s3://{case.bucket}/tiered"
    where = ["--cold", cold, "--endpoint-url", case.endpoint, "--cluster", "C", "--broker", "B"]
    argv = _commands(tmp_path, store)[command]
    if command == "verify --fleet":  # no --broker: every broker of the cluster
        where = where[:-2]
    # The suite's moto server runs in this process: its access log is not the command's.
    monkeypatch.setattr(logging.getLogger("werkzeug"), "disabled", True)
    capsys.readouterr()
    code = main([*argv, *where])
    out, err = capsys.readouterr()
    name = argv[0]
    if command == "check-cold":  # one line per operation, each refused the same way
        assert code == 3, out
        assert len(out.splitlines()) == 4 and "FAILED" in out and case.words in out, out
        assert err == ""
    else:
        shape = re.compile(
            rf"^tieredstore {name}: (could not run: )?cold store {re.escape(cold)}: "
            rf"{case.words}: \w+ of s3://{case.bucket}/tiered/\S* refused \(.+\); endpoint "
            rf"{re.escape(case.endpoint)}, region {REGION}, .+\n$"
        )
        assert code == 3, (command, err)
        assert shape.match(err), (command, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # no state dir, no output


def _reply(code: str, status: int) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "ListObjectsV2",
    )


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (_reply("PermanentRedirect", 301), AccessFault.WRONG_REGION),
        (_reply("301", 301), AccessFault.WRONG_REGION),  # a HEAD: no body, no code
        (_reply("AuthorizationHeaderMalformed", 400), AccessFault.WRONG_REGION),
        (_reply("ExpiredToken", 400), AccessFault.BAD_CREDENTIALS),
        (_reply("403", 403), AccessFault.DENIED),
        (_reply("NoSuchKey", 404), None),
        (_reply("SlowDown", 503), None),
    ],
)
def test_which_replies_are_access_faults(exc: Exception, fault: AccessFault | None) -> None:
    """Faults moto does not produce (a region redirect, an expired token) read as S3's."""
    assert access_fault(exc) is fault
    wrapped = PermissionError("denied")  # s3fs's translation keeps the reply as the cause
    wrapped.__cause__ = exc
    assert access_fault(wrapped) is fault
    assert access_fault(botocore.exceptions.NoCredentialsError()) is AccessFault.NO_CREDENTIALS
