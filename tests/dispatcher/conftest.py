"""Fixtures the dispatcher's tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tieredstore.hot.synth import SynthSpec, synthesize


@pytest.fixture
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A synthetic broker store at ``tmp_path / "store"``, written from the test
    module's ``SPEC`` (a :class:`~tieredstore.hot.synth.SynthSpec`)."""
    spec = request.module.SPEC
    assert isinstance(spec, SynthSpec), f"{request.module.__name__} defines no SPEC"
    return synthesize(tmp_path / "store", spec).root
