"""``verify`` flags around ``--fleet``: refused in one line, before Spark starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tieredstore.cli.main import main as cli_main
from tieredstore.verifier.verdict import EXIT_COULD_NOT_RUN


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "missing --store, --cluster, --broker"),
        (["--fleet", "--hot", "h"], "--store does not apply to --fleet"),
        (["--fleet", "--state-dir", "s"], "--state-dir does not apply to --fleet"),
        (["--fleet", "--max-fingerprint-age", "soon"], "bad --max-fingerprint-age"),
    ],
)
def test_misused_flags_exit_3_with_one_line(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main(["verify", "--cold", str(tmp_path), "--out", str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_COULD_NOT_RUN
    assert len(err.splitlines()) == 1 and message in err
